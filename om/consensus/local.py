"""A single-node replicator: positions count up; apply happens at once."""

from __future__ import annotations

import time

from om.consensus.port import ApplyEntry, ReplicateResult, ReplicateStatus, Role


class LocalReplicator:
    """Commits an entry by applying it as the next position; there is no Raft."""

    def __init__(self, node_id: str, address: str, applied_index: int,
                 apply_entry: ApplyEntry) -> None:
        assert applied_index >= 0
        self._node_id = node_id
        self._address = address
        self._apply_entry = apply_entry
        self._position = applied_index

    async def replicate(self, entry: bytes) -> ReplicateResult:
        """Applies the entry as the next position. No await: apply completes
        before any other coroutine runs, so callers see it applied at once."""
        self._position += 1
        started = time.perf_counter_ns()
        applied = self._apply_entry(self._position, entry)
        if not applied.applied:
            return ReplicateResult(ReplicateStatus.LEADER_CHANGED)
        return ReplicateResult(ReplicateStatus.COMMITTED, self._position,
                               time.perf_counter_ns() - started, applied.response)

    def role(self) -> Role:
        return Role(is_leader=True, ready=True, leader_id=self._node_id,
                    leader_address=self._address, term=1, commit_index=self._position)

    async def start(self) -> None:
        """Nothing to start: it leads from the first entry."""

    async def close(self) -> None:
        """Nothing to stop: no entry is ever in flight between two loop iterations."""

    def metrics(self) -> dict[str, float]:
        """No gauges of its own: one node never changes leader."""
        return {}
