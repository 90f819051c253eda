"""The request template both execution flows share (Ozone's OMGateway role).

For every request, in this order (a step that refuses answers at once: nothing
was done yet that would need undoing):

 1. shape check                      -> INVALID_REQUEST
    fields (om/gatekeeper/validation.py): every field of the envelope and the body,
    once, before anything else looks at them -> INVALID_REQUEST, INVALID_VOLUME_NAME,
    INVALID_BUCKET_NAME, INVALID_KEY_NAME, QUOTA_ERROR, INVALID_TOKEN, ... naming the field;
    with shards (om/gatekeeper/shard_gate.py): another shard's request -> WRONG_SHARD
    with its address, one over rows several shards hold -> NOT_SUPPORTED_OPERATION
 2. local reads (the request's ``local_read``, or ``read_mode = "local"``): answered
    by any node from what its readers see, with no confirmation: maybe stale
 3. role: leader and ready?          -> NOT_LEADER (with the leader's address) / LEADER_NOT_READY
 4. reads: authorize; register for the flow's next read round (an entry proposed
    after the read arrived, committed by a quorum and applied here), so the read
    sees every write acknowledged before it was sent -> NOT_LEADER if the round
    fails; then run the handler against what this flow's readers see; an older
    client's answer of keys it cannot understand (om/gatekeeper/old_clients.py,
    Ozone's post-process validators) -> NOT_SUPPORTED_OPERATION
 5. writes: retry cache (the write's key from the ``RetryKeys`` port the factory
            picked, om/gatekeeper/retry_cache.py): committed before? -> the stored
            response, if it is the same request (fingerprint), else INVALID_REQUEST;
            in flight? -> wait for the original (the same request) or refuse
 6. an older client's key write (om/gatekeeper/old_clients.py, Ozone's pre-process
    validators; a current client's costs no read) -> NOT_SUPPORTED_OPERATION, or the
    bucket's VOLUME_NOT_FOUND / BUCKET_NOT_FOUND;
    upgrade gate (om/executor/admin/upgrade.py): prepared (or a Prepare draining), any
    write but Prepare and CancelPrepare -> NOT_SUPPORTED_OPERATION_WHEN_PREPARED;
    a feature newer than the finalized layout -> NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION
 7. admission: in-flight limit       -> SERVER_BUSY
 8. authorize                        -> PERMISSION_DENIED
 9. the flow's own write path (``WriteFlow.start_write``), which ends the write with
    ``end_write`` exactly once, whatever the outcome; a Prepare first closes the
    gate and waits (bounded) for every other write in flight to end -> PREPARE_FAILED

All of it runs synchronously in ``submit``, which the server calls from its
``data_received``: what one loop iteration received is processed as a group,
with no task, coroutine or lock round-trip per request. A request waits in a
task only where it must: for the original of a retried write here, and in the
flows for a lock another write holds (leader flow) or for its own Raft entry
(old flow). The answer is a future the caller must not cancel; an admitted
write always ends, so its retry-cache entry is never dropped while its entry
might still commit. ``drain`` waits for the tasks.

INTERNAL_ERROR is a bug's answer only (``internal_error``): a client's mistake is a
status from the field checks or a handler. Each one is logged with its traceback and
counted in ``om_internal_errors_total``.

The template is one concrete class; what differs between execution modes is the
write flow it holds (composition, the port in ``om/flows/write_flow.py``):
``om.flows.leader_flow.LeaderFlow`` (execute on the leader, replicate batches of
changes; over the old flow's state machine, both flows per write type) or
``om.flows.replicated_flow.ReplicatedFlow`` (Ozone's old flow: replicate the
request, execute it in every node's apply). The flow sees the template only
through ``FlowHost``; ``leader_service`` and ``replicated_flow_service`` build a
template with its flow.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from om.config import READ_LOCAL, READ_MODES
from om.consensus.port import ReplicateResult, ReplicateStatus, Replicator, Role
from om.executor.admin import upgrade
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import (
    ExecContext,
    Limits,
    NoReservations,
    Planned,
    QuotaReservations,
)
from om.executor.errors import OMError
from om.executor.registry import KINDS, dispatch, error_response, shape_problem
from om.flows.settings import LeaderConfig
from om.flows.write_flow import Answer, FlowHost, Trace, Write, WriteFlow
from om.gatekeeper import old_clients, validation
from om.gatekeeper.authorize import AclPolicy, authorize
from om.gatekeeper.managed_index import ManagedIndex
from om.gatekeeper.retry_cache import RetryKeys, StoredReply
from om.observe.audit import AuditSink, NoAudit
from om.observe.metrics import NodeMetrics
from om.observe.tracing import LineFormat, TraceSink
from om.protocol import om_pb2
from om.protocol.status_names import status_name
from om.schema.fingerprint import fingerprint, same_request
from om.schema.ids import RetryKey
from om.schema.read_view import ReadView, SnapshotViews
from om.schema.seam import Seam

logger = logging.getLogger(__name__)
Clock = Callable[[], int]
SWEEP_TICK_S = 1.0  # how often the retry-cache sweeper looks at this node's role
# docs/TRACES.md, server_request: the fields after the node, in the order _emit passes them
SERVER_REQUEST_FIELDS = (("t_ns", int), ("op", str), ("status", str), ("lock_wait_ns", int),
                         ("execute_ns", int), ("batch_wait_ns", int), ("replicate_ns", int),
                         ("apply_ns", int), ("reply_ns", int), ("batch_id", int))


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


def entry_answer(request: om_pb2.OMRequest, result: ReplicateResult, node_id: str,
                 role: Role) -> om_pb2.OMResponse:
    """The answer to an old-flow write from its entry's result: the response its apply
    here produced when it committed, else why it did not."""
    if result.status is ReplicateStatus.COMMITTED:
        return om_pb2.OMResponse.FromString(result.response)
    if result.status is ReplicateStatus.QUEUE_FULL:
        return error_response(request, om_pb2.SERVER_BUSY,
                              "the replication queue is full; retry shortly")
    return not_leader_response(request, node_id, role)


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


class Positions(Protocol):
    """The state machine's positions, as the template reads them."""

    @property
    def managed_index(self) -> int:
        """The highest managed index this node has applied."""
        ...


