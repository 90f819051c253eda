"""Multiplying a real run's traces, to measure the analysis at sizes no bench run reaches.

    python -m spark_analysis.replicate SRC_RUN DST_RUN (--factor K | --records N)

Writes DST_RUN as if each flow of SRC_RUN had run K times back to back: copy ``i``
(0-based) of every record has its absolute times shifted by ``i`` times the flow's
period and its batch ids (server_request and server_batch, never the ``0`` of "no
batch") by ``i`` times the flow's largest batch id. The period is the flow's span,
from its first record's ``t_ns`` to the last moment any record covers (a client's
completion, a server phase's end), rounded up to a millisecond. Hence, for every flow:

* every kind and every malformed reason counts exactly K times as many records;
* durations (latencies, phases, batch sizes) are the source's, K times over, so
  latency percentiles and per-phase figures stay those of the source run;
* the copies never overlap in time and are contiguous, so a flow's throughput stays
  the source's (the K - 1 gaps between copies are under a millisecond each);
* batch ids stay unique per flow, and each request still names the batch that carried it.

Lines that are not a JSON object with an integer ``t_ns`` (malformed lines, which the
reader skips and counts) are copied verbatim. Only the trace files the analysis reads
(``runs.TRACE_GLOB``) are replicated; ``summary.json`` is copied as it is (its CPU
and memory records describe the source run) and ``manifest.json`` gains a
``replicated`` entry naming the source, the factor and each flow's period.

The work is plain files, streamed: one pass over the source to find each flow's
period and largest batch id, then K passes writing the copies; memory stays that of
one line. DST_RUN must not exist or be empty, K is at most ``FACTOR_MAX``, and the
output's size (K times the source's trace bytes) must fit in the destination's free
space with ``FREE_SPACE_MARGIN`` to spare, or nothing is written; a write that fails
midway (the disk filled anyway) removes what it wrote.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from spark_analysis.runs import TRACE_GLOB

FACTOR_MAX = 10_000
FREE_SPACE_MARGIN = 1.1
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
NS_PER_MS = 1_000_000
# Durations that end a record's coverage after its t_ns (docs/TRACES.md).
_CLIENT_SPAN = ("latency_ns",)
_SERVER_SPAN = ("lock_wait_ns", "execute_ns", "batch_wait_ns", "replicate_ns", "apply_ns",
                "reply_ns")
_BATCH_SPAN = ("replicate_ns", "apply_ns")
_SPAN_FIELDS = {"client_request": _CLIENT_SPAN, "server_request": _SERVER_SPAN,
                "server_batch": _BATCH_SPAN}
_BATCHED_KINDS = ("server_request", "server_batch")


class ReplicateError(Exception):
    """The replica cannot be written: a bad source, destination, factor or no space."""


@dataclass(frozen=True)
class FlowShift:
    """How copy ``i`` of one flow's records is moved: ``t_ns + i * period_ns`` and a
    non-zero ``batch_id + i * batch_ids``. Both are positive, so copies are disjoint."""

    period_ns: int
    batch_ids: int


@dataclass(frozen=True)
class Replica:
    """What `replicate` wrote: the factor, source and output record lines."""

    factor: int
    source_lines: int
    lines: int


def replicate(source: Path, destination: Path, factor: int) -> Replica:
    """Write ``factor`` back-to-back copies of every flow of run ``source`` into
    ``destination`` (see the module docstring); raises ReplicateError before writing
    anything when the inputs are wrong or the space is short."""
    files = _trace_files(source)
    _check_destination(destination, factor, sum(path.stat().st_size for path in files))
    shifts = {flow: _flow_shift([path for path in files if _flow_of(source, path) == flow])
              for flow in sorted({_flow_of(source, path) for path in files})}
    destination.mkdir(parents=True, exist_ok=True)
    try:
        replica = _write_replica(source, destination, files, shifts, factor)
    except BaseException as failure:
        shutil.rmtree(destination, ignore_errors=True)   # it was empty: nothing of the user's
        if isinstance(failure, OSError):
            raise ReplicateError(f"writing {destination} failed, nothing kept: "
                                 f"{failure}") from failure
        raise
    return replica


def _write_replica(source: Path, destination: Path, files: Sequence[Path],
                   shifts: dict[str, FlowShift], factor: int) -> Replica:
    source_lines = lines = 0
    for path in files:
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        written = _write_copies(path, target, shifts[_flow_of(source, path)], factor)
        source_lines += written // factor
        lines += written
    _copy_run_files(source, destination, factor, shifts)
    assert lines == source_lines * factor
    return Replica(factor=factor, source_lines=source_lines, lines=lines)


def factor_for(source: Path, records: int) -> int:
    """The smallest factor whose replica holds at least ``records`` trace lines."""
    if records < 1:
        raise ReplicateError("--records must be at least 1")
    source_lines = sum(1 for path in _trace_files(source) for line in _lines(path))
    if source_lines == 0:
        raise ReplicateError(f"{source} has trace files but no trace lines")
    return max(1, math.ceil(records / source_lines))


def _trace_files(source: Path) -> list[Path]:
    if not source.is_dir():
        raise ReplicateError(f"{source} is not a directory")
    files = sorted(source.glob(TRACE_GLOB))
    if not files:
        raise ReplicateError(f"{source} holds no trace files ({TRACE_GLOB})")
    return files


def _check_destination(destination: Path, factor: int, source_bytes: int) -> None:
    if not 1 <= factor <= FACTOR_MAX:
        raise ReplicateError(f"the factor must be from 1 to {FACTOR_MAX}, not {factor}")
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise ReplicateError(f"{destination} exists and is not an empty directory")
    existing = next(parent for parent in (destination, *destination.parents) if parent.exists())
    needed = int(source_bytes * factor * FREE_SPACE_MARGIN)
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise ReplicateError(f"the replica needs about {needed:,} bytes and {existing} has "
                             f"{free:,} free")


def _flow_of(source: Path, path: Path) -> str:
    """The flow directory a trace file belongs to (``<flow>/traces/<file>``)."""
    return path.relative_to(source).parts[0]


def _lines(path: Path) -> Iterator[str]:
    """The file's lines without their line ends, blank ones included (they are copied)."""
    with path.open(encoding="utf-8", errors="surrogateescape") as lines:
        for line in lines:
            yield line.rstrip("\n")


