"""Committed replies kept in memory: the bounded copy of clientRequestReplyTable rows.

Both flows answer a retry of a committed write from memory when they can: the
leader flow's retry cache (``om/gatekeeper/retry_cache.py``) and the old flow's
Ratis-style cache (``om/statemachine/replicated_apply.py``). Each keeps the replies
here, keyed by ``RetryKey``, least recently used first out, at most
``entries_max`` of them; the table rows stay the source of truth.

``bytes`` estimates what the entries hold in the Python heap: their payload (the
response, the fingerprint, the client id) plus ``ENTRY_OVERHEAD_BYTES`` of objects
per entry (the key and value tuples, the integers, the ordered dict's slot),
measured with tracemalloc on CPython 3.11 and checked by a test to stay within a
quarter of what tracemalloc sees. A soak judges a node's memory growth net of it
(``om/chaos/resources.py``): a full cache is a bound reached, not a leak.

Invariant: ``bytes`` is the sum of ``entry_bytes`` over the entries held, and
there are never more than ``entries_max`` of them. Not thread-safe: the old
flow's cache holds its lock around every call.
"""

from __future__ import annotations

from collections import OrderedDict

from om.schema.ids import RetryKey

ENTRY_OVERHEAD_BYTES = 360

Reply = tuple[bytes, int, bytes]   # response, batch timestamp (ms), request fingerprint


def entry_bytes(key: RetryKey, reply: Reply) -> int:
    """What one entry is estimated to hold in memory."""
    return len(key[0]) + len(reply[0]) + len(reply[2]) + ENTRY_OVERHEAD_BYTES


class RecentReplies:
    """Replies by retry key, bounded in entries, the least recently used evicted first."""

    def __init__(self, entries_max: int) -> None:
        assert entries_max > 0
        self.entries_max = entries_max
        self._entries: OrderedDict[RetryKey, Reply] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: RetryKey) -> Reply | None:
        """The entry of ``key`` (now the most recently used), or None."""
        reply = self._entries.get(key)
        if reply is not None:
            self._entries.move_to_end(key)
        return reply

    def put(self, key: RetryKey, reply: Reply) -> None:
        """Keeps ``reply`` for ``key`` (replacing any), evicting the least recently used
        past ``entries_max``."""
        self.drop(key)
        self._entries[key] = reply
        self.bytes += entry_bytes(key, reply)
        while len(self._entries) > self.entries_max:
            evicted, old = self._entries.popitem(last=False)
            self.bytes -= entry_bytes(evicted, old)
        assert len(self._entries) <= self.entries_max
        assert self.bytes >= len(self._entries) * ENTRY_OVERHEAD_BYTES

    def drop(self, key: RetryKey) -> None:
        """Forgets ``key``'s entry, if any."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= entry_bytes(key, old)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
