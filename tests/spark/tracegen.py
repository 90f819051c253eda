"""Writing small synthetic trace files (schema v1) whose analysis is known in advance."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MS = 1_000_000
S = 1_000 * MS
# A whole second of wall clock, so per-second buckets start at a flow's first request.
T0 = 1_700_000_000 * S

Record = dict[str, Any]


def client(
    flow: str,
    t_ns: int,
    latency_ns: int,
    *,
    op: str = "CreateKey",
    status: str = "OK",
    write: bool | None = True,
) -> Record:
    """A client_request record; `write` None leaves the optional field out."""
    record: Record = {
        "v": 1,
        "kind": "client_request",
        "flow": flow,
        "t_ns": t_ns,
        "op": op,
        "latency_ns": latency_ns,
        "status": status,
        "retries": 0,
        "node": "om1",
    }
    if write is not None:
        record["write"] = write
    return record


def server(
    flow: str,
    t_ns: int,
    phases_ms: tuple[int, int, int, int, int, int],
    *,
    op: str = "CreateKey",
    status: str = "OK",
    batch_id: int = 1,
) -> Record:
    """A server_request record; `phases_ms` are lock_wait, execute, batch_wait,
    replicate, apply, reply in milliseconds."""
    names = ("lock_wait_ns", "execute_ns", "batch_wait_ns", "replicate_ns", "apply_ns", "reply_ns")
    record: Record = {
        "v": 1,
        "kind": "server_request",
        "flow": flow,
        "t_ns": t_ns,
        "node": "om1",
        "op": op,
        "status": status,
        "batch_id": batch_id,
    }
    record.update({name: value * MS for name, value in zip(names, phases_ms, strict=True)})
    return record


def batch(flow: str, t_ns: int, batch_id: int, requests: int, size: int) -> Record:
    """A server_batch record of `requests` requests and `size` bytes."""
    return {
        "v": 1,
        "kind": "server_batch",
        "flow": flow,
        "t_ns": t_ns,
        "node": "om1",
        "batch_id": batch_id,
        "requests": requests,
        "bytes": size,
        "replicate_ns": 2 * MS,
        "apply_ns": MS,
    }


def fault(flow: str, t_ns: int, action: str, node: str) -> Record:
    """A fault record."""
    return {"v": 1, "kind": "fault", "flow": flow, "t_ns": t_ns, "action": action, "node": node}


def write_lines(path: Path, lines: Iterable[str]) -> Path:
    """Write `lines` as a JSON Lines file, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_records(path: Path, records: Iterable[Record]) -> Path:
    """Write `records` as one JSON object per line."""
    return write_lines(path, (json.dumps(record) for record in records))


def traces_dir(run_dir: Path, flow: str) -> Path:
    """The traces directory of one flow of a run (docs/TRACES.md layout)."""
    return run_dir / flow / "traces"
