"""Quota reserved by requests executed on the leader but not yet applied.

A request's positive deltas are reserved when it executes and released when
its batch settles, whatever the outcome (applied, failed, leadership lost).
Negative deltas are never credited early: space is only reused once the
freeing request is applied, so concurrent requests can never over-commit.
"""

from __future__ import annotations

from collections import defaultdict

from om.executor.change_recorder import QuotaChange
from om.schema.tables import TableId

Row = tuple[TableId, bytes]


class QuotaReservationTable:
    """Reservations per volume/bucket row, owned by request tokens."""

    def __init__(self) -> None:
        self._totals: dict[Row, list[int]] = defaultdict(lambda: [0, 0])
        self._owned: dict[int, list[QuotaChange]] = {}

    def reserved(self, table: TableId, key: bytes) -> tuple[int, int]:
        """(bytes, namespace) reserved against the row."""
        total = self._totals.get((table, key))
        if total is None:
            return (0, 0)
        return (total[0], total[1])

    def reserve(self, token: int, changes: list[QuotaChange]) -> None:
        """Reserves the positive parts of ``changes`` for ``token``."""
        assert token not in self._owned, "a token reserves once"
        positive = [c for c in changes if c.bytes_delta > 0 or c.namespace_delta > 0]
        if not positive:
            return
        self._owned[token] = positive
        for change in positive:
            total = self._totals[(change.table, change.key)]
            total[0] += max(change.bytes_delta, 0)
            total[1] += max(change.namespace_delta, 0)

    def release(self, token: int) -> None:
        """Releases what ``token`` reserved; a no-op when it reserved nothing."""
        for change in self._owned.pop(token, []):
            row = (change.table, change.key)
            total = self._totals[row]
            total[0] -= max(change.bytes_delta, 0)
            total[1] -= max(change.namespace_delta, 0)
            assert total[0] >= 0
            assert total[1] >= 0
            if total == [0, 0]:
                del self._totals[row]

    def __len__(self) -> int:
        return len(self._owned)
