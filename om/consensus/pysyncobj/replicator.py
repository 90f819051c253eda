"""RaftReplicator: pysyncobj behind the Replicator port.

This is the only code that crosses threads. pysyncobj runs one tick thread
that does networking, Raft, the journal's syncs, apply and callbacks; the
event loop submits entries with a callback, and the callback hands the outcome
back to the loop with ``call_soon_threadsafe``. pysyncobj reports role
changes the same way (``onStateChanged``), so the loop never polls it.

Leadership, as the flows see it (``role().ready``), is ``leadership.py``'s (the
barrier of each term, a loss failing every pending entry), shared with the Raft
process's adapter; besides:

* Apply skips an entry whose proposer term is below the highest applied term,
  so an entry executed by a deposed leader (pysyncobj forwards a follower's
  queued commands to the new leader) can never commit changes computed
  against stale state.
* When leadership is lost, every entry still awaiting its callback fails with
  LEADER_CHANGED at once: a deposed leader never replies success for an entry
  it did not see commit. Such an entry may still commit later; the client's
  retry (same call id) then finds its stored response.

Durability: the journal (``journal.py``) group-commits its syncs and the
transport (``transport.py``) holds acknowledgements until they are synced, so
an entry is applied (and a client answered) only once it is on disk on a
majority. pysyncobj settings: ``appendEntriesUseBatch=False`` (else ~100 ms a
commit), an ``appendEntriesBatchSizeBytes`` above the largest entry (its
chunked path breaks on large entries), a short ``leaderFallbackTimeout``, and
journal replay from the last snapshot on restart (apply skips applied
positions).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObjConf

from om.config import NodeAddress, Raft
from om.consensus.port import (
    Applied,
    ApplyEntry,
    BarrierEntry,
    LeaderChanges,
    ReplicateResult,
    ReplicateStatus,
    Role,
    SnapshotHooks,
)
from om.consensus.pysyncobj import journal
from om.consensus.pysyncobj.leadership import LeadershipBarrier
from om.consensus.pysyncobj.raft_log import RaftLog, known_leader, own_address, peers
from om.consensus.pysyncobj.transport import GroupCommitTransport
from om.observe.histogram import Snapshot

logger = logging.getLogger(__name__)

ENTRY_BYTES_MAX = 4 * 1024 * 1024
_STATUS_BY_REASON = {
    FAIL_REASON.QUEUE_FULL: ReplicateStatus.QUEUE_FULL,
    FAIL_REASON.NOT_LEADER: ReplicateStatus.NOT_LEADER,
    FAIL_REASON.MISSING_LEADER: ReplicateStatus.NOT_LEADER,
}


def status_of(result: tuple[Applied, int] | None, reason: int) -> ReplicateResult:
    """The outcome of one submitted entry from pysyncobj's callback: its failure
    reason, or what apply did with it and how long apply took."""
    if reason != FAIL_REASON.SUCCESS:
        return ReplicateResult(_STATUS_BY_REASON.get(reason, ReplicateStatus.LEADER_CHANGED))
    if result is None or not result[0].applied:
        return ReplicateResult(ReplicateStatus.LEADER_CHANGED)  # a stale term's entry
    applied, apply_ns = result
    return ReplicateResult(ReplicateStatus.COMMITTED, applied.position, apply_ns,
                           applied.response)


def syncobj_conf(settings: Raft, data_dir: Path, snapshots: SnapshotHooks,
                 entry_bytes_max: int,
                 on_state_changed: Callable[[int, int], None] | None = None,
                 serialize_checker: Callable[[], int] | None = None) -> SyncObjConf:
    """pysyncobj's configuration for one node.

    With ``serialize_checker`` (the Raft process), ``snapshots.serialize`` only
    starts writing a snapshot and pysyncobj polls the checker on every tick until
    it says SUCCESS or FAILED: Raft keeps ticking while the snapshot is written."""
    return SyncObjConf(
        appendEntriesUseBatch=False,
        appendEntriesBatchSizeBytes=max(ENTRY_BYTES_MAX, 2 * entry_bytes_max),
        raftMinTimeout=settings.election_timeout_min_s,
        raftMaxTimeout=settings.election_timeout_max_s,
        leaderFallbackTimeout=settings.leader_fallback_timeout_s,
        journalFile=str(data_dir / "raft.wal"),
        fullDumpFile=str(data_dir / "raft.snapshot"),
        serializer=snapshots.serialize,
        deserializer=snapshots.deserialize,
        serializeChecker=serialize_checker,
        logCompactionMinEntries=settings.compaction_min_entries,
        logCompactionMinTime=settings.compaction_min_time_s,
        logCompactionSplit=True,
        commandsQueueSize=settings.commands_queue_max,
        connectionRetryTime=0.5,
        # Voters added and removed at run time (membership.py); the configuration
        # travels in the log and in snapshots.
        dynamicMembershipChange=True,
        onStateChanged=on_state_changed,
        # Every frame sealed with a key derived from the cluster secret (AES-GCM,
        # frame_cipher.py, in place of pysyncobj's Fernet), after a random-key
        # exchange per connection: a process without the secret can neither read,
        # forge nor replay Raft messages.
        password=settings.secret or None,
    )


class RaftReplicator:
    """Commits entries through pysyncobj; resolves after the local apply."""

    def __init__(self, node: NodeAddress, nodes: tuple[NodeAddress, ...], data_dir: Path,
                 settings: Raft, apply_entry: ApplyEntry, snapshots: SnapshotHooks,
                 barrier: BarrierEntry, entry_bytes_max: int,
                 commit_timeout_s: float = 30.0) -> None:
        self._follow(node, nodes, barrier, commit_timeout_s)
        data_dir.mkdir(parents=True, exist_ok=True)
        if not settings.fsync:
            logger.warning("[raft] fsync = false: acknowledged writes survive a process crash "
                           "but NOT a power loss (durability opted out)")
        conf = syncobj_conf(settings, data_dir, snapshots, entry_bytes_max,
                            self._state_changed_on_raft_thread)
        self.journal_spec = journal.spec_for(settings, Path(conf.journalFile),
                                             Path(conf.fullDumpFile))
        others = peers(node, nodes, settings.links)
        self._raft = RaftLog(own_address(node), others, conf, apply_entry,
                             settings.compress_transport, GroupCommitTransport)
        assert self.journal_spec.journal is not None, "pysyncobj built its own journal"

    def _follow(self, node: NodeAddress, nodes: tuple[NodeAddress, ...], barrier: BarrierEntry,
                commit_timeout_s: float) -> None:
        """The loop's side of the adapter, before the Raft node exists (the simulator's
        subclass builds its own Raft node)."""
        self._loop = asyncio.get_running_loop()
        self._node = node
        self._by_raft = {n.raft_address: n for n in nodes}
        self._commit_timeout_s = commit_timeout_s
        self._pending: set[asyncio.Future[tuple[Any, int]]] = set()
        self.leader_changes = LeaderChanges()
        self._leadership = LeadershipBarrier(
            node.id, lambda: self._raft.om_is_leader(), lambda: int(self._raft.raftCurrentTerm),
            self.replicate, barrier, self._fail_pending)

    def take_shard_channels(self) -> tuple[socket.socket, ...]:
        """None: pysyncobj in a thread has no channels (shards need the Raft process)."""
        return ()

    def journal_syncs(self) -> Snapshot | None:
        """The journal's sync times so far."""
        assert self.journal_spec.journal is not None
        return self.journal_spec.journal.sync_times.snapshot()

    def on_leadership_lost(self, callback: Callable[[], None]) -> None:
        """Registers a callback run on the loop when this node stops being leader."""
        self._leadership.on_leadership_lost(callback)

    @property
    def catching_up(self) -> bool:
        """Never: pysyncobj installs a snapshot inside its tick, before it goes on."""
        return False

    def metrics(self) -> dict[str, float]:
        """State gauges by key (``om/observe/metrics.py``, NODE_STATE)."""
        return {"leader_changes": self.leader_changes.count}

    async def replicate(self, entry: bytes) -> ReplicateResult:
        """Commits ``entry``; resolves once it is applied on this node."""
        assert len(entry) <= ENTRY_BYTES_MAX, "the batcher's byte cap keeps entries small"
        if not self._raft.om_is_leader():
            return ReplicateResult(ReplicateStatus.NOT_LEADER)
        future: asyncio.Future[tuple[Any, int]] = self._loop.create_future()
        self._pending.add(future)

        def callback(result: Any, reason: int) -> None:  # runs on the Raft thread
            self._loop.call_soon_threadsafe(_resolve, future, result, reason)

        try:
            self._raft.submit(entry, callback)
            result, reason = await asyncio.wait_for(asyncio.shield(future),
                                                    self._commit_timeout_s)
        except TimeoutError:
            return ReplicateResult(ReplicateStatus.LEADER_CHANGED)
        finally:
            self._pending.discard(future)
        return status_of(result, reason)

    def compact_log(self) -> None:
        """Asks Raft to snapshot and compact its journal at its next tick (only flags the
        tick thread reads are set)."""
        self._raft.om_compact_now()

    def transfer_leadership(self) -> None:
        """Asks the tick thread to hand leadership to a caught-up follower (best effort:
        pysyncobj refuses while none is caught up; ask again)."""
        self._raft.om_transfer_requested = True

    async def transfer_leadership_to(self, target: str,
                                     timeout_s: float = 10.0) -> tuple[str, str, str]:
        """As ``RaftProcessReplicator.transfer_leadership_to``; the tick thread answers."""
        future: asyncio.Future[tuple[str, str, str]] = self._loop.create_future()

        def reply(code: str, chosen: str, text: str) -> None:  # on the Raft thread
            self._loop.call_soon_threadsafe(_settle, future, (code, chosen, text))

        self._raft.om_transfers.request(target or None, reply)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return "TIMEOUT", target, f"Raft did not answer within {timeout_s} s"

    async def change_membership(self, op: str, address: str,
                                timeout_s: float = 30.0) -> tuple[str, str]:
        """Adds or removes the voter at ``address`` (``membership.py``); (code, message)
        once the change is committed or refused."""
        future: asyncio.Future[tuple[str, str]] = self._loop.create_future()

        def reply(code: str, text: str) -> None:  # on the Raft thread
            self._loop.call_soon_threadsafe(_settle, future, (code, text))

        self._raft.om_membership.request(op, address, reply)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return "TIMEOUT", f"Raft did not answer within {timeout_s} s"

    def members(self) -> list[str]:
        """The Raft addresses of the voters as this node knows them."""
        return self._raft.om_membership.members()

    def match_indexes(self) -> dict[str, int]:
        """Each follower's match index by Raft address, as this leader sees it."""
        return self._raft.om_transfers.match_indexes()

    def role(self) -> Role:
        """This node's view: leader or not, ready or not, who leads, term, commit."""
        raft = self._raft
        is_leader = raft.om_is_leader()
        term = int(raft.raftCurrentTerm)
        leader = known_leader(raft)
        self.leader_changes.saw(leader)
        known = self._by_raft.get(leader)
        return Role(is_leader=is_leader,
                    ready=self._leadership.ready(is_leader, term),
                    leader_id=known.id if known else "",
                    leader_address=known.address if known else "",
                    term=term, commit_index=int(raft.raftCommitIndex),
                    candidate=raft.om_candidate())

    async def start(self) -> None:
        """Starts following leadership (call once, on the loop)."""
        self._leadership.changed()

    def _state_changed_on_raft_thread(self, old: int, new: int) -> None:
        self._loop.call_soon_threadsafe(self._leadership.changed)

    def _fail_pending(self) -> None:
        """Leadership lost: every entry awaiting its callback fails at once."""
        for future in list(self._pending):
            if not future.done():
                future.set_result((None, FAIL_REASON.LEADER_CHANGED))

    def status(self) -> dict[str, Any]:
        """pysyncobj's status dictionary (for ``om admin roles`` and tests)."""
        status: dict[str, Any] = self._raft.getStatus()
        return status

    async def close(self) -> None:
        """Stops following leadership, the Raft thread, and closes the journal."""
        await self._leadership.close()
        self._raft.destroy_synchronous()


def _resolve(future: asyncio.Future[tuple[Any, int]], result: Any, reason: int) -> None:
    if not future.done():
        future.set_result((result, reason))


def _settle(future: asyncio.Future[Any], outcome: tuple[str, ...]) -> None:
    if not future.done():
        future.set_result(outcome)
