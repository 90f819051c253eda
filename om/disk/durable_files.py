"""Durable file operations: the one place that fsyncs by path and replaces atomically.

A leaf module (the standard library only), so the Raft journal, the snapshots,
the integrity markers and trees all sync the same way.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsyncs a file or a directory by path (a directory: the names it holds)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_synced(path: Path, data: bytes, durable: bool = True) -> None:
    """Replaces ``path`` by ``data`` atomically (a temporary file, then a rename);
    durable: the file and its directory are synced before this returns."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        if durable:
            os.fsync(out.fileno())
    os.replace(temporary, path)
    if durable:
        fsync_path(path.parent)
