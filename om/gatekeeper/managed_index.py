"""The managed index: transaction indexes decoupled from the Raft log.

Every write request takes the next index; object ids derive from it
(``om.schema.ids.object_id_for``). Each batch persists the highest index
it used. A new leader continues from above the highest persisted value, so
indexes an old leader handed out but never committed are skipped, never reused,
and ids are unique and increasing across restarts and failovers.

With S shards (docs/SHARDS.md) each shard keeps its own managed index, in its own
store, and hands out only the indexes congruent to its number modulo S: shard k of S
takes k, k + S, k + 2S, ... (shard 0 starts at S, 0 meaning "a read"). So two
shards never hand out the same index, hence never the same object id, though
neither sees the other's counter; within a shard indexes still increase, and on
every replica a shard's ids are those its leader recorded (the seed's warning: an
id derived from the Raft index breaks once several executors share one log; a
counter per shard, on disjoint residues, does not). At S = 1 the stride is 1: the
indexes are today's.
"""

from __future__ import annotations

from om.schema.ids import MANAGED_INDEX_MAX


class ManagedIndex:
    """A strictly increasing counter that never falls below what was persisted, on the
    residue ``shard`` modulo ``shards``."""

    def __init__(self, persisted: int, shard: int = 0, shards: int = 1) -> None:
        assert 0 <= persisted <= MANAGED_INDEX_MAX
        assert 0 <= shard < shards
        self._last = persisted
        self._shard = shard
        self._shards = shards

    @property
    def last(self) -> int:
        """The highest index handed out or known persisted."""
        return self._last

    def next(self) -> int:
        """Hands out the next index: the smallest above ``last`` on this shard's residue."""
        above = self._last + 1
        self._last = above + (self._shard - above) % self._shards
        assert self._last % self._shards == self._shard, "an index of another shard"
        assert self._last <= MANAGED_INDEX_MAX, "managed index exhausted"
        return self._last

    def advance_to(self, persisted: int) -> None:
        """Moves above a persisted value (on becoming leader); never moves back."""
        assert persisted <= MANAGED_INDEX_MAX
        self._last = max(self._last, persisted)
