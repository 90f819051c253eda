"""Trace records (docs/TRACES.md, schema v1), buffered and written in blocks.

A ``Tracer`` keeps at most ``buffer_records`` records in memory and writes
them as JSON lines when the buffer fills or on ``flush``/``close``. A
``NullTracer`` drops everything, so call sites never branch on "tracing on?".
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol

SCHEMA_VERSION = 1


class TraceSink(Protocol):
    """Where trace records go; ``enabled`` is False when every record is dropped, so
    callers on the request path can skip building them."""

    enabled: bool

    def emit(self, kind: str, record: dict[str, Any]) -> None:
        """Records one trace record of ``kind`` (fields per docs/TRACES.md)."""
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

    def emit(self, kind: str, record: dict[str, Any]) -> None:
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
        self._flow = flow
        self._buffer: list[str] = []
        self._buffer_records = buffer_records
        self._lock = threading.Lock()

    def emit(self, kind: str, record: dict[str, Any]) -> None:
        line = json.dumps({"v": SCHEMA_VERSION, "kind": kind, "flow": self._flow, **record},
                          separators=(",", ":"))
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
