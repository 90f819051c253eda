"""The Replicator port: how the leader gets a log entry committed and applied.

``replicate(entry)`` resolves once the entry is committed *and applied to this
node's store*, or reports why it was not. Implementations:

* ``LocalReplicator``: a single node; the entry is "committed" when applied.
* ``om.statemachine.raft.RaftReplicator``: pysyncobj across nodes.

Callers must treat every outcome but COMMITTED as "not applied here"; for
LEADER_CHANGED the entry may still commit later under the new leader, which
is why clients retry with the same call id.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Protocol

from om.statemachine.apply import ApplyResult


class ReplicateStatus(enum.Enum):
    """The outcome of one replicate call."""

    COMMITTED = "committed"
    NOT_LEADER = "not_leader"          # refused: this node is not the leader
    LEADER_CHANGED = "leader_changed"  # leadership was lost while it was in flight
    QUEUE_FULL = "queue_full"          # the Raft queue is full: back-pressure


@dataclass(frozen=True)
class ReplicateResult:
    """The outcome and, when committed, the log position and apply time."""

    status: ReplicateStatus
    position: int = 0
    apply_ns: int = 0
    response: bytes = b""      # the old flow's response, computed by apply


@dataclass(frozen=True)
class Role:
    """This node's view of the cluster."""

    is_leader: bool
    ready: bool                # leader and caught up: may execute writes
    leader_id: str
    leader_address: str
    term: int
    commit_index: int


class Replicator(Protocol):
    """Gets entries committed and applied locally."""

    async def replicate(self, entry: bytes) -> ReplicateResult:
        """Commits ``entry``; resolves after it is applied on this node."""
        ...

    def role(self) -> Role:
        """The current role, as this node sees it."""
        ...


class LocalReplicator:
    """A single-node replicator: positions count up; apply happens at once."""

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


class ApplyEntry(Protocol):
    """Applies one committed log entry at a position (``om.node.Node.apply_entry``)."""

    def __call__(self, position: int, entry: bytes) -> ApplyResult: ...

