"""The request template both execution flows share (Ozone's OMGateway role).

For every request, in this order (each step's failure path undoes the earlier):

 1. shape check                      -> INVALID_REQUEST
 2. local reads (the request's ``local_read``, or ``read_mode = "local"``): answered
    by any node from what its readers see, with no confirmation: maybe stale
 3. role: leader and ready?          -> NOT_LEADER (with the leader's address) / LEADER_NOT_READY
 4. reads: authorize; wait for a read round (``_confirm_read``: an entry proposed
    after the read arrived, committed by a quorum and applied here), so the read
    sees every write acknowledged before it was sent  -> NOT_LEADER if none commits;
    then run the handler against what this flow's readers see
 5. writes: retry cache: committed before? -> the stored response, if it is the same
            request (fingerprint), else INVALID_REQUEST;
            in flight? -> wait for the original (the same request) or refuse
 6. admission: in-flight limit       -> SERVER_BUSY
 7. the flow's own write path (``_execute_write``)

Every request runs in one task of its own (``submit``), which the service
tracks until it ends (``drain``) and which no caller can cancel: the server
attaches its reply to the task, and ``handle`` awaits it shielded. So an
admitted write always settles, and its retry-cache entry is never dropped
while its entry might still commit. A write runs inline in that task: there
is no second task, and no shield, per write.

Subclasses: ``om.flows.leader_flow.LeaderService`` (execute on the leader, replicate
batches of changes) and ``om.flows.replicated_flow.ReplicatedFlowService``
(Ozone's old flow: replicate the request, execute it in every node's apply).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from om.config import READ_LINEARIZABLE, READ_LOCAL, READ_MODES
from om.consensus.port import ReplicateResult, ReplicateStatus, Replicator, Role
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, Limits, NoReservations, QuotaReservations
from om.executor.errors import OMError
from om.executor.registry import KINDS, dispatch, error_response, shape_problem
from om.gatekeeper.authorize import AclPolicy, authorize
from om.gatekeeper.managed_index import ManagedIndex
from om.gatekeeper.retry_cache import StoredReply
from om.observe.audit import AuditSink, NoAudit
from om.observe.metrics import NodeMetrics
from om.observe.tracing import TraceSink
from om.protocol import om_pb2
from om.schema.fingerprint import fingerprint, same_request
from om.schema.ids import RetryKey
from om.schema.read_view import ReadView

logger = logging.getLogger(__name__)
Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the leader fixes it for each write."""
    return time.time_ns() // 1_000_000


@dataclass
class Trace:
    """Phase timings of one request (docs/TRACES.md, server_request)."""

    t_ns: int
    op: str
    started_ns: int = field(default_factory=time.perf_counter_ns)
    lock_wait_ns: int = 0
    execute_ns: int = 0
    batch_wait_ns: int = 0
    replicate_ns: int = 0
    apply_ns: int = 0
    settled_ns: int = 0
    batch_id: int = 0
    replayed: bool = False   # answered by the retry cache: the original was audited


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


def audit_request(audit: AuditSink, request: om_pb2.OMRequest, peer: str, status: str,
                  message: str) -> None:
    """Records one answered (or refused) request in the audit log, as the flow and the
    server (a forged user, refused before any flow) both do."""
    kind = KINDS.get(request.cmd_type)
    body = request.WhichOneof("body")
    audit.record(request.user, peer, kind.name if kind else "UNKNOWN",
                 getattr(request, body) if body else None, kind.write if kind else True,
                 status, message)


def reused_call_id(request: om_pb2.OMRequest,
                   original_type: om_pb2.Type.ValueType) -> om_pb2.OMResponse:
    """INVALID_REQUEST for a request that reuses the call id of a different one.

    A well-behaved client never does that; answering with another request's
    response would be silently wrong (Ozone's HDDS-11491), so refuse."""
    return error_response(
        request, om_pb2.INVALID_REQUEST,
        f"call id {request.call_id} of client {request.client_id} was already used for a "
        f"different {om_pb2.Type.Name(original_type)} request; a retry must resend the "
        "same request, and a new request needs a new call id")


def stored_answer(request: om_pb2.OMRequest, request_fingerprint: bytes,
                  stored: StoredReply) -> om_pb2.OMResponse:
    """The stored answer, when the retry is the request it answered."""
    if (stored.response.cmd_type == request.cmd_type
            and same_request(stored.fingerprint, request_fingerprint)):
        return stored.response
    return reused_call_id(request, stored.response.cmd_type)


@dataclass
class _Original:
    """A write being answered now: what a retry of it waits for, and what it was."""

    answer: asyncio.Future[om_pb2.OMResponse | None]
    fingerprint: bytes
    cmd_type: om_pb2.Type.ValueType


