"""RaftReplicator: pysyncobj behind the Replicator port.

This is the only code that crosses threads. pysyncobj runs one tick thread
that does networking, Raft, apply and callbacks; the event loop submits
entries with a callback, and the callback hands the outcome back to the loop
with ``call_soon_threadsafe``.

Leadership, as the gatekeeper sees it (``role().ready``):

* A node is ready to execute only when it is the Raft leader *and* an empty
  batch of its own term (the barrier) has been applied locally. Raft commits
  the barrier only after every earlier entry, so by then every write committed
  by earlier leaders is applied here and the managed index is above them all.
* Apply skips a batch whose proposer term is below the highest applied term,
  so a batch executed by a deposed leader (pysyncobj forwards a follower's
  queued commands to the new leader) can never commit changes computed
  against stale state.
* When leadership is lost, every entry still awaiting its callback fails with
  LEADER_CHANGED at once and writes not yet sealed are failed by the leader
  service: a deposed leader never replies success for a batch it did not see
  commit. Such an entry may still commit later; the client's retry (same call
  id) then finds its stored response.

pysyncobj facts handled here (see the README's durability section):
``appendEntriesUseBatch=False`` (else ~100 ms a commit), an
``appendEntriesBatchSizeBytes`` above the largest batch (its chunked path
breaks on large entries), a short ``leaderFallbackTimeout``, and journal
replay from the last snapshot on restart (apply skips applied positions).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from om.config import NodeAddress, Raft
from om.protocol import om_pb2
from om.statemachine import durable_journal, log_entry
from om.statemachine.apply import ApplyResult
from om.statemachine.replicator import ReplicateResult, ReplicateStatus, Role
from om.statemachine.snapshot import Snapshotter

logger = logging.getLogger(__name__)

ENTRY_BYTES_MAX = 4 * 1024 * 1024
_STATUS_BY_REASON = {
    FAIL_REASON.QUEUE_FULL: ReplicateStatus.QUEUE_FULL,
    FAIL_REASON.NOT_LEADER: ReplicateStatus.NOT_LEADER,
    FAIL_REASON.MISSING_LEADER: ReplicateStatus.NOT_LEADER,
}
ApplyEntry = Callable[[int, bytes], ApplyResult]


class _RaftLog(SyncObj):  # type: ignore[misc]
    """The SyncObj: one replicated method that applies an entry at its position."""

    def __init__(self, self_address: str, other_addresses: list[str], conf: SyncObjConf,
                 apply_entry: ApplyEntry) -> None:
        self._apply_entry = apply_entry
        super().__init__(self_address, other_addresses, conf)

    @replicated  # type: ignore[untyped-decorator]
    def persist(self, entry: bytes) -> tuple[ApplyResult, int]:
        """Applies ``entry``; inside apply, ``raftLastApplied + 1`` is its log index."""
        started = time.perf_counter_ns()
        result = self._apply_entry(self.raftLastApplied + 1, entry)
        return result, time.perf_counter_ns() - started


class RaftReplicator:
    """Commits entries through pysyncobj; resolves after the local apply."""

    def __init__(self, node: NodeAddress, nodes: tuple[NodeAddress, ...], data_dir: Path,
                 settings: Raft, apply_entry: ApplyEntry, snapshotter: Snapshotter,
                 entry_bytes_max: int, commit_timeout_s: float = 30.0) -> None:
        self._loop = asyncio.get_running_loop()
        self._node = node
        self._by_raft = {n.raft_address: n for n in nodes}
        self._commit_timeout_s = commit_timeout_s
        self._pending: set[asyncio.Future[tuple[Any, int]]] = set()
        self._barrier_term = -1
        self._barrier_in_flight = False
        self._was_leader = False
        self._on_leadership_lost: list[Callable[[], None]] = []
        data_dir.mkdir(parents=True, exist_ok=True)
        if settings.fsync:
            durable_journal.install()
        conf = SyncObjConf(
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=max(ENTRY_BYTES_MAX, 2 * entry_bytes_max),
            raftMinTimeout=settings.election_timeout_min_s,
            raftMaxTimeout=settings.election_timeout_max_s,
            leaderFallbackTimeout=settings.leader_fallback_timeout_s,
            journalFile=str(data_dir / "raft.journal"),
            fullDumpFile=str(data_dir / "raft.snapshot"),
            serializer=snapshotter.serialize,
            deserializer=snapshotter.deserialize,
            logCompactionMinEntries=settings.compaction_min_entries,
            logCompactionMinTime=settings.compaction_min_time_s,
            logCompactionSplit=True,
            commandsQueueSize=settings.commands_queue_max,
            connectionRetryTime=0.5,
            dynamicMembershipChange=False,
        )
        others = [n.raft_address for n in nodes if n.id != node.id]
        self._raft = _RaftLog(node.raft_address, others, conf, apply_entry)

    def on_leadership_lost(self, callback: Callable[[], None]) -> None:
        """Registers a callback run on the loop when this node stops being leader."""
        self._on_leadership_lost.append(callback)

    async def replicate(self, entry: bytes) -> ReplicateResult:
        """Commits ``entry``; resolves once it is applied on this node."""
        assert len(entry) <= ENTRY_BYTES_MAX, "the batcher's byte cap keeps entries small"
        if not self._raft._isLeader():
            return ReplicateResult(ReplicateStatus.NOT_LEADER)
        future: asyncio.Future[tuple[Any, int]] = self._loop.create_future()
        self._pending.add(future)

        def callback(result: Any, reason: int) -> None:  # runs on the Raft thread
            self._loop.call_soon_threadsafe(_resolve, future, result, reason)

        try:
            self._raft.persist(entry, callback=callback)
            result, reason = await asyncio.wait_for(asyncio.shield(future),
                                                    self._commit_timeout_s)
        except TimeoutError:
            return ReplicateResult(ReplicateStatus.LEADER_CHANGED)
        finally:
            self._pending.discard(future)
        if reason != FAIL_REASON.SUCCESS:
            return ReplicateResult(_STATUS_BY_REASON.get(reason, ReplicateStatus.LEADER_CHANGED))
        applied, apply_ns = result
        if not applied.applied:
            return ReplicateResult(ReplicateStatus.LEADER_CHANGED)
        return ReplicateResult(ReplicateStatus.COMMITTED, applied.position, apply_ns,
                               applied.response)

    def role(self) -> Role:
        """This node's view: leader or not, ready or not, who leads, term, commit."""
        raft = self._raft
        is_leader = bool(raft._isLeader())
        term = int(raft.raftCurrentTerm)
        leader = raft._getLeader()
        known = self._by_raft.get(leader.id) if leader is not None else None
        return Role(is_leader=is_leader,
                    ready=is_leader and self._barrier_term == term,
                    leader_id=known.id if known else "",
                    leader_address=known.address if known else "",
                    term=term, commit_index=int(raft.raftCommitIndex))

    async def watch(self, interval_s: float = 0.02) -> None:
        """Follows leadership changes: commits the barrier, fails what a loss strands."""
        while True:
            is_leader = bool(self._raft._isLeader())
            if self._was_leader and not is_leader:
                self._leadership_lost()
            self._was_leader = is_leader
            term = int(self._raft.raftCurrentTerm)
            if is_leader and self._barrier_term != term and not self._barrier_in_flight:
                self._loop.create_task(self._commit_barrier(term))
            await asyncio.sleep(interval_s)

    async def _commit_barrier(self, term: int) -> None:
        self._barrier_in_flight = True
        try:
            barrier = om_pb2.PersistDbBatch(term=term, leader_id=self._node.id,
                                            timestamp_ms=time.time_ns() // 1_000_000)
            result = await self.replicate(log_entry.encode_batch(barrier))
            if result.status is ReplicateStatus.COMMITTED and self._raft.raftCurrentTerm == term:
                self._barrier_term = term
                logger.warning("node %s leads term %d from position %d", self._node.id, term,
                               result.position)
        finally:
            self._barrier_in_flight = False

    def _leadership_lost(self) -> None:
        logger.warning("node %s lost leadership", self._node.id)
        self._barrier_term = -1
        for future in list(self._pending):
            if not future.done():
                future.set_result((None, FAIL_REASON.LEADER_CHANGED))
        for callback in self._on_leadership_lost:
            callback()

    def status(self) -> dict[str, Any]:
        """pysyncobj's status dictionary (for ``om admin roles`` and tests)."""
        status: dict[str, Any] = self._raft.getStatus()
        return status

    def close(self) -> None:
        """Stops the Raft thread and closes its files."""
        self._raft.destroy_synchronous()


def _resolve(future: asyncio.Future[tuple[Any, int]], result: Any, reason: int) -> None:
    if not future.done():
        future.set_result((result, reason))
