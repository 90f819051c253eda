"""Paced scans of a store: the rate limit, a throttled read view, table pages.

Scans read through the ``ReadView`` port in pages (``Store.scan`` takes the
store's lock per page, not per table), paced by a ``RateLimit`` so a scan of a
live store or a busy disk never starves apply or the event loop: the auditor's
(``audit_scan``), the scrub's (``scrub``) and the digest build's.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

from om.schema import tables
from om.schema.read_view import Parsed, ReadView, parse_row
from om.schema.tables import TableId

PAGE_ROWS = 1000
TABLE_IDS: dict[str, TableId] = {name: table for table, name in tables.TABLE_NAMES.items()}


class RateLimit:
    """Paces a scan to at most ``rows_per_s`` rows and ``bytes_per_s`` bytes a second.

    ``charge`` sleeps whenever the work done so far is ahead of what the rates
    allow by at least ``min_sleep_s`` (short sleeps are batched, not skipped).
    None means no limit on that measure. The clock and sleep are injectable.
    """

    def __init__(self, rows_per_s: float | None = None, bytes_per_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 min_sleep_s: float = 0.01) -> None:
        assert rows_per_s is None or rows_per_s > 0
        assert bytes_per_s is None or bytes_per_s > 0
        assert min_sleep_s >= 0
        self._rows_per_s = rows_per_s
        self._bytes_per_s = bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._min_sleep_s = min_sleep_s
        self._started = clock()
        self.rows = 0
        self.bytes = 0
        self.slept_s = 0.0

    def charge(self, rows: int, nbytes: int) -> None:
        """Counts work done; sleeps until the rates allow it."""
        assert rows >= 0
        assert nbytes >= 0
        self.rows += rows
        self.bytes += nbytes
        ahead = self._earliest() - (self._clock() - self._started)
        if ahead >= self._min_sleep_s:
            self._sleep(ahead)
            self.slept_s += ahead

    def _earliest(self) -> float:
        """Seconds the work done so far may take at the least."""
        by_rows = 0.0 if self._rows_per_s is None else self.rows / self._rows_per_s
        by_bytes = 0.0 if self._bytes_per_s is None else self.bytes / self._bytes_per_s
        return max(by_rows, by_bytes)


class ThrottledView:
    """A ReadView that charges every row it returns to a rate limit (for the auditor)."""

    def __init__(self, view: ReadView, limit: RateLimit) -> None:
        self._view = view
        self._limit = limit

    def get(self, table: TableId, key: bytes) -> bytes | None:
        value = self._view.get(table, key)
        self._limit.charge(1, len(key) + (0 if value is None else len(value)))
        return value

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        rows = self._view.scan(table, prefix, start_after, limit)
        self._limit.charge(len(rows), sum(len(k) + len(v) for k, v in rows))
        return rows


# ------------------------------------------------------------------ scans ---

def table_rows(view: ReadView, table: TableId, limit: RateLimit | None = None,
               start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
    """Every row of ``table`` from key ``start`` on, in key order."""
    for page in table_pages(view, table, limit, start):
        yield from page


def table_pages(view: ReadView, table: TableId, limit: RateLimit | None = None,
                start: bytes = b"") -> Iterator[list[tuple[bytes, bytes]]]:
    """Every row of ``table`` from key ``start`` on, in key order, a page (at most
    ``PAGE_ROWS`` rows) at a time; each page is charged to ``limit`` as a whole."""
    limit = RateLimit() if limit is None else limit
    after: bytes | None = None
    if start:
        first = view.get(table, start)
        if first is not None:
            limit.charge(1, len(start) + len(first))
            yield [(start, first)]
        after = start
    while True:
        page = view.scan(table, b"", after, PAGE_ROWS)
        if page:
            limit.charge(len(page), sum(map(len, itertools.chain.from_iterable(page))))
            yield page
        if len(page) < PAGE_ROWS:
            return
        after = page[-1][0]
