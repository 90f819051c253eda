"""One table's scan by the leader's purger: a cursor, and when a row can next be due.

A time-based purge (deletedTable rows past their retention, open keys and files
and multipart uploads past their expiry) reads its table a page at a time from a
cursor that wraps at the end: a *pass*. A pass that finds no row due learns the
earliest time any row can carry: the earliest time among the rows it saw that are
not due, and the clock when the pass began (a row written after that carries a
later time, since every row's time is the executing leader's clock at its write).
Until the cutoff reaches that time no row can be due, so the table is not read.

Why that is enough, and what it costs: what a scan learned holds only for the
term in which it was learned (the purger forgets it when this node becomes the
ready leader again, so rows another leader stamped are seen by a fresh pass; a
skew between successive leaders' clocks moves a purge by no more than that skew,
as the cutoff itself does). A row executed before the pass began but applied
after the cursor passed its key, or stamped after this node's clock stepped
back, is purged up to that commit latency or clock step late. Purging is garbage
collection, never a correctness promise: such a delay is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TableScan:
    """Invariants: ``earliest_ms`` is None exactly when no pass is under way
    (``cursor`` is None then too); ``rest_before_ms`` is set only by a pass that saw
    no due row, and cleared as the cutoff reaches it."""

    cursor: bytes | None = None          # the last key read; None: the next page starts a pass
    earliest_ms: int | None = None       # the pass under way: the earliest time it could miss
    saw_due: bool = False                # the pass under way found a due row
    rest_before_ms: int | None = None    # no row is due while the cutoff is before this

    def may_hold_due(self, cutoff_ms: int) -> bool:
        """Whether a row at or before ``cutoff_ms`` may be there (else: skip the read);
        a rest the cutoff reached ends."""
        if self.rest_before_ms is not None and cutoff_ms < self.rest_before_ms:
            return False
        self.rest_before_ms = None
        return True

    def read(self, now_ms: int, last_key: bytes | None, saw_due: bool,
             earliest_later_ms: int | None) -> None:
        """Records a page read from the cursor at ``now_ms``: ``last_key`` is its last
        key when the table goes on after it (None: the pass reached the end);
        ``earliest_later_ms`` the earliest time of its rows not yet due."""
        assert self.rest_before_ms is None, "a resting table is not read"
        assert (self.cursor is None) == (self.earliest_ms is None)
        if self.cursor is None:
            assert now_ms >= 0
            self.earliest_ms, self.saw_due = now_ms, False
        assert self.earliest_ms is not None
        self.saw_due = self.saw_due or saw_due
        if earliest_later_ms is not None:
            self.earliest_ms = min(self.earliest_ms, earliest_later_ms)
        self.cursor = last_key
        if last_key is None:
            if not self.saw_due:   # a pass that purges goes round again at once
                self.rest_before_ms = self.earliest_ms
            self.earliest_ms, self.saw_due = None, False
