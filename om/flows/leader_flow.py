"""The leader flow: execute once on the leader, replicate batches of changes.

The write path (after the shared template in ``om/flows/template.py``):

 1. authorize                        -> PERMISSION_DENIED
 2. lock, volume > bucket > key      -> TIMEOUT after a bounded wait
 3. execute the pure handler with the next managed index against applied
    state (an error status ends here: nothing is written or replicated)
 4. reserve quota, queue for group commit (om/flows/batch_pipeline.py)
 5. await commit and local apply
 6. at settle: release the quota reservation and the locks; store the reply

Locks are held from step 2 until the batch settles: a request never executes
against state an in-flight batch is about to change (there is no write cache).
The retry cache (``om/gatekeeper/retry_cache.py``) answers from memory, else
from clientRequestReplyTable, written in the same batch as the data.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from om.config import READ_LINEARIZABLE
from om.consensus.port import ReplicateResult, ReplicateStatus, Replicator
from om.executor.batcher import PendingWrite
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import Limits
from om.executor.quota_reservations import QuotaReservationTable
from om.executor.registry import dispatch, error_response
from om.flows.async_locks import AsyncLocks, LockOwner
from om.flows.batch_pipeline import BatchConfig, BatchPipeline
from om.flows.template import Clock, RequestService, Trace, not_leader_response, wall_clock_ms
from om.gatekeeper.authorize import AclPolicy
from om.gatekeeper.lock_plan import plan_locks
from om.gatekeeper.retry_cache import RetryCache, RetryCacheConfig, StoredReply, expired_row_deletes
from om.observe.audit import AuditSink
from om.observe.metrics import NodeMetrics
from om.observe.tracing import TraceSink
from om.protocol import om_pb2
from om.schema.ids import RetryKey
from om.schema.read_view import ReadView
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store


@dataclass(frozen=True)
class LeaderConfig:
    """Limits and policies of the request services."""

    lock_timeout_s: float = 60.0
    in_flight_max: int = 10_000
    retry_wait_s: float = 60.0
    sweep_interval_s: float = 30.0
    sweep_rows_max: int = 10_000
    retry: RetryCacheConfig = field(default_factory=RetryCacheConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    acl: AclPolicy = field(default_factory=AclPolicy)
    limits: Limits = field(default_factory=Limits)
    retry_cache_enabled: bool = True
    read_mode: str = READ_LINEARIZABLE


class LeaderService(RequestService):
    """Executes writes on the leader and replicates their changes in batches."""

    def __init__(self, node_id: str, store: Store, state_machine: StateMachine,
                 replicator: Replicator, config: LeaderConfig, tracer: TraceSink,
                 clock_ms: Clock = wall_clock_ms, metrics: NodeMetrics | None = None,
                 audit: AuditSink | None = None) -> None:
        super().__init__(node_id, replicator, state_machine.managed_index, config.acl,
                         config.limits, config.in_flight_max, config.retry_wait_s, tracer,
                         clock_ms, config.retry_cache_enabled, config.read_mode, metrics,
                         audit)
        self.config = config
        self._store = store
        self._state_machine = state_machine
        self.locks = AsyncLocks(config.lock_timeout_s)
        self.retry_cache = RetryCache(config.retry)
        self.reservations = QuotaReservationTable()
        self.pipeline = BatchPipeline(replicator, config.batch, node_id, tracer,
                                      self.metrics.batches)
        self._committed: dict[RetryKey, om_pb2.ClientRequestReply] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Starts group commit and the retry-cache sweeper."""
        self.pipeline.start()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        """Stops the sweeper, lets every admitted write finish, then stops group commit."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await self.drain()
        await self.pipeline.close()

    def leadership_lost(self) -> None:
        """Fails writes not yet sealed; in-flight batches settle through the replicator."""
        self.pipeline.fail_queued(ReplicateStatus.LEADER_CHANGED)
        self.retry_cache.clear_memory()

    def _view(self) -> ReadView:
        return self._store

    async def _confirm_read(self) -> ReplicateResult:
        return await self.pipeline.read_round()

    def _persisted_managed_index(self) -> int:
        return self._state_machine.managed_index

    def _committed_response(self, key: RetryKey) -> StoredReply | None:
        return self.retry_cache.committed_response(key, self._store, self.clock_ms())

    def _write_finished(self, request: om_pb2.OMRequest, key: RetryKey,
                        response: om_pb2.OMResponse | None) -> None:
        committed = self._committed.pop((request.client_id, request.call_id), None)
        if committed is not None and key != (committed.client_id, committed.call_id):
            committed = None  # the retry cache is disabled for a test: remember nothing
        self.retry_cache.finish(key, committed)

    async def _write_original(self, request: om_pb2.OMRequest, key: RetryKey, trace: Trace,
                              request_fingerprint: bytes) -> om_pb2.OMResponse:
        self.retry_cache.begin(key)
        return await super()._write_original(request, key, trace, request_fingerprint)

    async def _execute_write(self, request: om_pb2.OMRequest, trace: Trace,
                             request_fingerprint: bytes) -> om_pb2.OMResponse:
        self.authorize(request)
        started = time.perf_counter_ns()
        owner = await self.locks.acquire(plan_locks(request))
        trace.lock_wait_ns = time.perf_counter_ns() - started
        release_now = True
        try:
            role = self.role()
            if not role.ready:
                return not_leader_response(request, self.node_id, role)
            index = self.managed_index.next()
            ctx = self.context(request, index, self.clock_ms(), self.reservations)
            recorder = ChangeRecorder()
            started = time.perf_counter_ns()
            response = dispatch(request, self._store, recorder, ctx)
            trace.execute_ns = time.perf_counter_ns() - started
            if response.status != om_pb2.OK:
                return response
            assert not recorder.empty, "a successful write changes something"
            release_now = False
            return await self._replicate(request, response, recorder, index, owner, trace,
                                         request_fingerprint)
        finally:
            if release_now:
                self.locks.release(owner)

    async def _replicate(self, request: om_pb2.OMRequest, response: om_pb2.OMResponse,
                         recorder: ChangeRecorder, index: int, owner: LockOwner,
                         trace: Trace, request_fingerprint: bytes) -> om_pb2.OMResponse:
        """Queues the write; the locks are released when its batch settles."""
        reply = om_pb2.ClientRequestReply(client_id=request.client_id, call_id=request.call_id,
                                          response=response.SerializeToString(),
                                          fingerprint=request_fingerprint)
        settled: asyncio.Future[ReplicateResult] = asyncio.get_running_loop().create_future()
        self.reservations.reserve(index, recorder.quota)

        def settle(result: ReplicateResult, batch_wait_ns: int, batch_id: int) -> None:
            self.reservations.release(index)
            self.locks.release(owner)
            trace.batch_wait_ns = batch_wait_ns
            trace.batch_id = batch_id
            trace.apply_ns = result.apply_ns
            trace.settled_ns = time.perf_counter_ns()
            if not settled.done():  # done only if this write's task was cancelled (shutdown)
                settled.set_result(result)

        if not self.pipeline.submit(PendingWrite(index, recorder, reply), settle):
            settle(ReplicateResult(ReplicateStatus.QUEUE_FULL), 0, 0)
        submitted = time.perf_counter_ns()
        result = await settled
        trace.replicate_ns = max(trace.settled_ns - submitted - trace.batch_wait_ns
                                 - trace.apply_ns, 0)
        if result.status is ReplicateStatus.COMMITTED:
            reply.timestamp_ms = self.clock_ms()
            self._committed[(request.client_id, request.call_id)] = reply
            return response
        if result.status is ReplicateStatus.QUEUE_FULL:
            return error_response(request, om_pb2.SERVER_BUSY,
                                  "the replication queue is full; retry shortly")
        return not_leader_response(request, self.node_id, self._replicator.role())

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            self.sweep_expired()

    def sweep_expired(self) -> int:
        """Queues deletes of expired retry-cache rows; returns how many rows."""
        if not self._replicator.role().ready:
            return 0
        deletes = expired_row_deletes(self._store, self.clock_ms(),
                                      self.config.retry.expiry_ms, self.config.sweep_rows_max)
        if deletes:
            self.pipeline.submit(PendingWrite(0, ChangeRecorder(), None, deletes),
                                 lambda result, wait_ns, batch_id: None)
        return len(deletes) // 2
