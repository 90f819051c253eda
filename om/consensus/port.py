"""The Replicator port: how the leader gets a log entry committed and applied.

``replicate(entry)`` resolves once the entry is committed *and applied to this
node's store*, or reports why it was not. Implementations:

* ``om.consensus.local.LocalReplicator``: a single node; the entry is
  "committed" when applied.
* ``om.consensus.pysyncobj.process.RaftProcessReplicator``: pysyncobj across nodes,
  in a Raft child process (the default);
* ``om.consensus.pysyncobj.replicator.RaftReplicator``: the same in a thread of this
  process (``[raft] separate_process = false``; the simulator's base).

Each is a ``ReplicatorPart``: a replicator with the lifecycle and gauges a node
holds it by (``start``, ``close``, ``metrics()``: state gauges by key), so the node
starts, scrapes and closes whichever it holds alike. Both Raft adapters are a
``RaftPort`` too: what the node asks of Raft beyond replication (transfers,
membership, compaction, leadership lost), so the node holds one Raft part and never
asks which.

Callers must treat every outcome but COMMITTED as "not applied here"; for
LEADER_CHANGED the entry may still commit later under the new leader, which
is why clients retry with the same call id.
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from om.observe.histogram import Snapshot


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
    candidate: bool = False    # campaigning for leadership


class LeaderChanges:
    """Counts how often the leader this node knows of changed to another node.

    A leader lost and found again is no change; the first leader seen is one."""

    def __init__(self) -> None:
        self.count = 0
        self._last = ""

    def saw(self, leader: str) -> None:
        """Records the leader known now ("" when none is)."""
        if leader and leader != self._last:
            self.count += 1
            self._last = leader


class Replicator(Protocol):
    """Gets entries committed and applied locally."""

    async def replicate(self, entry: bytes) -> ReplicateResult:
        """Commits ``entry``; resolves after it is applied on this node."""
        ...

    def role(self) -> Role:
        """The current role, as this node sees it."""
        ...


class ReplicatorPart(Replicator, Protocol):
    """A replicator as a node holds it: started once after the node's flows, closed
    once after them (it fails what it still holds), its gauges read at every scrape."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def metrics(self) -> dict[str, float]:
        """State gauges by ``StateGauge.key`` (om/observe/metrics.py, NODE_STATE)."""
        ...


class Applied(Protocol):
    """What applying one entry reported (``om.statemachine.apply.ApplyResult``)."""

    @property
    def position(self) -> int: ...

    @property
    def applied(self) -> bool:
        """False: already applied (replay), or a stale term's entry."""
        ...

    @property
    def response(self) -> bytes: ...

    @property
    def batches_applied(self) -> tuple[bool, ...]:
        """Per batch of the entry, in order (a merged entry's slices): applied, or
        skipped as a stale term's; empty when the position was applied before."""
        ...


class ApplyEntry(Protocol):
    """Applies one committed log entry at a position (``om.node.node.Node.apply_entry``)."""

    def __call__(self, position: int, entry: bytes) -> Applied: ...


class SnapshotHooks(Protocol):
    """Writes and installs snapshots of the node's state (``om.statemachine.raft_snapshot``).

    ``raft_data`` is the Raft library's own opaque state, stored beside the data."""

    def serialize(self, tmp_file: str, raft_data: object) -> None: ...

    def deserialize(self, file_name: str) -> object: ...


class DeferredInstallHooks(SnapshotHooks, Protocol):
    """Snapshot hooks whose install can run after the Raft library has its data
    (the Raft process keeps ticking while its parent installs: ``process.py``)."""

    def prepare_install(self, file_name: str) -> tuple[object, Callable[[], None] | None]:
        """The Raft data at once, and the (slow) install of the snapshot's state when
        it is ahead of this node's, to run later (None: nothing to install)."""
        ...


class BarrierEntry(Protocol):
    """Builds the empty entry a new leader commits in its term before it serves."""

    def __call__(self, term: int) -> bytes: ...


class RaftPort(ReplicatorPart, Protocol):
    """A Raft replicator as the node uses it, whichever adapter runs it.

    ``catching_up``: a follower installing a peer's checkpoint (it refuses writes
    meanwhile); only the Raft process installs in the background, so the in-thread
    adapter is never catching up."""

    leader_changes: LeaderChanges

    @property
    def catching_up(self) -> bool: ...

    def journal_syncs(self) -> Snapshot | None: ...

    def on_leadership_lost(self, callback: Callable[[], None]) -> None: ...

    def compact_log(self) -> None: ...

    def transfer_leadership(self) -> None: ...

    async def transfer_leadership_to(self, target: str,
                                     timeout_s: float = 10.0) -> tuple[str, str, str]: ...

    async def change_membership(self, op: str, address: str,
                                timeout_s: float = 30.0) -> tuple[str, str]: ...

    def members(self) -> list[str]: ...

    def match_indexes(self) -> dict[str, int]: ...

    def take_shard_channels(self) -> tuple[socket.socket, ...]:
        """The ends of the Raft process's channels 1..S-1, for the node's shard
        processes, once (docs/SHARDS.md); none from an adapter that has no channels."""
        ...
