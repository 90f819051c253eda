"""Client-side trace records (docs/TRACES.md, schema v1) and trace-file helpers.

``ClientTrace`` writes one ``client_request`` record per request through
``om.observe.tracing.Tracer`` (buffered, written in blocks, at most 4096 records in
memory). ``client_request_problems`` checks a record against the schema, for
tests and for sanity checks of a run. ``copy_window`` copies the records of
one time window from a server trace into a run directory, so warm-up traffic
never reaches the analysis. ``batch_sizes`` reads the
``requests`` of ``server_batch`` records; ``write_phase_means`` the mean of each
server phase over successful writes, and ``completion_times`` when each client
request completed (the inputs of ``bench/bound.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from om.executor.registry import KINDS
from om.observe.tracing import SCHEMA_VERSION, NullTracer, Tracer, TraceSink
from om.protocol import om_pb2

CLIENT_REQUEST = "client_request"
SERVER_BATCH = "server_batch"
SERVER_REQUEST = "server_request"
# A server_request phase field and the name the bench and the report give it, in the
# order a write goes through them (docs/TRACES.md).
SERVER_PHASES: tuple[tuple[str, str], ...] = (
    ("lock_wait_ns", "lock wait"), ("execute_ns", "execute"), ("batch_wait_ns", "batch wait"),
    ("replicate_ns", "replicate"), ("apply_ns", "apply"), ("reply_ns", "reply"),
)
CLIENT_ERROR = "CLIENT_ERROR"
# Command names of the requests that change state, e.g. "CreateKey".
WRITE_OPS = frozenset(kind.name for kind in KINDS.values() if kind.write)
_CLIENT_FIELDS: tuple[tuple[str, type], ...] = (
    ("v", int), ("kind", str), ("flow", str), ("t_ns", int), ("op", str),
    ("latency_ns", int), ("status", str), ("retries", int),
)


def op_name(request: om_pb2.OMRequest) -> str:
    """The command type's name, e.g. ``CreateKey``."""
    return om_pb2.Type.Name(request.cmd_type)


class ClientTrace:
    """Writes ``client_request`` records for one flow; ``ClientTrace.off()`` drops them."""

    def __init__(self, sink: TraceSink) -> None:
        self._sink = sink

    @classmethod
    def open(cls, path: Path, flow: str) -> ClientTrace:
        """Appends to ``path`` (its folder is created)."""
        return cls(Tracer(path, flow))

    @classmethod
    def off(cls) -> ClientTrace:
        """A trace that records nothing."""
        return cls(NullTracer())

    def request(self, t_ns: int, op: str, latency_ns: int, status: str, retries: int,
                node: str = "") -> None:
        """Records one request, from first send to final answer."""
        record: dict[str, Any] = {"t_ns": t_ns, "op": op, "latency_ns": latency_ns,
                                  "status": status, "retries": retries,
                                  "write": op in WRITE_OPS}
        if node:
            record["node"] = node
        self._sink.emit(CLIENT_REQUEST, record)

    def close(self) -> None:
        """Writes what is buffered and closes the file."""
        self._sink.close()


def client_request_problems(record: object) -> list[str]:
    """Why ``record`` is not a valid schema-v1 ``client_request``; empty when it is."""
    if not isinstance(record, dict):
        return ["not a JSON object"]
    problems = [f"{name} missing or not {kind.__name__}" for name, kind in _CLIENT_FIELDS
                if not isinstance(record.get(name), kind) or isinstance(record.get(name), bool)]
    if record.get("v") != SCHEMA_VERSION:
        problems.append(f"v is not {SCHEMA_VERSION}")
    if record.get("kind") != CLIENT_REQUEST:
        problems.append(f"kind is not {CLIENT_REQUEST}")
    if "write" in record and not isinstance(record["write"], bool):
        problems.append("write is not a bool")
    if "node" in record and not isinstance(record["node"], str):
        problems.append("node is not a string")
    return problems


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, skipping lines that are not objects."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def copy_window(source: Path, target: Path, start_ns: int, end_ns: int) -> int:
    """Copies the lines of ``source`` whose ``t_ns`` lies in [start_ns, end_ns] to
    ``target`` (created, or replaced); returns how many."""
    assert start_ns <= end_ns
    target.parent.mkdir(parents=True, exist_ok=True)
    copied = 0
    with target.open("w", encoding="utf-8") as out:
        for record in read_records(source):
            t_ns = record.get("t_ns")
            if isinstance(t_ns, int) and start_ns <= t_ns <= end_ns:
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
                copied += 1
    return copied


def batch_sizes(paths: Iterable[Path]) -> list[int]:
    """The ``requests`` of every ``server_batch`` record in ``paths``."""
    return [record["requests"] for path in paths for record in read_records(path)
            if record.get("kind") == SERVER_BATCH and isinstance(record.get("requests"), int)]


def write_phase_means(paths: Iterable[Path]) -> dict[str, float]:
    """The mean of each server phase, in ms, over the successful write requests of the
    ``server_request`` records in ``paths`` (names as in ``SERVER_PHASES``); empty when
    there are none (the etcd flow traces its client only)."""
    totals = dict.fromkeys((field for field, _ in SERVER_PHASES), 0)
    count = 0
    for path in paths:
        for record in read_records(path):
            if (record.get("kind") != SERVER_REQUEST or record.get("status") != "OK"
                    or record.get("op") not in WRITE_OPS):
                continue
            phases = [record.get(field) for field in totals]
            if all(isinstance(value, int) and value >= 0 for value in phases):
                count += 1
                for field, value in zip(totals, phases, strict=True):
                    totals[field] += int(value or 0)
    if not count:
        return {}
    return {name: totals[field] / count / 1e6 for field, name in SERVER_PHASES}


def completion_times(path: Path) -> list[int]:
    """When each ``client_request`` of ``path`` completed (``t_ns + latency_ns``), sorted."""
    return sorted(record["t_ns"] + record["latency_ns"] for record in read_records(path)
                  if record.get("kind") == CLIENT_REQUEST
                  and isinstance(record.get("t_ns"), int)
                  and isinstance(record.get("latency_ns"), int))
