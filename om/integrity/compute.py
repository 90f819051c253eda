"""Computes the trees of one verify checkpoint, in a process of its own.

``python -m om.integrity.compute CHECKPOINT OUT POSITION SALT_HEX LEAF_BITS FANOUT_BITS
ROWS_PER_S`` scans the checkpoint at the given pace, checks that it holds
``POSITION``, and saves the trees to ``OUT`` (``scan.save_trees``: atomic,
durable). The node's verifier starts it (``om.integrity.verifier``): the scan
hashes every row in Python, and in a process of its own, at a lower priority,
it neither holds the serving process's GIL nor delays apply; the rate limit
keeps it off the disk's back too.

Exit status: 0 saved; 3 the checkpoint is at another position (a bug); 2 bad
arguments.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from om.integrity import scan
from om.integrity.merkle import TreeParams
from om.integrity.scan import RateLimit

NICE = 10


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
    limit = RateLimit(rows_per_s=rows_per_s if rows_per_s > 0 else None)
    forest = scan.compute_checkpoint_trees(checkpoint, params, limit)
    if forest.applied_index != position:
        print(f"the checkpoint holds position {forest.applied_index}, not {position}",
              file=sys.stderr)
        return 3
    scan.save_trees(out, forest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
