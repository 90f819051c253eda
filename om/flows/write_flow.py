"""The port between the request template and a write flow.

The template (``om/flows/template.py`` ``RequestService``) is one concrete class
for every execution mode; it HOLDS a write flow (composition), the part that
differs between modes: ``om/flows/leader_flow.py`` ``LeaderFlow`` (execute on the
leader, replicate batches of changes; over the old flow's state machine, both
flows per write type) or ``om/flows/replicated_flow.py`` ``ReplicatedFlow``
(Ozone's old flow: replicate the request, execute it in every node's apply).

* ``WriteFlow``: what the template asks of a flow (its write path, read rounds,
  the retry cache's committed answers, the sweep of expired reply rows, its
  lifecycle and gauges).
* ``FlowHost``: the narrow handle a flow gets from the template (end a write, the
  role, the managed index, a handler's context, tasks, the seam's clocks and randomness,
  metrics), not
  the template: a flow cannot reach admission, the retry bookkeeping or the
  prepare gate's internals.
* ``Write`` (an admitted write, from admission until it ends) and ``Trace`` (the
  phase timings of one request), which cross the port.

Invariant across the port: an admitted write is ended exactly once, by the
flow calling ``FlowHost.end_write`` (now or later, whatever the outcome), and
the template then calls ``WriteFlow.write_ended`` exactly once for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from om.consensus.port import Role
from om.executor.context import ExecContext, Planned, QuotaReservations
from om.flows.read_rounds import ReadRound
from om.gatekeeper.managed_index import ManagedIndex
from om.gatekeeper.retry_cache import StoredReply
from om.observe.metrics import NodeMetrics
from om.protocol import om_pb2
from om.schema.ids import RetryKey
from om.schema.read_view import SnapshotViews
from om.schema.seam import Seam

Answer = asyncio.Future[om_pb2.OMResponse]


class Trace:
    """Phase timings of one request (docs/TRACES.md, server_request): ``t_ns`` its
    arrival by the seam's wall clock, every ``*_ns`` after it by the seam's elapsed
    clock (``started_ns``: the arrival on that clock).

    A plain class with slots: every request makes one, and a dataclass with a
    default factory costs several times as much to build."""

    __slots__ = ("apply_ns", "batch_id", "batch_wait_ns", "execute_ns", "lock_wait_ns", "op",
                 "replayed", "replicate_ns", "settled_ns", "started_ns", "t_ns")

    def __init__(self, t_ns: int, op: str, started_ns: int) -> None:
        self.t_ns = t_ns
        self.op = op
        self.started_ns = started_ns
        self.lock_wait_ns = 0
        self.execute_ns = 0
        self.batch_wait_ns = 0
        self.replicate_ns = 0
        self.apply_ns = 0
        self.settled_ns = 0
        self.batch_id = 0
        self.replayed = False   # answered by the retry cache: the original was audited


class Write:
    """An admitted write, from admission until it ends: what ending it needs, and the
    retries waiting for its answer.

    A retry's future is made only when a retry arrives (rare), so the write itself
    allocates none."""

    __slots__ = ("_waiters", "answer", "fingerprint", "key", "peer", "request", "trace")

    def __init__(self, request: om_pb2.OMRequest, peer: str, answer: Answer, trace: Trace,
                 key: RetryKey, request_fingerprint: bytes) -> None:
        self.request = request
        self.peer = peer
        self.answer = answer
        self.trace = trace
        self.key = key
        self.fingerprint = request_fingerprint
        self._waiters: list[asyncio.Future[om_pb2.OMResponse]] = []

    def wait(self) -> asyncio.Future[om_pb2.OMResponse]:
        """Resolves with this write's response, once it ends."""
        waiter: asyncio.Future[om_pb2.OMResponse] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    def settle_waiters(self, response: om_pb2.OMResponse) -> None:
        """Hands this write's response to every retry waiting for it."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(response)
        self._waiters.clear()


class FlowHost(Protocol):
    """What a write flow may use of the template that holds it."""

    @property
    def node_id(self) -> str: ...

    @property
    def metrics(self) -> NodeMetrics: ...

    @property
    def managed_index(self) -> ManagedIndex:
        """The next managed index a write executes with (``next()``), advanced to the
        state machine's when a new term becomes ready (``role``)."""
        ...

    @property
    def snapshot_views(self) -> SnapshotViews | None:
        """The node's OM snapshot checkpoints; None: none can be read (no node)."""
        ...

    @property
    def seam(self) -> Seam:
        """The node's clocks and randomness: the flow reads no other."""
        ...

    def clock_ms(self) -> int:
        """Now, in milliseconds since the epoch (the seam's wall clock, read at each call)."""
        ...

    def role(self) -> Role:
        """This node's role; advances the managed index when a new term becomes ready."""
        ...

    def prepare_gate_closed(self) -> bool:
        """Whether writes are refused (prepared, or a Prepare draining): the flow's own
        system writes (purges, the reply-row sweep) pause meanwhile too."""
        ...

    def context(self, request: om_pb2.OMRequest, managed_index: int, now_ms: int,
                reservations: QuotaReservations | None = None,
                planned: Planned | None = None) -> ExecContext:
        """The handler's context for one request."""
        ...

    def end_write(self, write: Write, response: om_pb2.OMResponse,
                  committed: om_pb2.ClientRequestReply | None) -> None:
        """Ends an admitted write with ``response`` (``committed``: its reply row, when
        it committed). Called exactly once per write the flow was given."""
        ...

    def internal_error(self, request: om_pb2.OMRequest, op: str) -> om_pb2.OMResponse:
        """INTERNAL_ERROR for a request a bug stopped, logged and counted; called in the
        ``except`` that caught it."""
        ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs the rest of a request in a task the template's ``drain`` waits for."""
        ...

    def submit(self, request: om_pb2.OMRequest, peer: str = "") -> Answer:
        """Answers a request through the whole template (the leader's own purge steps)."""
        ...


