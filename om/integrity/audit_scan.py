"""The auditor's first pass over a checkpoint, in a process of its own.

``python -m om.integrity.audit_scan CHECKPOINT OUT ROWS_PER_S EXPIRY_MS GRACE_MS``
runs ``auditor.find_candidates`` over a checkpoint of a node's store at the
given pace and writes the candidates and the row count to ``OUT`` as JSON.

Why: the scan parses every row and sums every bucket's keys, in Python. In
the serving process it held the GIL the event loop needs (measured at 100k
keys under write load: write throughput fell from ~1,000 to ~400 requests/s
while it ran); in a process of its own, at a lower priority, it competes only
for a core. A checkpoint is one consistent position (apply writes each batch
atomically), so the scan cannot see a half-applied batch; the node then
confirms each candidate against its *live* store (``auditor.confirm``): a
row changed since the checkpoint is cleared, not reported.

``load_candidates`` reads the file back.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

from om.integrity import auditor
from om.integrity.auditor import AuditConfig, Violation
from om.integrity.scan import RateLimit, ThrottledView
from om.statemachine.store import Store

NICE = 10


def main(argv: list[str]) -> int:
    """Scans and writes the candidates; returns the exit status (2: bad arguments)."""
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    checkpoint, out = Path(argv[0]), Path(argv[1])
    rows_per_s = int(argv[2])
    config = AuditConfig(retry_expiry_ms=int(argv[3]), retry_grace_ms=int(argv[4]))
    with contextlib.suppress(OSError):  # not allowed here: run at the normal priority
        os.nice(NICE)
    store = Store(checkpoint)
    try:
        view = ThrottledView(store, RateLimit(rows_per_s=rows_per_s if rows_per_s > 0 else None))
        candidates, rows = auditor.find_candidates(view, config)
    finally:
        store.close()
    out.write_text(json.dumps({"rows": rows, "candidates": [
        {"category": v.category, "subject": v.subject, "detail": v.detail,
         "table": v.table, "key": (v.key or b"").hex()} for v in candidates]}))
    return 0


def load_candidates(path: Path) -> tuple[list[Violation], int]:
    """The candidates and the row count ``main`` wrote."""
    found = json.loads(path.read_text())
    return [Violation(c["category"], c["subject"], c["detail"], c["table"],
                      bytes.fromhex(c["key"])) for c in found["candidates"]], int(found["rows"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
