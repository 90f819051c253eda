"""The old flow: replicate each request, execute it in apply.

``ReplicatedFlow`` is the write flow (``om/flows/write_flow.py`` ``WriteFlow``) that
the shared template (``om/flows/template.py`` ``RequestService``) holds in the
replicated mode; ``replicated_flow_service`` builds the template with it. After the
template, a write is authorized, gets its time and managed index fixed (Ozone's
``preExecute``), and goes to Raft as its own entry; every node executes it in
apply, and the leader answers with the response its own apply produced. There are
no locks, reservations or batches: apply is serial. Readers see the write cache over
RocksDB.
"""

from __future__ import annotations

from om.consensus.port import ReplicateResult, Replicator
from om.executor.registry import error_response
from om.flows.read_rounds import ReadRound, ReadRounds
from om.flows.settings import LeaderConfig
from om.flows.template import RequestService, entry_answer
from om.flows.write_flow import FlowHost, Write
from om.gatekeeper.retry_cache import StoredReply, expired_row_deletes, reply_row
from om.observe.audit import AuditSink
from om.observe.metrics import NodeMetrics
from om.observe.tracing import TraceSink
from om.protocol import om_pb2
from om.schema.ids import RetryKey
from om.schema.seam import Seam
from om.statemachine import log_entry
from om.statemachine.replicated_apply import ReplicatedStateMachine


class ReplicatedFlow:
    """Replicates each write request; apply executes it on every node (the template's
    ``WriteFlow``, om/flows/write_flow.py).

    Invariant: a started write is ended through the host exactly once, when its
    entry's replication returned (or was cancelled at shutdown); the retry cache is
    apply's, filled on every node, so ending a write here records nothing."""

    def __init__(self, host: FlowHost, state_machine: ReplicatedStateMachine,
                 replicator: Replicator, config: LeaderConfig) -> None:
        self._host = host
        self._state_machine = state_machine
        self._replicator = replicator
        self._config = config
        self._elapsed_ns = host.seam.elapsed_ns
        self.read_rounds = ReadRounds(self._read_round_trip)

    async def start(self) -> None:
        """Nothing carries writes but the replicator, which the node starts."""

    async def start_background(self) -> None:
        """No background work of its own (the template sweeps reply rows)."""

    async def stop_background(self) -> None:
        """No background work of its own (the template sweeps reply rows)."""

    async def close(self) -> None:
        """Stops the read rounds (every admitted request ended)."""
        await self.read_rounds.close()

    def sweep_expired(self) -> int:
        """Replicates deletes of expired reply rows as a batch entry (apply takes both
        kinds, docs/FLOW_SWITCH.md), in a task; returns how many rows."""
        role = self._host.role()
        if not role.ready or self._host.prepare_gate_closed():
            return 0
        deletes = expired_row_deletes(self._state_machine.view, self._host.clock_ms(),
                                      self._config.retry.expiry_ms,
                                      self._config.sweep_rows_max)
        if deletes:
            batch = om_pb2.PersistDbBatch(term=role.term, leader_id=self._host.node_id,
                                          timestamp_ms=self._host.clock_ms(),
                                          retry_expiry=deletes)
            self._host.spawn(self._replicate_sweep(log_entry.encode_batch(batch)))
        return len(deletes) // 2

    async def _replicate_sweep(self, encoded: bytes) -> None:
        """A sweep that did not commit is retried by the next one."""
        await self._replicator.replicate(encoded)

    def leadership_lost(self) -> None:
        """Nothing is queued on the request side; in-flight entries settle via Raft."""

    def gauges(self) -> dict[str, float]:
        """None of its own: apply holds the retry cache (the state machine reports it)."""
        return {}

    def on_read_round(self, done: ReadRound) -> None:
        """The next read round (an empty entry) proposed after this call."""
        self.read_rounds.add(done)

    async def _read_round_trip(self) -> ReplicateResult:
        """One read round: an empty entry of this term, committed and applied."""
        empty = om_pb2.PersistDbBatch(term=self._host.role().term, leader_id=self._host.node_id,
                                      timestamp_ms=self._host.clock_ms())
        return await self._replicator.replicate(log_entry.encode_batch(empty))

    def committed_response(self, key: RetryKey) -> StoredReply | None:
        """From memory, else from the reply row (which outlives a restart)."""
        stored = self._state_machine.retry.lookup(key, self._host.clock_ms())
        if stored is not None:
            return StoredReply(om_pb2.OMResponse.FromString(stored[0]), stored[1])
        row = reply_row(self._state_machine.view, key, self._host.clock_ms(),
                        self._config.retry.expiry_ms)
        if row is None:
            return None
        return StoredReply(om_pb2.OMResponse.FromString(row.response), row.fingerprint)

    def write_ended(self, write: Write, committed: om_pb2.ClientRequestReply | None) -> None:
        """The retry cache is filled by apply, on every node."""

    def start_write(self, write: Write) -> None:
        """Fixes the write's time and managed index (Ozone's ``preExecute``) and
        replicates it as its own entry, in a task: every node executes it in apply.

        A CreateSnapshot is refused first when this leader's disk has no headroom for a
        checkpoint: apply, on every node, must not consult its own disk."""
        host = self._host
        role = host.role()
        if write.request.cmd_type == om_pb2.CreateSnapshot and host.snapshot_views is not None:
            problem = host.snapshot_views.headroom_problem()
            if problem is not None:
                host.end_write(write, error_response(write.request, om_pb2.QUOTA_EXCEEDED,
                                                     f"no snapshot now: {problem}"), None)
                return
        entry = om_pb2.ReplicatedRequest(request=write.request, timestamp_ms=host.clock_ms(),
                                         managed_index=host.managed_index.next(),
                                         leader_id=host.node_id, term=role.term)
        host.spawn(self._replicate(write, log_entry.encode_request(entry)))

    async def _replicate(self, write: Write, encoded: bytes) -> None:
        request, trace = write.request, write.trace
        started = self._elapsed_ns()
        try:
            result = await self._replicator.replicate(encoded)
        except BaseException:     # cancelled at shutdown: the entry may still commit
            self._host.end_write(write, error_response(
                request, om_pb2.LEADER_NOT_READY,
                f"OM:{self._host.node_id} is shutting down; retry"), None)
            raise
        trace.execute_ns = result.apply_ns
        trace.replicate_ns = max(self._elapsed_ns() - started - result.apply_ns, 0)
        self._host.metrics.batches.replicated(1, len(encoded), trace.replicate_ns / 1e9,
                                              result.apply_ns / 1e9)
        trace.settled_ns = self._elapsed_ns()
        self._host.end_write(write, entry_answer(request, result, self._host.node_id,
                                                 self._replicator.role()), None)


def replicated_flow_service(node_id: str, state_machine: ReplicatedStateMachine,
                            replicator: Replicator, config: LeaderConfig, tracer: TraceSink,
                            seam: Seam, metrics: NodeMetrics | None = None,
                            audit: AuditSink | None = None) -> RequestService[ReplicatedFlow]:
    """The request template holding the old flow; its readers see the state machine's
    write cache over the store."""
    return RequestService(
        node_id, replicator, state_machine, state_machine.view, config, tracer,
        lambda host: ReplicatedFlow(host, state_machine, replicator, config),
        seam, metrics, audit)