class WriteFlow(Protocol):
    """One flow's write path, as the template holds it (``RequestService.flow``)."""

    def start_write(self, write: Write) -> None:
        """Runs an admitted, authorized write; ends it with ``FlowHost.end_write``
        exactly once, now or later, whatever the outcome."""
        ...

    def write_ended(self, write: Write, committed: om_pb2.ClientRequestReply | None) -> None:
        """Called once per write given to ``start_write``, as it ends (inside
        ``FlowHost.end_write``, before the answer), whatever the outcome, with its
        reply row when it committed."""
        ...

    def on_read_round(self, done: ReadRound) -> None:
        """Calls ``done`` once an entry proposed after this call is committed and
        applied here (COMMITTED), or with the reason none will be."""
        ...

    def committed_response(self, key: RetryKey) -> StoredReply | None:
        """The stored reply of a committed write with this key, if any."""
        ...

    def sweep_expired(self) -> int:
        """Replicates deletes of expired retry-cache rows, while this node is the ready
        leader and not prepared; returns how many rows."""
        ...

    async def start(self) -> None:
        """Starts what carries writes (group commit)."""
        ...

    async def start_background(self) -> None:
        """Starts the flow's own background work (the purge), after the template's
        sweeper: the two wake at the same ticks, the sweeper first."""
        ...

    async def stop_background(self) -> None:
        """Stops the flow's own background work: it submits nothing more. Called at
        close, after the sweeper stopped and before the template waits for the writes
        in flight."""
        ...

    async def close(self) -> None:
        """Stops what carried writes, once every admitted write ended."""
        ...

    def leadership_lost(self) -> None:
        """This node stopped leading: fails what is queued and not yet replicated."""
        ...

    def gauges(self) -> dict[str, float]:
        """State gauges by ``StateGauge.key`` (the flow's own: purge, retry cache, locks)."""
        ...
