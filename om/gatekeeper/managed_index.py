"""The managed index: transaction indexes decoupled from the Raft log.

Every write request takes the next index; object ids derive from it
(``om.schema.ids.object_id_for``). Each batch persists the highest index
it used. A new leader continues from above the highest persisted value, so
indexes an old leader handed out but never committed are skipped, never reused,
and ids are unique and increasing across restarts and failovers.
"""

from __future__ import annotations

from om.schema.ids import MANAGED_INDEX_MAX


class ManagedIndex:
    """A strictly increasing counter that never falls below what was persisted."""

    def __init__(self, persisted: int) -> None:
        assert 0 <= persisted <= MANAGED_INDEX_MAX
        self._last = persisted

    @property
    def last(self) -> int:
        """The highest index handed out or known persisted."""
        return self._last

    def next(self) -> int:
        """Hands out the next index."""
        self._last += 1
        assert self._last <= MANAGED_INDEX_MAX, "managed index exhausted"
        return self._last

    def advance_to(self, persisted: int) -> None:
        """Moves above a persisted value (on becoming leader); never moves back."""
        assert persisted <= MANAGED_INDEX_MAX
        self._last = max(self._last, persisted)