def _record(line: str) -> dict[str, Any] | None:
    """The line's record when it is a JSON object with an integer t_ns, else None
    (a line with bytes that are not UTF-8 is never re-encoded: it stays verbatim)."""
    try:
        line.encode("utf-8")
        found = json.loads(line)
    except ValueError:
        return None
    if not isinstance(found, dict) or not _is_int(found.get("t_ns")):
        return None
    return found


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _flow_shift(files: Sequence[Path]) -> FlowShift:
    """The period and batch-id stride of one flow: its span in whole milliseconds
    (at least one) and its largest batch id plus one."""
    first: int | None = None
    last: int | None = None
    largest_batch = 0
    for record in (_record(line) for path in files for line in _lines(path)):
        if record is None:
            continue
        start: int = record["t_ns"]
        first = start if first is None else min(first, start)
        last = max(start + _covered_ns(record), start if last is None else last)
        batch = record.get("batch_id")
        if record.get("kind") in _BATCHED_KINDS and _is_int(batch):
            largest_batch = max(largest_batch, batch)
    span = 0 if first is None or last is None else last - first
    period = max(1, math.ceil((span + 1) / NS_PER_MS)) * NS_PER_MS
    return FlowShift(period_ns=period, batch_ids=largest_batch + 1)


def _covered_ns(record: dict[str, Any]) -> int:
    """How long after its t_ns a record's durations reach (its positive ones summed)."""
    fields = _SPAN_FIELDS.get(str(record.get("kind")), ())
    return sum(value for name in fields if _is_int(value := record.get(name)) and value > 0)


def _write_copies(source: Path, target: Path, shift: FlowShift, factor: int) -> int:
    """Write the ``factor`` copies of one file in time order; returns the lines written."""
    written = 0
    with target.open("w", encoding="utf-8", errors="surrogateescape") as out:
        for copy in range(factor):
            for line in _lines(source):
                out.write(_shifted(line, shift, copy) + "\n")
                written += 1
    return written


def _shifted(line: str, shift: FlowShift, copy: int) -> str:
    """Copy ``copy`` of one line: times and batch ids moved, or the line as it was."""
    if copy == 0:
        return line
    record = _record(line)
    if record is None:
        return line
    record["t_ns"] += copy * shift.period_ns
    batch = record.get("batch_id")
    if record.get("kind") in _BATCHED_KINDS and _is_int(batch) and batch > 0:
        record["batch_id"] = batch + copy * shift.batch_ids
    return json.dumps(record, separators=(",", ":"))


def _copy_run_files(source: Path, destination: Path, factor: int,
                    shifts: dict[str, FlowShift]) -> None:
    """Copy summary.json as it is, and manifest.json with a ``replicated`` entry."""
    if (source / SUMMARY).is_file():
        shutil.copyfile(source / SUMMARY, destination / SUMMARY)
    manifest: dict[str, Any] = {}
    try:
        found = json.loads((source / MANIFEST).read_text(encoding="utf-8"))
        manifest = found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        pass
    manifest["replicated"] = {
        "from": str(source.resolve()), "factor": factor,
        "by": "python -m spark_analysis.replicate",
        "period_ns": {flow: shift.period_ns for flow, shift in shifts.items()},
    }
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exits 0 on success, 1 when the replica cannot be written."""
    parser = argparse.ArgumentParser(prog="python -m spark_analysis.replicate",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, metavar="SRC_RUN")
    parser.add_argument("destination", type=Path, metavar="DST_RUN")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--factor", type=int, help="copies of each flow")
    size.add_argument("--records", type=int,
                      help="at least this many trace lines (the factor is rounded up)")
    args = parser.parse_args(argv)
    try:
        factor = args.factor if args.factor is not None else factor_for(args.source,
                                                                         args.records)
        replica = replicate(args.source, args.destination, factor)
    except ReplicateError as problem:
        print(f"replicate: {problem}", file=sys.stderr)
        return 1
    print(f"replicate: {replica.lines:,} trace lines in {args.destination} "
          f"({replica.factor} copies of {replica.source_lines:,})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
