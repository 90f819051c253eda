"""Computes the trees of one verify checkpoint, in a process of its own.

``python -m om.integrity.compute CHECKPOINT OUT POSITION SALT_HEX LEAF_BITS FANOUT_BITS
ROWS_PER_S`` scans the checkpoint at the given pace, checks that it holds
``POSITION``, and writes the trees to ``OUT`` while it scans
(``tree_store.write_forest``: each node as it closes, one open node a level in
memory; atomic, durable). The node's verifier starts it (``om.integrity.verifier``): the scan
hashes every row in Python, and in a process of its own, at a lower priority,
it neither holds the serving process's GIL nor delays apply; the rate limit
keeps it off the disk's back too.

While it scans it rewrites ``OUT.progress`` about once a second with the rows
hashed so far and the checkpoint's estimated rows (``progress``), so a tool
can wait as long as the scan advances instead of a fixed time.

Exit status: 0 saved; 3 the checkpoint is at another position (a bug); 2 bad
arguments.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from om.integrity import scan, tree_store
from om.integrity.merkle import TreeParams
from om.integrity.scan import RateLimit
from om.schema import tables
from om.statemachine.store import Store

NICE = 19     # the serving processes win every contended core
PROGRESS_EVERY_S = 1.0


def progress_path(out: Path) -> Path:
    """Where the scan writing trees to ``out`` reports its progress."""
    return out.with_name(out.name + ".progress")


def read_progress(out: Path) -> tuple[int, int]:
    """(rows hashed, rows estimated) of the scan writing ``out``; (0, 0) when unknown."""
    try:
        scanned, total = progress_path(out).read_text().split()
        return int(scanned), int(total)
    except (OSError, ValueError):
        return 0, 0


class ProgressLimit(RateLimit):
    """A ``RateLimit`` that also writes the rows charged so far to a file, now and then."""

    def __init__(self, path: Path, total: int, rows_per_s: float | None) -> None:
        super().__init__(rows_per_s=rows_per_s)
        self._path, self._total = path, total
        self._written_at = 0.0

    def charge(self, rows: int, nbytes: int) -> None:
        super().charge(rows, nbytes)
        now = time.monotonic()
        if now - self._written_at >= PROGRESS_EVERY_S:
            self._written_at = now
            self.write()

    def write(self) -> None:
        tmp = self._path.with_name(self._path.name + ".tmp")
        with contextlib.suppress(OSError):    # progress is advice: never fail the scan
            tmp.write_text(f"{self.rows} {max(self._total, self.rows)}")
            os.replace(tmp, self._path)


def main(argv: list[str]) -> int:
    """Computes and saves the trees; returns the exit status."""
    if len(argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    checkpoint, out = Path(argv[0]), Path(argv[1])
    position, salt = int(argv[2]), bytes.fromhex(argv[3])
    params = TreeParams(salt, int(argv[4]), int(argv[5]))
    rows_per_s = int(argv[6])
    with contextlib.suppress(OSError):  # not allowed here: run at the normal priority
        os.nice(NICE)
    store = Store(checkpoint)
    try:
        info = store.transaction_info()
        if info.applied_index != position:
            print(f"the checkpoint holds position {info.applied_index}, not {position}",
                  file=sys.stderr)
            return 3
        limit = ProgressLimit(progress_path(out), store.estimate_rows(),
                              rows_per_s if rows_per_s > 0 else None)
        tree_store.write_forest(out, info.applied_index, info.term, params,
                                ((name, scan.table_pages(store, table, limit))
                                 for table, name in tables.TABLE_NAMES.items()))
        limit.write()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
