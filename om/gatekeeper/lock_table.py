"""A sans-IO table of FIFO read/write locks keyed by resource.

The table decides who holds what; the caller owns waiting. ``acquire_nowait``
either grants at once or queues the owner; ``release`` and ``cancel`` return
the owners they granted, whom the caller wakes. Grants are FIFO: a reader
arriving behind a queued writer waits, so writers never starve.

Entries exist only while a resource is held or awaited, so the table's size is
bounded by the number of requests in flight, which the server bounds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from om.gatekeeper.lock_plan import Level, Mode

Owner = TypeVar("Owner")
Resource = tuple[Level, str]


@dataclass
class _Entry(Generic[Owner]):
    """The holders and FIFO waiters of one resource.

    Invariant: ``writing`` is True exactly when a WRITE is held, and then its owner
    is the only holder; so a new reader is checked in O(1), however many readers
    hold the resource (every request in flight reads-locks its volume and bucket).
    """

    holders: dict[Owner, Mode] = field(default_factory=dict)
    waiters: deque[tuple[Owner, Mode]] = field(default_factory=deque)
    writing: bool = False

    def compatible(self, mode: Mode) -> bool:
        if not self.holders:
            return True
        return mode is Mode.READ and not self.writing

    def hold(self, owner: Owner, mode: Mode) -> None:
        assert owner not in self.holders, "an owner locks a resource once"
        assert self.compatible(mode)
        self.holders[owner] = mode
        self.writing = mode is Mode.WRITE

    def drop(self, owner: Owner) -> None:
        mode = self.holders.pop(owner)
        assert self.writing == (mode is Mode.WRITE)
        assert not (self.writing and self.holders), "a writer holds alone"
        self.writing = False


@dataclass(frozen=True)
class LockStatistics:
    """A snapshot of the table, for metrics and tests."""

    resources: int
    holders: int
    waiters: int


class LockTable(Generic[Owner]):
    """FIFO read/write locks on named resources."""

    def __init__(self) -> None:
        self._entries: dict[Resource, _Entry[Owner]] = {}

    def acquire_nowait(self, owner: Owner, resource: Resource, mode: Mode) -> bool:
        """Grants the lock at once (True) or queues ``owner`` for it (False)."""
        entry = self._entries.setdefault(resource, _Entry())
        assert owner not in entry.holders, "an owner locks a resource once"
        if not entry.waiters and entry.compatible(mode):
            entry.hold(owner, mode)
            return True
        entry.waiters.append((owner, mode))
        return False

    def release(self, owner: Owner, resource: Resource) -> list[Owner]:
        """Releases a held lock; returns the owners granted as a result."""
        entry = self._entries[resource]
        assert owner in entry.holders, "release of a lock not held"
        entry.drop(owner)
        return self._grant(resource, entry)

    def cancel(self, owner: Owner, resource: Resource) -> list[Owner]:
        """Withdraws ``owner`` from the lock, held or queued; returns owners granted."""
        entry = self._entries.get(resource)
        if entry is None:
            return []
        if owner in entry.holders:
            return self.release(owner, resource)
        before = len(entry.waiters)
        entry.waiters = deque((o, m) for o, m in entry.waiters if o != owner)
        assert len(entry.waiters) < before, "cancel of an owner neither holding nor waiting"
        return self._grant(resource, entry)

    def holds(self, owner: Owner, resource: Resource) -> bool:
        """True when ``owner`` holds the lock on ``resource``."""
        entry = self._entries.get(resource)
        return entry is not None and owner in entry.holders

    def statistics(self) -> LockStatistics:
        """Counts of resources, holders and waiters. Safe from another thread (the
        metrics endpoint's, while the loop takes and frees locks): the entries are
        copied in one C call, under the GIL, before Python code walks them; walking the
        live dict raised "dictionary changed size during iteration" in a soak."""
        entries = list(self._entries.values())
        return LockStatistics(
            resources=len(entries),
            holders=sum(len(e.holders) for e in entries),
            waiters=sum(len(e.waiters) for e in entries),
        )

    def _grant(self, resource: Resource, entry: _Entry[Owner]) -> list[Owner]:
        granted: list[Owner] = []
        while entry.waiters and entry.compatible(entry.waiters[0][1]):
            owner, mode = entry.waiters.popleft()
            entry.hold(owner, mode)
            granted.append(owner)
        if not entry.holders:
            assert not entry.waiters
            del self._entries[resource]
        return granted
