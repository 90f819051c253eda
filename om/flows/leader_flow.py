"""The leader flow: execute once on the leader, replicate batches of changes.

``LeaderFlow`` is the write flow (``om/flows/write_flow.py`` ``WriteFlow``) that the
shared template (``om/flows/template.py`` ``RequestService``) holds in the leader and
switchable modes; ``leader_service`` builds the template with it. The write path
(after the template, which has admitted and authorized the write):

 1. lock, volume > bucket > key: taken at once where free (no task); a write that
    must wait joins the lock's FIFO queue at once and waits in a task -> TIMEOUT
    after a bounded wait
 2. execute the pure handler with the next managed index against applied
    state (an error status ends here: nothing is written or replicated; it is
    answered once a read round confirms this node still leads, as a read is)
 3. reserve quota, queue for group commit (om/flows/batch_pipeline.py); the answer
    future resolves in the batch's settle callback, not in a task
 4. at settle, after commit and local apply: release the quota reservation and
    the locks; store the reply; answer

Locks are held from step 1 until the batch settles: a request never executes
against state an in-flight batch is about to change (there is no write cache).
The retry cache (``om/gatekeeper/retry_cache.py``) answers from memory, else
from clientRequestReplyTable, written in the same batch as the data.

Over the old flow's state machine (``execution = "switchable"``, docs/FLOW_SWITCH.md)
a write of a type the ``#FLOWS`` row does not name takes steps 1 and 4 alike, but in
between is tried here for its quota only and replicated as a request, executed in
every node's apply (``_execute_old``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from om.consensus.port import ReplicateResult, ReplicateStatus, Replicator
from om.executor.admin import flow_switch, upgrade
from om.executor.batcher import PendingWrite
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import Planned
from om.executor.errors import OMError
from om.executor.quota_reservations import QuotaReservationTable
from om.executor.registry import dispatch, error_response
from om.flows.async_locks import AsyncLocks, LockOwner
from om.flows.batch_pipeline import BatchPipeline
from om.flows.purge import Purger
from om.flows.read_rounds import ReadRound
from om.flows.settings import LeaderConfig
from om.flows.template import RequestService, entry_answer, not_leader_response
from om.flows.write_flow import FlowHost, Write
from om.gatekeeper.fs_locks import REPLAN_MAX, plan_fs
from om.gatekeeper.lock_plan import LockRequest, plan_locks
from om.gatekeeper.retry_cache import (
    RetryCache,
    StoredReply,
    encode_reply,
    expired_row_deletes,
)
from om.observe.audit import AuditSink
from om.observe.metrics import NodeMetrics
from om.observe.tracing import TraceSink
from om.protocol import om_pb2
from om.schema.ids import RetryKey
from om.schema.read_view import ReadView
from om.schema.seam import Seam
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.replicated_apply import ReplicatedStateMachine

PURGE_USER = "om"   # the user the leader's own purge steps run as (they need no rights)


class LeaderFlow:
    """Executes writes on the leader and replicates their changes in batches (the
    template's ``WriteFlow``, om/flows/write_flow.py).

    Invariants: a started write holds its locks (and quota reservation) from its
    execution until its batch (or old-flow entry) settled here, and is ended
    through the host exactly once, whatever the outcome; its retry-cache mark
    (``RetryCache.begin``) is finished as it ends (``write_ended``)."""

    def __init__(self, host: FlowHost, store: ReadView, switchable: bool,
                 replicator: Replicator, config: LeaderConfig, tracer: TraceSink,
                 merged_entries: Callable[[], bool], shard: int) -> None:
        """``store``: applied state, or the old flow's write cache over it;
        ``switchable``: the state machine applies both kinds of entry, so a write
        type the ``#FLOWS`` row does not name runs the old flow (``_execute_old``);
        ``merged_entries``: whether a batch sealed now travels as ``M``
        (``seals_merged_entries``); ``shard``: the state machine's, which every batch
        is sealed for (its slices come back to this shard's store only)."""
        self._host = host
        self.config = config
        self._store = store
        self._replicator = replicator
        self.switchable = switchable
        self.locks = AsyncLocks(config.lock_timeout_s)
        self.retry_cache = RetryCache(config.retry)
        self.reservations = QuotaReservationTable()
        self._elapsed_ns = host.seam.elapsed_ns
        shards = 1 if config.shard_gate is None else config.shard_gate.shards
        self.pipeline = BatchPipeline(replicator, config.batch, host.node_id, tracer,
                                      host.metrics.batches, host.seam, merged_entries, shard,
                                      shards)
        self.purger = Purger(store, host.submit, self._purging_term, config.purge,
                             PURGE_USER, host.seam)
        self._purging: asyncio.Task[None] | None = None

    def _purging_term(self) -> int | None:
        """The term in which this node is the ready leader and its gate open (the
        purger's steps are writes), or None."""
        role = self._host.role()
        return role.term if role.ready and not self._host.prepare_gate_closed() else None

    async def start(self) -> None:
        """Starts group commit."""
        self.pipeline.start()

    async def start_background(self) -> None:
        """Starts the purge of deleted subtrees, expired open keys and uploads."""
        assert self._purging is None, "started once"
        self._purging = asyncio.get_running_loop().create_task(self.purger.run_forever())

    async def stop_background(self) -> None:
        """Stops the purge."""
        if self._purging is not None:
            self._purging.cancel()
            await asyncio.gather(self._purging, return_exceptions=True)

    async def close(self) -> None:
        """Stops group commit (every admitted write ended)."""
        await self.pipeline.close()

    def leadership_lost(self) -> None:
        """Fails writes not yet sealed; in-flight batches settle through the replicator."""
        self.pipeline.fail_queued(ReplicateStatus.LEADER_CHANGED)
        self.retry_cache.clear_memory()

    def gauges(self) -> dict[str, float]:
        """State gauges by key (``om/observe/metrics.py``, NODE_STATE): the purge, the
        retry cache's memory and the lock table. Called from the scrape thread: it
        reads only counters in memory, never the store (which may be closing)."""
        retry, purger = self.retry_cache.statistics(), self.purger
        return {"purge_pending_directories": purger.pending_directories,
                "purge_rows_scanned": purger.rows_scanned, "purge_steps": purger.steps,
                "purge_entries": purger.purged, "purge_deleted_keys": purger.keys_purged,
                "purge_expired_open_keys": purger.open_keys_deleted,
                "purge_expired_multipart_uploads": purger.uploads_aborted,
                "retry_cache_hits": retry["hits"], "retry_cache_entries": retry["recent"],
                "retry_cache_bytes": retry["recent_bytes"],
                "lock_waiters": self.locks.table.statistics().waiters}

    def on_read_round(self, done: ReadRound) -> None:
        """The next batch sealed after this call is the read round."""
        self.pipeline.on_read_round(done)

    def committed_response(self, key: RetryKey) -> StoredReply | None:
        """From memory, else from clientRequestReplyTable."""
        return self.retry_cache.committed_response(key, self._store, self._host.clock_ms())

    def write_ended(self, write: Write, committed: om_pb2.ClientRequestReply | None) -> None:
        """Finishes the write's retry-cache mark, remembering its reply if committed."""
        if committed is not None and write.key != (committed.client_id, committed.call_id):
            committed = None  # a key of ForgetfulRetryKeys (a fault): remember nothing
        self.retry_cache.finish(write.key, committed)

    # -- the write path ------------------------------------------------------------------

    def start_write(self, write: Write) -> None:
        """Step 1: takes the write's locks; executes at once when all are free, else in a
        task once they are granted (its place in each lock's queue is taken now)."""
        self.retry_cache.begin(write.key)
        self._lock_and_execute(write, replans=0)

    def _plan(self, request: om_pb2.OMRequest) -> tuple[tuple[LockRequest, ...], Planned | None]:
        """The request's lock plan and, when it was resolved against applied state (a
        file-system bucket's, ``om/gatekeeper/fs_locks.py``) and so must be checked
        again after a wait, the paths it resolved (for the handler, if it executes at
        once); None otherwise."""
        resolved = plan_fs(request, self._store, self.config.limits.key_name_max_bytes,
                           self.config.fso_lock_plan)
        if resolved is not None:
            return resolved
        return plan_locks(request), None

    def _lock_and_execute(self, write: Write, replans: int) -> None:
        plan, planned = self._plan(write.request)
        owner = self.locks.begin(plan)
        resolved = planned is not None
        if owner.granted:   # nothing was applied since the plan: it stands
            self._execute(write, owner, planned)
        else:
            self._host.spawn(self._execute_when_granted(write, owner, resolved, replans))

    async def _execute_when_granted(self, write: Write, owner: LockOwner, resolved: bool,
                                    replans: int) -> None:
        started = self._elapsed_ns()
        try:
            await self.locks.finish(owner)
        except OMError as error:   # TIMEOUT; finish released what it held
            self._host.end_write(
                write, error_response(write.request, error.status, error.message), None)
            return
        except BaseException:      # cancelled at shutdown: the write ends retryably
            self._host.end_write(write, error_response(
                write.request, om_pb2.LEADER_NOT_READY,
                f"OM:{self._host.node_id} is shutting down; retry"), None)
            raise
        write.trace.lock_wait_ns += self._elapsed_ns() - started
        planned = None
        if resolved:
            plan, planned = self._plan(write.request)
            if plan != owner.plan:
                self.locks.release(owner)   # what the path names moved meanwhile: plan again
                if replans < REPLAN_MAX:
                    self._lock_and_execute(write, replans + 1)
                else:
                    self._host.end_write(write, error_response(
                        write.request, om_pb2.TIMEOUT, f"the path kept changing under "
                        f"{REPLAN_MAX} lock plans; retry"), None)
                return
        self._execute(write, owner, planned)

    def _execute(self, write: Write, owner: LockOwner, planned: Planned | None = None) -> None:
        """Steps 2-3 under the write's locks; the locks stay held until its batch
        settles (``_settled``), or are released here when nothing was queued. A
        switchable node runs a type the ``#FLOWS`` row does not name in the old flow,
        under the same locks (``_execute_old``)."""
        if self.switchable and not flow_switch.runs_leader_flow(write.request, self._store):
            self._execute_old(write, owner, planned)
            return
        request, trace, host = write.request, write.trace, self._host
        queued = False
        try:
            role = host.role()
            if not role.ready:
                host.end_write(write, not_leader_response(request, host.node_id, role), None)
                return
            index = host.managed_index.next()
            ctx = host.context(request, index, host.clock_ms(), self.reservations, planned)
            recorder = ChangeRecorder()
            started = self._elapsed_ns()
            response = dispatch(request, self._store, recorder, ctx)
            trace.execute_ns = self._elapsed_ns() - started
            if response.status != om_pb2.OK:
                self._end_refused(write, response)
                return
            assert not recorder.empty, "a successful write changes something"
            reply = om_pb2.ClientRequestReply(
                client_id=request.client_id, call_id=request.call_id, timestamp_ms=ctx.now_ms,
                response=response.SerializeToString(), fingerprint=write.fingerprint)
            pending = PendingWrite.of(index, recorder, encode_reply(reply),
                                      sharded=self.pipeline.every_shard_slices)
            self.reservations.reserve(index, recorder.quota)
            settle = partial(self._settled, write, owner, index, reply, response)
            queued = True
            trace.settled_ns = self._elapsed_ns()   # until it settles: when it queued
            if not self.pipeline.submit(pending, settle):
                settle(ReplicateResult(ReplicateStatus.QUEUE_FULL), 0, 0)
        except Exception:
            if queued:
                raise    # its settle ends it (or ended it)
            host.end_write(write, host.internal_error(request, trace.op), None)
        finally:
            if not queued:
                self.locks.release(owner)

    def _end_refused(self, write: Write, response: om_pb2.OMResponse) -> None:
        """Answers a write its handler refused (KEY_NOT_FOUND, ...) once a read round
        that began after it executed confirms that this node still led: the refusal
        was read from this node's state, and a leader deposed without knowing it (a
        paused process, a partition) holds stale state. Unconfirmed, a retry of a
        write the new leader committed heard a definite KEY_NOT_FOUND from the old
        one (om/sim found it). Not confirmed: LEADER_NOT_READY or NOT_LEADER, and
        the client retries elsewhere. The write stays in flight meanwhile, so a
        retry of it waits for this answer."""
        host = self._host

        def confirmed(result: ReplicateResult) -> None:
            if result.status is ReplicateStatus.COMMITTED:
                host.end_write(write, response, None)
            else:
                host.end_write(write, not_leader_response(write.request, host.node_id,
                                                          host.role()), None)
        self.on_read_round(confirmed)

    def _execute_old(self, write: Write, owner: LockOwner, planned: Planned | None) -> None:
        """An old-flow write on a switchable node (docs/FLOW_SWITCH.md steps 3-4): under
        the locks its plan names, the handler runs here first for its quota only, with
        every reservation of both flows counted: QUOTA_EXCEEDED refuses it before it is
        replicated; else its positive deltas stay reserved and the request is
        replicated as its own entry, executed in every node's apply. Locks and
        reservation are held until that entry applied here (``_old_settled``), so no
        leader-flow write executes against state the entry is about to change, nor
        fits in quota the entry will take."""
        assert self.switchable, "only a switchable node runs the old flow here"
        request, trace, host = write.request, write.trace, self._host
        spawned = False
        try:
            role = host.role()
            if not role.ready:
                host.end_write(write, not_leader_response(request, host.node_id, role), None)
                return
            index, now_ms = host.managed_index.next(), host.clock_ms()
            recorder = ChangeRecorder()
            started = self._elapsed_ns()
            trial = dispatch(request, self._store, recorder,
                             host.context(request, index, now_ms, self.reservations, planned))
            trace.execute_ns = self._elapsed_ns() - started
            if trial.status == om_pb2.QUOTA_EXCEEDED:
                self._end_refused(write, trial)
                return
            if trial.status == om_pb2.OK:
                self.reservations.reserve(index, recorder.quota)
            entry = om_pb2.ReplicatedRequest(request=request, timestamp_ms=now_ms,
                                             managed_index=index, leader_id=host.node_id,
                                             term=role.term)
            host.spawn(self._old_settled(write, owner, index, log_entry.encode_request(entry)))
            spawned = True
        except Exception:
            host.end_write(write, host.internal_error(request, trace.op), None)
        finally:
            if not spawned:
                self.locks.release(owner)

    async def _old_settled(self, write: Write, owner: LockOwner, index: int,
                           encoded: bytes) -> None:
        """Replicates an old-flow write's entry; once it applied here (or will not be
        by this leader), releases its reservation and locks, then answers."""
        started = self._elapsed_ns()
        try:
            result = await self._replicator.replicate(encoded)
        except BaseException:     # cancelled at shutdown: the entry may still commit
            self.reservations.release(index)
            self.locks.release(owner)
            self._host.end_write(write, error_response(
                write.request, om_pb2.LEADER_NOT_READY,
                f"OM:{self._host.node_id} is shutting down; retry"), None)
            raise
        self.reservations.release(index)
        self.locks.release(owner)
        write.trace.apply_ns = result.apply_ns
        write.trace.replicate_ns = max(self._elapsed_ns() - started - result.apply_ns, 0)
        write.trace.settled_ns = self._elapsed_ns()
        self._host.end_write(write, entry_answer(write.request, result, self._host.node_id,
                                                 self._replicator.role()), None)

    def _settled(self, write: Write, owner: LockOwner, index: int,
                 reply: om_pb2.ClientRequestReply, response: om_pb2.OMResponse,
                 result: ReplicateResult, batch_wait_ns: int, batch_id: int) -> None:
        """Step 4: the write's batch settled; release, then answer."""
        self.reservations.release(index)
        self.locks.release(owner)
        trace = write.trace
        now = self._elapsed_ns()
        trace.batch_wait_ns = batch_wait_ns
        trace.batch_id = batch_id
        trace.apply_ns = result.apply_ns
        trace.replicate_ns = max(now - trace.settled_ns - batch_wait_ns - result.apply_ns, 0)
        trace.settled_ns = now
        committed = None
        if result.status is ReplicateStatus.COMMITTED:
            committed = reply
        elif result.status is ReplicateStatus.QUEUE_FULL:
            response = error_response(write.request, om_pb2.SERVER_BUSY,
                                      "the replication queue is full; retry shortly")
        else:
            response = not_leader_response(write.request, self._host.node_id,
                                           self._replicator.role())
        self._host.end_write(write, response, committed)

    def sweep_expired(self) -> int:
        """Queues deletes of expired retry-cache rows; returns how many rows. Paused
        while prepared: a prepared store changes by no write but CancelPrepare."""
        if not self._replicator.role().ready or self._host.prepare_gate_closed():
            return 0
        deletes = expired_row_deletes(self._store, self._host.clock_ms(),
                                      self.config.retry.expiry_ms, self.config.sweep_rows_max)
        if deletes:
            self.pipeline.submit(PendingWrite.of(0, ChangeRecorder(), None, deletes),
                                 lambda result, wait_ns, batch_id: None)
        return len(deletes) // 2


def seals_merged_entries(state_machine: StateMachine | ReplicatedStateMachine) -> bool:
    """Whether batches travel as merged entries: the applied state's layout has
    MERGED_ENTRIES (finalized, so every node runs software that decodes ``M``). The
    state machine keeps that layout, moved when a FinalizeUpgrade applies: no row is
    read per batch. A batch sealed while the FinalizeUpgrade is in flight is ``B``,
    which every node applies."""
    return state_machine.layout_version >= upgrade.MERGED_ENTRIES.version


def leader_service(node_id: str, store: ReadView,
                   state_machine: StateMachine | ReplicatedStateMachine,
                   replicator: Replicator, config: LeaderConfig, tracer: TraceSink,
                   seam: Seam, metrics: NodeMetrics | None = None,
                   audit: AuditSink | None = None) -> RequestService[LeaderFlow]:
    """The request template holding the leader flow. ``store``: applied state (the
    old flow's write cache over the store when ``state_machine`` is the old flow's,
    which applies both kinds of entry: then every write type runs the flow the
    ``#FLOWS`` row names, om/executor/admin/flow_switch.py); ``seam``: the node's
    clocks and randomness."""
    return RequestService(
        node_id, replicator, state_machine, store, config, tracer,
        lambda host: LeaderFlow(host, store, state_machine.executes_requests, replicator,
                                config, tracer, partial(seals_merged_entries, state_machine),
                                state_machine.shard),
        seam, metrics, audit)
