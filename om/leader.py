"""The leader's request template: the asyncio shell around gatekeeper and executor.

For every write, in this order (each step's failure path undoes the earlier ones):

 1. shape check                      -> INVALID_REQUEST
 2. role: leader and ready?          -> NOT_LEADER (with the leader's address) / LEADER_NOT_READY
 3. retry cache: committed before?   -> the stored response; in flight? -> wait for it
 4. admission: in-flight limit       -> SERVER_BUSY
 5. authorize                        -> PERMISSION_DENIED
 6. lock, volume > bucket > key      -> TIMEOUT after a bounded wait
 7. execute the pure handler with the next managed index (an error status ends here)
 8. reserve quota, queue for group commit (om/batch_pipeline.py)
 9. await commit and local apply
10. release the quota reservation (at settle), unlock, store the reply, respond

Locks are held from step 6 until the batch settles, even if the client goes
away meanwhile: a request never executes against state an in-flight batch is
about to change (there is no write cache). A write runs in its own task, which
a caller's cancellation does not cancel: once admitted it settles, so its
retry-cache entry is never dropped while its batch might still commit.
Reads run steps 1, 2, 5 and the handler against applied state, with no locks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from om.async_locks import AsyncLocks, LockOwner
from om.batch_pipeline import BatchConfig, BatchPipeline
from om.executor.batcher import PendingWrite
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, Limits
from om.executor.errors import OMError
from om.executor.quota_reservations import QuotaReservationTable
from om.executor.registry import KINDS, dispatch, error_response, shape_problem
from om.gatekeeper.authorize import AclPolicy, authorize
from om.gatekeeper.lock_plan import plan_locks
from om.gatekeeper.managed_index import ManagedIndex
from om.gatekeeper.retry_cache import (
    RetryCache,
    RetryCacheConfig,
    RetryKey,
    expired_row_deletes,
)
from om.protocol import om_pb2
from om.statemachine.apply import StateMachine
from om.statemachine.replicator import ReplicateResult, ReplicateStatus, Replicator, Role
from om.statemachine.store import Store
from om.tracing import TraceSink

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderConfig:
    """Limits and policies of the leader pipeline."""

    lock_timeout_s: float = 60.0
    in_flight_max: int = 10_000
    retry_wait_s: float = 60.0
    sweep_interval_s: float = 30.0
    sweep_rows_max: int = 10_000
    retry: RetryCacheConfig = field(default_factory=RetryCacheConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    acl: AclPolicy = field(default_factory=AclPolicy)
    limits: Limits = field(default_factory=Limits)


@dataclass
class _Trace:
    t_ns: int
    op: str
    started_ns: int = field(default_factory=time.perf_counter_ns)
    lock_wait_ns: int = 0
    execute_ns: int = 0
    batch_wait_ns: int = 0
    replicate_ns: int = 0
    apply_ns: int = 0
    settled_ns: int = 0


def not_leader_response(request: om_pb2.OMRequest, node_id: str,
                        role: Role) -> om_pb2.OMResponse:
    """NOT_LEADER with the suggested leader, or LEADER_NOT_READY when none is known
    or this node is the leader but not yet caught up."""
    if role.is_leader or not role.leader_id:
        return error_response(request, om_pb2.LEADER_NOT_READY,
                              f"OM:{node_id} is not ready to serve requests; retry shortly")
    response = error_response(
        request, om_pb2.NOT_LEADER,
        f"OM:{node_id} is not the leader. Suggested leader is "
        f"OM:{role.leader_id}[{role.leader_address}].")
    response.leader_node_id = role.leader_id
    response.leader_address = role.leader_address
    return response


class LeaderService:
    """Executes requests on the leader and replicates their changes in batches."""

    def __init__(self, node_id: str, store: Store, state_machine: StateMachine,
                 replicator: Replicator, config: LeaderConfig, tracer: TraceSink) -> None:
        self.node_id = node_id
        self.config = config
        self._store = store
        self._state_machine = state_machine
        self._replicator = replicator
        self._tracer = tracer
        self.locks = AsyncLocks(config.lock_timeout_s)
        self.retry_cache = RetryCache(config.retry)
        self.reservations = QuotaReservationTable()
        self.managed_index = ManagedIndex(state_machine.managed_index)
        self.pipeline = BatchPipeline(replicator, config.batch, node_id, tracer)
        self._originals: dict[RetryKey, asyncio.Future[om_pb2.OMResponse | None]] = {}
        self._index_term = -1
        self._sweeper: asyncio.Task[None] | None = None
        self._write_tasks: set[asyncio.Task[om_pb2.OMResponse]] = set()
        self.requests = 0

    async def start(self) -> None:
        """Starts group commit and the retry-cache sweeper."""
        self.pipeline.start()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        """Stops the sweeper, lets every admitted write finish, then stops group commit."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        if self._write_tasks:
            await asyncio.gather(*self._write_tasks, return_exceptions=True)
        await self.pipeline.close()

    @property
    def in_flight(self) -> int:
        """Writes admitted and not yet answered."""
        return len(self._originals)

    def leadership_lost(self) -> None:
        """Fails writes not yet sealed; in-flight batches settle through the replicator."""
        self.pipeline.fail_queued(ReplicateStatus.LEADER_CHANGED)
        self.retry_cache.clear_memory()

    async def handle(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Answers one request; never raises for anything a client can cause."""
        self.requests += 1
        problem = shape_problem(request)
        if problem is not None:
            return error_response(request, om_pb2.INVALID_REQUEST, problem)
        trace = _Trace(time.time_ns(), KINDS[request.cmd_type].name)
        try:
            response = await self._handle_valid(request, trace)
        except OMError as error:
            response = error_response(request, error.status, error.message)
        except Exception:
            logger.exception("request %s failed", trace.op)
            response = error_response(request, om_pb2.INTERNAL_ERROR,
                                      f"internal error while running {trace.op}")
        self._emit(trace, response)
        return response

    async def _handle_valid(self, request: om_pb2.OMRequest,
                            trace: _Trace) -> om_pb2.OMResponse:
        role = self._replicator.role()
        if not role.ready:
            return not_leader_response(request, self.node_id, role)
        if role.term != self._index_term:
            self.managed_index.advance_to(self._state_machine.managed_index)
            self._index_term = role.term
        if not KINDS[request.cmd_type].write:
            return self._read(request, trace)
        return await self._write(request, trace)

    def _read(self, request: om_pb2.OMRequest, trace: _Trace) -> om_pb2.OMResponse:
        authorize(request, self._store, self.config.acl)
        ctx = ExecContext(request.user, 0, time.time_ns() // 1_000_000, self.reservations,
                          self.config.limits)
        started = time.perf_counter_ns()
        response = dispatch(request, self._store, ChangeRecorder(), ctx)
        trace.execute_ns = time.perf_counter_ns() - started
        return response

    async def _write(self, request: om_pb2.OMRequest, trace: _Trace) -> om_pb2.OMResponse:
        key = (request.client_id, request.call_id)
        while True:
            cached = self.retry_cache.committed_response(key, self._store,
                                                         time.time_ns() // 1_000_000)
            if cached is not None:
                return self._check_same_command(request, cached)
            original = self._originals.get(key)
            if original is None:
                break
            answer = await self._await_original(original)
            if answer is not None:
                return self._check_same_command(request, answer)
        if len(self._originals) >= self.config.in_flight_max:
            return error_response(request, om_pb2.SERVER_BUSY,
                                  f"{len(self._originals)} writes in flight; retry shortly")
        task = asyncio.get_running_loop().create_task(
            self._write_original(request, key, trace))
        self._write_tasks.add(task)
        task.add_done_callback(self._write_tasks.discard)
        return await asyncio.shield(task)

    @staticmethod
    def _check_same_command(request: om_pb2.OMRequest,
                            cached: om_pb2.OMResponse) -> om_pb2.OMResponse:
        """The cached answer, unless the call id was reused for another command.

        A well-behaved client never does that; answering with another command's
        response would be silently wrong (Ozone's HDDS-11491), so refuse.
        """
        if cached.cmd_type == request.cmd_type:
            return cached
        return error_response(
            request, om_pb2.INVALID_REQUEST,
            f"call id {request.call_id} of client {request.client_id} was already used for "
            f"{om_pb2.Type.Name(cached.cmd_type)}; a retry must resend the same request")

    async def _await_original(
            self, original: asyncio.Future[om_pb2.OMResponse | None]) -> om_pb2.OMResponse | None:
        """The original's response; None when it ended without one (retry afresh)."""
        try:
            return await asyncio.wait_for(asyncio.shield(original), self.config.retry_wait_s)
        except TimeoutError:
            raise OMError(om_pb2.TIMEOUT,
                          "timed out waiting for the original of a retried request") from None

    async def _write_original(self, request: om_pb2.OMRequest, key: RetryKey,
                              trace: _Trace) -> om_pb2.OMResponse:
        original: asyncio.Future[om_pb2.OMResponse | None] = (
            asyncio.get_running_loop().create_future())
        self._originals[key] = original
        self.retry_cache.begin(key)
        committed: om_pb2.ClientRequestReply | None = None
        response: om_pb2.OMResponse | None = None
        try:
            response, committed = await self._locked_write(request, trace)
            return response
        except OMError as error:
            response = error_response(request, error.status, error.message)
            return response
        finally:
            self.retry_cache.finish(key, committed)
            del self._originals[key]
            original.set_result(response)

    async def _locked_write(
            self, request: om_pb2.OMRequest,
            trace: _Trace) -> tuple[om_pb2.OMResponse, om_pb2.ClientRequestReply | None]:
        authorize(request, self._store, self.config.acl)
        started = time.perf_counter_ns()
        owner = await self.locks.acquire(plan_locks(request))
        trace.lock_wait_ns = time.perf_counter_ns() - started
        release_now = True
        try:
            role = self._replicator.role()
            if not role.ready:
                return not_leader_response(request, self.node_id, role), None
            index = self.managed_index.next()
            ctx = ExecContext(request.user, index, time.time_ns() // 1_000_000,
                              self.reservations, self.config.limits)
            recorder = ChangeRecorder()
            started = time.perf_counter_ns()
            response = dispatch(request, self._store, recorder, ctx)
            trace.execute_ns = time.perf_counter_ns() - started
            if response.status != om_pb2.OK:
                return response, None
            assert not recorder.empty, "a successful write changes something"
            release_now = False
            return await self._replicate(request, response, recorder, index, owner, trace)
        finally:
            if release_now:
                self.locks.release(owner)

    async def _replicate(
            self, request: om_pb2.OMRequest, response: om_pb2.OMResponse,
            recorder: ChangeRecorder, index: int, owner: LockOwner,
            trace: _Trace) -> tuple[om_pb2.OMResponse, om_pb2.ClientRequestReply | None]:
        """Queues the write; the locks are released when its batch settles."""
        reply = om_pb2.ClientRequestReply(client_id=request.client_id, call_id=request.call_id,
                                          response=response.SerializeToString())
        settled: asyncio.Future[ReplicateResult] = asyncio.get_running_loop().create_future()
        self.reservations.reserve(index, recorder.quota)

        def settle(result: ReplicateResult, batch_wait_ns: int) -> None:
            self.reservations.release(index)
            self.locks.release(owner)
            trace.batch_wait_ns = batch_wait_ns
            trace.apply_ns = result.apply_ns
            trace.settled_ns = time.perf_counter_ns()
            settled.set_result(result)

        if not self.pipeline.submit(PendingWrite(index, recorder, reply), settle):
            settle(ReplicateResult(ReplicateStatus.QUEUE_FULL), 0)
        submitted = time.perf_counter_ns()
        result = await asyncio.shield(settled)
        trace.replicate_ns = max(trace.settled_ns - submitted - trace.batch_wait_ns
                                 - trace.apply_ns, 0)
        if result.status is ReplicateStatus.COMMITTED:
            reply.timestamp_ms = time.time_ns() // 1_000_000
            return response, reply
        if result.status is ReplicateStatus.QUEUE_FULL:
            return error_response(request, om_pb2.SERVER_BUSY,
                                  "the replication queue is full; retry shortly"), None
        return not_leader_response(request, self.node_id, self._replicator.role()), None

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_s)
            self.sweep_expired()

    def sweep_expired(self) -> int:
        """Queues deletes of expired retry-cache rows; returns how many rows."""
        if not self._replicator.role().ready:
            return 0
        deletes = expired_row_deletes(self._store, time.time_ns() // 1_000_000,
                                      self.config.retry.expiry_ms, self.config.sweep_rows_max)
        if deletes:
            self.pipeline.submit(PendingWrite(0, ChangeRecorder(), None, deletes),
                                 lambda result, wait_ns: None)
        return len(deletes) // 2

    def _emit(self, trace: _Trace, response: om_pb2.OMResponse) -> None:
        record: dict[str, Any] = {
            "t_ns": trace.t_ns, "node": self.node_id, "op": trace.op,
            "status": om_pb2.Status.Name(response.status),
            "lock_wait_ns": trace.lock_wait_ns, "execute_ns": trace.execute_ns,
            "batch_wait_ns": trace.batch_wait_ns, "replicate_ns": trace.replicate_ns,
            "apply_ns": trace.apply_ns,
            "reply_ns": (time.perf_counter_ns() - trace.settled_ns) if trace.settled_ns else 0,
            "batch_id": 0,
        }
        self._tracer.emit("server_request", record)
