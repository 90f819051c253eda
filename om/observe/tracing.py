"""Trace records (docs/TRACES.md, schema v1), buffered and written in blocks.

A ``Tracer`` keeps at most ``buffer_records`` records in memory and writes
them as JSON lines when the buffer fills or on ``flush``/``close``. A
``NullTracer`` drops everything, so call sites never branch on "tracing on?".

Records written once per request (``server_request``) go through a
``LineFormat``: the record's constant part (version, kind, flow, node) is
JSON-encoded once, and each record is one ``%`` format of its numbers and
names, so a record costs about a microsecond instead of a dict and a
``json.dumps`` (~6 µs a request on the leader, measured: CHANGELOG.md, *Performance history*).
The lines are the same JSON objects the schema states.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol

SCHEMA_VERSION = 1


class LineFormat:
    """One record kind's JSON line: constant fields encoded once, then, per record,
    integers (``int`` fields) and names (``str`` fields: enum names such as
    ``CommitKey`` or ``KEY_NOT_FOUND``, which never need escaping) in order.

    ``line(*values)`` returns the line without its newline; the caller passes the
    values in the order of ``fields``, each of its type (the format checks ints)."""

    def __init__(self, kind: str, constants: dict[str, str], fields: tuple[tuple[str, type], ...],
                 ) -> None:
        assert fields
        head = {"v": SCHEMA_VERSION, "kind": kind, **constants}
        parts = [json.dumps(head, separators=(",", ":"))[:-1]]
        for name, kind_of in fields:
            assert kind_of in (int, str), f"{name}: a LineFormat field is an int or a name"
            parts.append(f',"{name}":%d' if kind_of is int else f',"{name}":"%s"')
        self.fields = fields
        self._format = "".join(parts) + "}"

    def line(self, *values: object) -> str:
        """The record's line."""
        return self._format % values


class TraceSink(Protocol):
    """Where trace records go; ``enabled`` is False when every record is dropped, so
    callers on the request path can skip building them. ``flow`` is the flow every
    record names."""

    enabled: bool
    flow: str

    def emit(self, kind: str, record: dict[str, Any]) -> None:
        """Records one trace record of ``kind`` (fields per docs/TRACES.md)."""
        ...

    def emit_line(self, line: str) -> None:
        """Records one record already formatted as a JSON line (``LineFormat.line``)."""
        ...

    def flush(self) -> None:
        """Writes buffered records out."""
        ...

    def close(self) -> None:
        """Flushes and releases the file."""
        ...


class NullTracer:
    """Drops every record."""

    enabled = False
    flow = ""

    def emit(self, kind: str, record: dict[str, Any]) -> None:
        return None

    def emit_line(self, line: str) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


class Tracer:
    """Appends JSON-lines trace records to one file. Thread-safe."""

    enabled = True

    def __init__(self, path: Path, flow: str, buffer_records: int = 4096) -> None:
        assert buffer_records > 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self.flow = flow
        self._buffer: list[str] = []
        self._buffer_records = buffer_records
        self._lock = threading.Lock()

    def emit(self, kind: str, record: dict[str, Any]) -> None:
        self.emit_line(json.dumps({"v": SCHEMA_VERSION, "kind": kind, "flow": self.flow,
                                   **record}, separators=(",", ":")))

    def emit_line(self, line: str) -> None:
        with self._lock:
            self._buffer.append(line)
            if len(self._buffer) >= self._buffer_records:
                self._write_locked()

    def flush(self) -> None:
        with self._lock:
            self._write_locked()
            self._file.flush()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._file.close()

    def _write_locked(self) -> None:
        if self._buffer:
            self._file.write("\n".join(self._buffer) + "\n")
            self._buffer.clear()