class RequestService(abc.ABC):
    """The shared template; subclasses provide the write path and what readers see."""

    def __init__(self, node_id: str, replicator: Replicator, managed_index: int,
                 acl: AclPolicy, limits: Limits, in_flight_max: int, retry_wait_s: float,
                 tracer: TraceSink, clock_ms: Clock = wall_clock_ms,
                 retry_cache_enabled: bool = True, read_mode: str = READ_LINEARIZABLE,
                 metrics: NodeMetrics | None = None, audit: AuditSink | None = None) -> None:
        assert in_flight_max > 0
        assert retry_wait_s > 0
        assert read_mode in READ_MODES
        self._read_mode = read_mode
        self.metrics = metrics or NodeMetrics()
        self._audit: AuditSink = audit or NoAudit()
        self.node_id = node_id
        self._replicator = replicator
        self._acl = acl
        self._limits = limits
        self._in_flight_max = in_flight_max
        self._retry_wait_s = retry_wait_s
        self._tracer = tracer
        self.clock_ms = clock_ms
        self._retry_cache_enabled = retry_cache_enabled
        self.managed_index = ManagedIndex(managed_index)
        self._originals: dict[RetryKey, _Original] = {}
        self._tasks: set[asyncio.Task[om_pb2.OMResponse]] = set()
        self._index_term = -1
        self.requests = 0

    # -- what a subclass provides -------------------------------------------------------

    @abc.abstractmethod
    def _view(self) -> ReadView:
        """What readers of this flow see."""

    @abc.abstractmethod
    def _persisted_managed_index(self) -> int:
        """The highest managed index this node has applied."""

    @abc.abstractmethod
    async def _confirm_read(self) -> ReplicateResult:
        """COMMITTED once an entry proposed after this call is applied here."""

    @abc.abstractmethod
    def _committed_response(self, key: RetryKey) -> StoredReply | None:
        """The stored reply of a committed write with this key, if any."""

    @abc.abstractmethod
    async def _execute_write(self, request: om_pb2.OMRequest, trace: Trace,
                             request_fingerprint: bytes) -> om_pb2.OMResponse:
        """Executes and commits one admitted write; answers with its response."""

    @abc.abstractmethod
    def _write_finished(self, request: om_pb2.OMRequest, key: RetryKey,
                        response: om_pb2.OMResponse | None) -> None:
        """Called once per admitted write when it ends, whatever the outcome.

        ``key`` is the in-flight key: the request's (client id, call id), unless
        the retry cache is disabled for a test."""

    # -- the template -------------------------------------------------------------------

    @property
    def linearizable_reads(self) -> int:
        """Reads answered after a quorum confirmed this leader."""
        return self.metrics.requests.linearizable_reads

    @property
    def in_flight(self) -> int:
        """Writes admitted and not yet answered."""
        return len(self._originals)

    async def drain(self) -> None:
        """Waits for every request being answered to finish."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def submit(self, request: om_pb2.OMRequest,
               peer: str = "") -> asyncio.Task[om_pb2.OMResponse]:
        """Starts answering ``request`` (from the client at ``peer``, for the audit log) in
        a task the caller must not cancel."""
        task = asyncio.get_running_loop().create_task(self._answer(request, peer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def handle(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Answers one request; the caller's cancellation does not stop it."""
        return await asyncio.shield(self.submit(request))

    async def _answer(self, request: om_pb2.OMRequest, peer: str) -> om_pb2.OMResponse:
        """Answers one request; never raises for anything a client can cause."""
        self.requests += 1
        problem = shape_problem(request)
        if problem is not None:
            self.metrics.requests.answered("INVALID", "INVALID_REQUEST", 0.0)
            return error_response(request, om_pb2.INVALID_REQUEST, problem)
        trace = Trace(time.time_ns(), KINDS[request.cmd_type].name)
        try:
            response = await self._handle_valid(request, trace)
        except OMError as error:
            response = error_response(request, error.status, error.message)
        except Exception:
            logger.exception("request %s failed", trace.op)
            response = error_response(request, om_pb2.INTERNAL_ERROR,
                                      f"internal error while running {trace.op}")
        self._count(trace, response)
        if not trace.replayed:
            audit_request(self._audit, request, peer, om_pb2.Status.Name(response.status),
                          response.message)
        self._emit(trace, response)
        return response

    def _count(self, trace: Trace, response: om_pb2.OMResponse) -> None:
        requests = self.metrics.requests
        requests.answered(trace.op, om_pb2.Status.Name(response.status),
                          (time.perf_counter_ns() - trace.started_ns) / 1e9)
        if trace.lock_wait_ns:
            requests.lock_wait.observe(trace.lock_wait_ns / 1e9)

    def role(self) -> Role:
        """This node's role; advances the managed index when a new term becomes ready."""
        role = self._replicator.role()
        if role.ready and role.term != self._index_term:
            self.managed_index.advance_to(self._persisted_managed_index())
            self._index_term = role.term
        return role

    def context(self, request: om_pb2.OMRequest, managed_index: int, now_ms: int,
                reservations: QuotaReservations | None = None) -> ExecContext:
        """The ExecContext of one request (with the group mapping: a create gives the
        creator's primary group its default ACL)."""
        return ExecContext(request.user, managed_index, now_ms,
                           reservations or NoReservations(), self._limits, self._acl.groups)

    def authorize(self, request: om_pb2.OMRequest) -> None:
        """PERMISSION_DENIED unless the request's user may run it."""
        authorize(request, self._view(), self._acl)

    async def _handle_valid(self, request: om_pb2.OMRequest, trace: Trace) -> om_pb2.OMResponse:
        write = KINDS[request.cmd_type].write
        if not write and (request.local_read or self._read_mode == READ_LOCAL):
            self.authorize(request)
            return self._read(request, trace)   # any node, from its applied state
        role = self.role()
        if not role.ready:
            return not_leader_response(request, self.node_id, role)
        if not write:
            return await self._linearizable_read(request, trace)
        return await self._write(request, trace)

    async def _linearizable_read(self, request: om_pb2.OMRequest,
                                 trace: Trace) -> om_pb2.OMResponse:
        """Answers once this node confirmed, after the read arrived, that it still
        leads and applied everything committed until then (ReadIndex)."""
        self.authorize(request)
        started = time.perf_counter_ns()
        confirmed = await self._confirm_read()
        trace.replicate_ns = time.perf_counter_ns() - started
        if confirmed.status is not ReplicateStatus.COMMITTED:
            return not_leader_response(request, self.node_id, self._replicator.role())
        self.metrics.requests.linearizable_reads += 1
        return self._read(request, trace)

    def _read(self, request: om_pb2.OMRequest, trace: Trace) -> om_pb2.OMResponse:
        """Runs an authorized read's handler against what this flow's readers see."""
        started = time.perf_counter_ns()
        response = dispatch(request, self._view(), ChangeRecorder(),
                            self.context(request, 0, self.clock_ms()))
        trace.execute_ns = time.perf_counter_ns() - started
        return response

    async def _write(self, request: om_pb2.OMRequest, trace: Trace) -> om_pb2.OMResponse:
        key = (request.client_id, request.call_id)
        if not self._retry_cache_enabled:  # test-only: every retry executes again
            key = (f"{request.client_id}#retry-cache-off#{self.requests}", request.call_id)
        request_fingerprint = fingerprint(request)
        while True:
            stored = self._committed_response(key)
            if stored is not None:
                answer = stored_answer(request, request_fingerprint, stored)
                trace.replayed = answer is stored.response
                return answer
            original = self._originals.get(key)
            if original is None:
                break
            if original.fingerprint != request_fingerprint:
                return reused_call_id(request, original.cmd_type)
            awaited = await self._await_original(original.answer)
            if awaited is not None:
                trace.replayed = True
                return awaited
        if len(self._originals) >= self._in_flight_max:
            return error_response(request, om_pb2.SERVER_BUSY,
                                  f"{len(self._originals)} writes in flight; retry shortly")
        return await self._write_original(request, key, trace, request_fingerprint)

    async def _await_original(
            self, original: asyncio.Future[om_pb2.OMResponse | None]) -> om_pb2.OMResponse | None:
        """The original's response; None when it ended without one (retry afresh)."""
        try:
            return await asyncio.wait_for(asyncio.shield(original), self._retry_wait_s)
        except TimeoutError:
            raise OMError(om_pb2.TIMEOUT,
                          "timed out waiting for the original of a retried request") from None

    async def _write_original(self, request: om_pb2.OMRequest, key: RetryKey, trace: Trace,
                              request_fingerprint: bytes) -> om_pb2.OMResponse:
        original = _Original(asyncio.get_running_loop().create_future(), request_fingerprint,
                             request.cmd_type)
        self._originals[key] = original
        response: om_pb2.OMResponse | None = None
        try:
            response = await self._execute_write(request, trace, request_fingerprint)
            return response
        except OMError as error:
            response = error_response(request, error.status, error.message)
            return response
        finally:
            self._write_finished(request, key, response)
            del self._originals[key]
            original.answer.set_result(response)

    def _emit(self, trace: Trace, response: om_pb2.OMResponse) -> None:
        if not self._tracer.enabled:
            return
        record: dict[str, Any] = {
            "t_ns": trace.t_ns, "node": self.node_id, "op": trace.op,
            "status": om_pb2.Status.Name(response.status),
            "lock_wait_ns": trace.lock_wait_ns, "execute_ns": trace.execute_ns,
            "batch_wait_ns": trace.batch_wait_ns, "replicate_ns": trace.replicate_ns,
            "apply_ns": trace.apply_ns,
            "reply_ns": (time.perf_counter_ns() - trace.settled_ns) if trace.settled_ns else 0,
            "batch_id": trace.batch_id,
        }
        self._tracer.emit("server_request", record)
