"""The old flow's write cache (Ozone's PartialTableCache) and its read view.

In the old flow every node executes each request in apply and writes the
result here, tagged with the request's log position (its epoch); the double
buffer flushes it to RocksDB in the background and then evicts what it
flushed. Readers see the cache first, then RocksDB. A cached ``None`` is a
delete not yet flushed.

Thread safety: apply (Raft thread) writes, the double buffer (its thread)
evicts, and readers (event loop) read. Each operation is a single dict
operation or a copy taken under the GIL, and the double buffer evicts an entry
only after RocksDB holds it, so a reader always finds the value in one place
or the other.
"""

from __future__ import annotations

from collections.abc import Callable

from om.schema.read_view import Parsed
from om.schema.tables import TableId
from om.statemachine.store import Store

Row = tuple[TableId, bytes]


class WriteCache:
    """Applied-but-unflushed row values, by table and key, with their epochs."""

    def __init__(self) -> None:
        self._rows: dict[Row, tuple[bytes | None, int]] = {}

    def lookup(self, table: TableId, key: bytes) -> tuple[bool, bytes | None]:
        """(cached?, value): a cached None is a pending delete."""
        entry = self._rows.get((table, key))
        if entry is None:
            return False, None
        return True, entry[0]

    def put(self, table: TableId, key: bytes, value: bytes | None, epoch: int) -> None:
        """Records the row's new value (None: deleted) as of ``epoch``."""
        assert epoch > 0
        self._rows[(table, key)] = (value, epoch)

    def under(self, table: TableId, prefix: bytes) -> dict[bytes, bytes | None]:
        """Every cached row of ``table`` whose key starts with ``prefix``."""
        return {key: value for (t, key), (value, _) in list(self._rows.items())
                if t == table and key.startswith(prefix)}

    def evict(self, flushed: list[tuple[Row, int]]) -> None:
        """Drops rows RocksDB now holds, unless a later epoch changed them since."""
        for row, epoch in flushed:
            entry = self._rows.get(row)
            if entry is not None and entry[1] == epoch:
                del self._rows[row]

    def clear(self) -> None:
        """Forgets everything (a snapshot replaced the store)."""
        self._rows.clear()

    def __len__(self) -> int:
        return len(self._rows)


class CacheView:
    """A ReadView of the cache over the store: what the old flow's handlers see."""

    def __init__(self, cache: WriteCache, store: Store) -> None:
        self._cache = cache
        self._store = store

    def get(self, table: TableId, key: bytes) -> bytes | None:
        cached, value = self._cache.lookup(table, key)
        if cached:
            return value
        return self._store.get(table, key)

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        """A row the cache holds is parsed afresh; any other is the store's parsed row."""
        cached, value = self._cache.lookup(table, key)
        if cached:
            return None if value is None else parse(value)
        return self._store.parsed(table, key, parse)

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        assert limit > 0
        cached = {k: v for k, v in self._cache.under(table, prefix).items()
                  if start_after is None or k > start_after}
        deletes = sum(1 for v in cached.values() if v is None)
        wanted = limit + deletes
        stored = self._store.scan(table, prefix, start_after, wanted)
        merged: dict[bytes, bytes | None] = dict(stored)
        horizon = stored[-1][0] if len(stored) == wanted else None
        for key, value in cached.items():
            if horizon is None or key <= horizon:
                merged[key] = value
            elif value is None:
                merged.pop(key, None)
        rows = sorted((k, v) for k, v in merged.items() if v is not None)
        return rows[:limit]