FlowT = TypeVar("FlowT", bound=WriteFlow)


class RequestService(Generic[FlowT]):
    """The shared template, holding one write flow (``flow``) that provides the write
    path, read rounds and the retry cache's committed answers (what readers see is
    given: ``view``).

    Invariants: every admitted write is in ``_originals`` until it ends, and ends
    exactly once (``end_write`` for a write the flow started, ``_end_unstarted`` for
    a Prepare that never reached it); the flow is told of each end it started
    (``WriteFlow.write_ended``) before the write's answer resolves."""

    def __init__(self, node_id: str, replicator: Replicator, positions: Positions,
                 view: ReadView, settings: LeaderConfig, tracer: TraceSink,
                 flow: Callable[[FlowHost], FlowT], seam: Seam,
                 metrics: NodeMetrics | None = None, audit: AuditSink | None = None) -> None:
        """``positions``: the state machine, whose managed index a new term starts
        from; ``view``: what readers of this flow see (the store, or the old flow's
        write cache over it); ``settings``: the template reads its ACL policy, handler
        limits, in-flight limit, retry wait, retry keys, read mode and sweep period;
        ``flow``: builds the write flow over this template's ``FlowHost`` handle, last,
        once everything the handle offers is set; ``seam``: every clock and random
        byte this service and its flow read (om/schema/seam.py)."""
        assert settings.in_flight_max > 0
        assert settings.retry_wait_s > 0
        assert settings.sweep_interval_s > 0
        assert settings.sweep_rows_max > 0
        assert settings.read_mode in READ_MODES
        self._read_mode = settings.read_mode
        self.metrics = metrics or NodeMetrics()
        self._audit: AuditSink = audit or NoAudit()
        self.node_id = node_id
        self._replicator = replicator
        self._acl: AclPolicy = settings.acl
        self._limits: Limits = settings.limits
        self._shard_gate = settings.shard_gate
        self._in_flight_max = settings.in_flight_max
        self._retry_wait_s = settings.retry_wait_s
        self._tracer = tracer
        self._request_line = LineFormat("server_request", {"flow": tracer.flow, "node": node_id},
                                        SERVER_REQUEST_FIELDS)
        self.seam = seam
        self.clock_ms: Clock = seam.clock_ms
        self._wall_ns = seam.wall_ns
        self._elapsed_ns = seam.elapsed_ns
        self._retry_key: RetryKeys = settings.retry_keys
        self._positions = positions
        self._reader = view
        gate = settings.shard_gate    # with shards: indexes on this shard's residue only
        self.managed_index = ManagedIndex(positions.managed_index, *(
            (0, 1) if gate is None else (gate.shard, gate.shards)))
        self._originals: dict[RetryKey, Write] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._index_term = -1
        self.requests = 0
        # the node's OM snapshot checkpoints, for handlers (reads of a snapshot, a
        # create's disk headroom); None: no snapshot can be read (tests without a node)
        self.snapshot_views: SnapshotViews | None = None
        self._preparing = False   # a Prepare closed the gate and waits for the writes in flight
        self._drained: asyncio.Event | None = None   # set when only the Prepare is in flight
        self._sweep_interval_s = settings.sweep_interval_s
        self._sweep_rows_max = settings.sweep_rows_max
        self._sweeper: asyncio.Task[None] | None = None
        self.flow: FlowT = flow(self)

    # -- lifecycle: the template's sweeper around the flow's own ----------------------

    async def start(self) -> None:
        """Starts the flow (group commit), the sweeper of expired reply rows (apply
        writes them; only the leader deletes expired ones, through the log, so every
        node deletes the same), then the flow's background work (the purge)."""
        await self.flow.start()
        self._sweeper = asyncio.get_running_loop().create_task(
            self.sweep_forever(self._sweep_interval_s, self._sweep_rows_max))
        await self.flow.start_background()

    async def close(self) -> None:
        """Stops the sweeper and the flow's background work, lets every admitted write
        end, then closes the flow."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await self.flow.stop_background()
        await self.drain()
        await self.flow.close()

    def leadership_lost(self) -> None:
        """This node stopped leading: the flow fails what it queued."""
        self.flow.leadership_lost()

    def gauges(self) -> dict[str, float]:
        """The flow's state gauges by ``StateGauge.key``."""
        return self.flow.gauges()

    # -- the template -------------------------------------------------------------------

    async def sweep_forever(self, interval_s: float, page_rows: int) -> None:
        """Sweeps every ``interval_s`` while this node leads, at once when it becomes
        the leader, and at the next tick after a sweep that found a full page
        (``page_rows``) of expired rows, until it finds less.

        Why each: with leaderships shorter than the interval (a storm of faults),
        sweeps on each node's own period alone went missing for minutes; and a page
        per interval (10,000 rows every 30 s) is slower than a busy leader writes
        rows, so a fault-free soak ended with 470,000 expired rows unswept (both
        found by soaks, past the auditor's grace). A page swept again before its
        deletes applied is deleted twice, which changes nothing."""
        assert interval_s > 0
        assert page_rows > 0
        was_ready = behind = False
        last_s = 0.0
        while True:
            await asyncio.sleep(min(interval_s, SWEEP_TICK_S))
            ready = self._replicator.role().ready
            now_s = self._elapsed_ns() / 1e9
            if ready and (not was_ready or behind or now_s - last_s >= interval_s):
                behind = self.flow.sweep_expired() >= page_rows
                last_s = now_s
            was_ready = ready

    @property
    def linearizable_reads(self) -> int:
        """Reads answered after a quorum confirmed this leader."""
        return self.metrics.requests.linearizable_reads

    @property
    def in_flight(self) -> int:
        """Writes admitted and not yet answered."""
        return len(self._originals)

    @property
    def waiting(self) -> int:
        """Requests waiting in a task now (for a lock, an original, an entry)."""
        return len(self._tasks)

    async def drain(self) -> None:
        """Waits for every task of a request being answered to finish."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs the rest of a request in a task ``drain`` waits for."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def submit(self, request: om_pb2.OMRequest, peer: str = "") -> Answer:
        """Starts answering ``request`` (from the client at ``peer``, for the audit log);
        the future resolves with the answer, now or later. The caller must not cancel it."""
        answer: Answer = asyncio.get_running_loop().create_future()
        try:
            self._start(request, peer, answer)
        except Exception:
            kind = KINDS.get(request.cmd_type)
            response = self.internal_error(request, kind.name if kind else "a request")
            if not answer.done():
                answer.set_result(response)
        return answer

    def internal_error(self, request: om_pb2.OMRequest, op: str) -> om_pb2.OMResponse:
        """INTERNAL_ERROR for a request a bug stopped, called in the ``except`` that caught
        it: the traceback is logged and ``om_internal_errors_total`` counts it."""
        logger.exception("request %s failed", op)
        self.metrics.requests.internal_error()
        return error_response(request, om_pb2.INTERNAL_ERROR,
                              f"internal error while running {op}")

    async def handle(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Answers one request; the caller's cancellation does not stop it."""
        return await asyncio.shield(self.submit(request))

    def _start(self, request: om_pb2.OMRequest, peer: str, answer: Answer) -> None:
        """Steps 1-8 of the module docstring."""
        self.requests += 1
        problem = shape_problem(request)
        if problem is not None:
            self.metrics.requests.answered("INVALID", "INVALID_REQUEST", 0.0)
            answer.set_result(error_response(request, om_pb2.INVALID_REQUEST, problem))
            return
        kind = KINDS[request.cmd_type]
        trace = Trace(self._wall_ns(), kind.name, self._elapsed_ns())
        refusal = validation.problem(request, self._limits)
        if refusal is not None:
            self._end(request, peer, answer, trace,
                      error_response(request, refusal.status, refusal.message))
            return
        if self._shard_gate is not None:
            not_here = self._shard_gate.refusal(request, kind)
            if not_here is not None:
                self._end(request, peer, answer, trace, not_here)
                return
        if not kind.write:
            self._start_read(request, peer, answer, trace)
            return
        role = self.role()
        if not role.ready:
            self._end(request, peer, answer, trace,
                      not_leader_response(request, self.node_id, role))
            return
        key = self._retry_key(request)
        request_fingerprint = fingerprint(request)
        if self._answered_as_retry(request, peer, answer, trace, key, request_fingerprint):
            return
        refused = self._admission_refusal(request)
        if refused is not None:
            self._end(request, peer, answer, trace, refused)
            return
        write = Write(request, peer, answer, trace, key, request_fingerprint)
        self._originals[key] = write
        if request.cmd_type == om_pb2.Prepare:
            self._start_prepare(write)
        else:
            self.flow.start_write(write)

    def _answered_as_retry(self, request: om_pb2.OMRequest, peer: str, answer: Answer,
                           trace: Trace, key: RetryKey, request_fingerprint: bytes) -> bool:
        """Step 5: whether the write is a retry, answered now (a committed original's
        stored response, or a reused call id) or once its original in flight ends."""
        stored = self.flow.committed_response(key)
        if stored is not None:
            response = stored_answer(request, request_fingerprint, stored)
            trace.replayed = response is stored.response
            self._end(request, peer, answer, trace, response)
            return True
        original = self._originals.get(key)
        if original is None:
            return False
        if original.fingerprint != request_fingerprint:
            response = reused_call_id(request, original.request.cmd_type)
            self._end(request, peer, answer, trace, response)
        else:
            self.spawn(self._answer_as_original(request, peer, answer, trace, original.wait()))
        return True

    def _admission_refusal(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse | None:
        """Steps 6-8: the answer refusing a new write (an older client's, the upgrade
        gate, the in-flight limit, its user's rights), or None: it is admitted."""
        gate = (old_clients.pre_process_refusal(request, self._view())
                or self._upgrade_refusal(request))
        if gate is not None:
            return error_response(request, gate.status, gate.message)
        if len(self._originals) >= self._in_flight_max:
            return error_response(request, om_pb2.SERVER_BUSY,
                                  f"{len(self._originals)} writes in flight; retry shortly")
        try:
            self.authorize(request)
        except OMError as error:
            return error_response(request, error.status, error.message)
        return None

    # -- prepare (om/executor/admin/upgrade.py) -------------------------------------------

    def prepare_gate_closed(self) -> bool:
        """Whether writes are refused: the cluster is prepared (the marker in applied
        state), or a Prepare here waits for the writes in flight. The leader's own
        system writes (purges, retry-cache expiry) pause meanwhile too."""
        return self._preparing or upgrade.prepared(self._view()) is not None

    def _upgrade_refusal(self, request: om_pb2.OMRequest) -> OMError | None:
        """Step 6: the prepare gate, then the layout's request validator."""
        if request.cmd_type not in upgrade.ALLOWED_WHEN_PREPARED:
            if self._preparing:
                return OMError(om_pb2.NOT_SUPPORTED_OPERATION_WHEN_PREPARED,
                               f"{om_pb2.Type.Name(request.cmd_type)}: the OM is being "
                               "prepared for an upgrade and accepts no write but CancelPrepare")
            marker = upgrade.prepared(self._view())
            if marker is not None:
                return upgrade.prepared_refusal(request, marker)
        return upgrade.layout_refusal(request, self._view())

    def _start_prepare(self, write: Write) -> None:
        """Closes the gate, then runs the Prepare once every other write in flight
        ended; PREPARE_FAILED (and the gate open again) if they did not in time."""
        if self._preparing:
            self._end_unstarted(write, error_response(
                write.request, om_pb2.PREPARE_FAILED,
                "another Prepare is waiting for the writes in flight; ask again later"))
            return
        self._preparing = True
        self.spawn(self._prepare_when_drained(write))

    async def _prepare_when_drained(self, write: Write) -> None:
        timeout_s = upgrade.drain_timeout_s(write.request.prepare)
        self._drained = asyncio.Event()
        try:
            if len(self._originals) > 1:
                await asyncio.wait_for(self._drained.wait(), timeout_s)
        except TimeoutError:
            pass
        except BaseException:      # cancelled at shutdown
            self._preparing = False
            self._end_unstarted(write, error_response(
                write.request, om_pb2.LEADER_NOT_READY,
                f"OM:{self.node_id} is shutting down; retry"))
            raise
        if len(self._originals) > 1:
            self._preparing = False
            self._end_unstarted(write, error_response(
                write.request, om_pb2.PREPARE_FAILED,
                f"{len(self._originals) - 1} writes still in flight after {timeout_s} s; "
                "the OM is not prepared (writes are accepted again)"))
            return
        self.flow.start_write(write)

    def _end_unstarted(self, write: Write, response: om_pb2.OMResponse) -> None:
        """Ends an admitted write that never reached the flow's write path."""
        self._forget(write)
        write.settle_waiters(response)
        self._end(write.request, write.peer, write.answer, write.trace, response)

    async def _answer_as_original(self, request: om_pb2.OMRequest, peer: str, answer: Answer,
                                  trace: Trace, original: asyncio.Future[om_pb2.OMResponse],
                                  ) -> None:
        """Answers a retry of a write still in flight with the original's answer
        (``original``: registered when the retry arrived, so it cannot miss the end)."""
        try:
            response = await asyncio.wait_for(original, self._retry_wait_s)
            trace.replayed = True
        except TimeoutError:
            response = error_response(request, om_pb2.TIMEOUT,
                                      "timed out waiting for the original of a retried request")
        self._end(request, peer, answer, trace, response)

    def end_write(self, write: Write, response: om_pb2.OMResponse,
                  committed: om_pb2.ClientRequestReply | None) -> None:
        """Ends an admitted write the flow started: the flow's bookkeeping, retries
        waiting for it, metrics, audit and trace, then the answer."""
        self.flow.write_ended(write, committed)
        if write.request.cmd_type == om_pb2.Prepare:
            self._preparing = False   # committed: the marker is applied here and shuts the gate
        self._forget(write)
        write.settle_waiters(response)
        self._end(write.request, write.peer, write.answer, write.trace, response)

    def _forget(self, write: Write) -> None:
        """Drops an ended write from those in flight; wakes a Prepare waiting for them."""
        ended = self._originals.pop(write.key)
        assert ended is write, "a write ends exactly once (a later write reuses its key)"
        if self._preparing and len(self._originals) <= 1 and self._drained is not None:
            self._drained.set()

    def _end(self, request: om_pb2.OMRequest, peer: str, answer: Answer, trace: Trace,
             response: om_pb2.OMResponse) -> None:
        """Counts, audits and traces one answered request, then answers it."""
        self._count(trace, response)
        if not trace.replayed:
            audit_request(self._audit, request, peer, status_name(response.status),
                          response.message)
        self._emit(trace, response)
        if not answer.done():
            answer.set_result(response)

    def _start_read(self, request: om_pb2.OMRequest, peer: str, answer: Answer,
                    trace: Trace) -> None:
        """Steps 2-4: a local read now; a linearizable read in its round's callback."""
        local = request.local_read or self._read_mode == READ_LOCAL
        if not local:
            role = self.role()
            if not role.ready:
                self._end(request, peer, answer, trace,
                          not_leader_response(request, self.node_id, role))
                return
        try:
            self.authorize(request)
        except OMError as error:
            self._end(request, peer, answer, trace,
                      error_response(request, error.status, error.message))
            return
        if local:
            self._end(request, peer, answer, trace, self._read(request, trace))
        else:
            self.flow.on_read_round(partial(self._answer_read, request, peer, answer, trace,
                                        self._elapsed_ns()))

    def _answer_read(self, request: om_pb2.OMRequest, peer: str, answer: Answer, trace: Trace,
                     started_ns: int, confirmed: ReplicateResult) -> None:
        """Runs a linearizable read once its round confirmed this leader."""
        trace.replicate_ns = self._elapsed_ns() - started_ns
        try:
            if confirmed.status is not ReplicateStatus.COMMITTED:
                response = not_leader_response(request, self.node_id, self._replicator.role())
            else:
                self.metrics.requests.linearizable_reads += 1
                response = self._read(request, trace)
        except Exception:
            response = self.internal_error(request, trace.op)
        self._end(request, peer, answer, trace, response)

    def _count(self, trace: Trace, response: om_pb2.OMResponse) -> None:
        requests = self.metrics.requests
        requests.answered(trace.op, status_name(response.status),
                          (self._elapsed_ns() - trace.started_ns) / 1e9)
        if trace.lock_wait_ns:
            requests.lock_wait.observe(trace.lock_wait_ns / 1e9)

    def role(self) -> Role:
        """This node's role; advances the managed index when a new term becomes ready."""
        role = self._replicator.role()
        if role.ready and role.term != self._index_term:
            self.managed_index.advance_to(self._positions.managed_index)
            self._index_term = role.term
        return role

    def context(self, request: om_pb2.OMRequest, managed_index: int, now_ms: int,
                reservations: QuotaReservations | None = None,
                planned: Planned | None = None) -> ExecContext:
        """The ExecContext of one request (with the group mapping and the groups of the
        requester's certificate: a create gives the creator's primary group its default
        ACL; ``planned``: the paths its lock plan resolved on the state it executes on)."""
        return ExecContext(request.user, managed_index, now_ms,
                           reservations or NoReservations(), self._limits, self._acl.groups,
                           tuple(request.groups), planned or {}, self.snapshot_views)

    def _view(self) -> ReadView:
        """What readers of this flow see."""
        return self._reader

    def authorize(self, request: om_pb2.OMRequest) -> None:
        """PERMISSION_DENIED unless the request's user may run it."""
        authorize(request, self._view(), self._acl)

    def _read(self, request: om_pb2.OMRequest, trace: Trace) -> om_pb2.OMResponse:
        """Runs an authorized read's handler against what this flow's readers see."""
        started = self._elapsed_ns()
        response = old_clients.post_process(request, dispatch(
            request, self._view(), ChangeRecorder(), self.context(request, 0, self.clock_ms())))
        if (self._preparing and response.HasField("prepare_status")
                and response.prepare_status.status == om_pb2.NOT_PREPARED):
            response.prepare_status.status = om_pb2.PREPARE_GATE_ENABLED
        trace.execute_ns = self._elapsed_ns() - started
        return response

    def _emit(self, trace: Trace, response: om_pb2.OMResponse) -> None:
        if not self._tracer.enabled:
            return
        self._tracer.emit_line(self._request_line.line(
            trace.t_ns, trace.op, status_name(response.status), trace.lock_wait_ns,
            trace.execute_ns, trace.batch_wait_ns, trace.replicate_ns, trace.apply_ns,
            (self._elapsed_ns() - trace.settled_ns) if trace.settled_ns else 0,
            trace.batch_id))
