"""The old flow's request service: replicate each request, execute it in apply.

After the shared template (``om/flows/template.py``), a write is authorized, gets
its time and managed index fixed (Ozone's ``preExecute``), and goes to Raft
as its own entry; every node executes it in apply, and the leader answers
with the response its own apply produced. There are no locks, reservations
or batches: apply is serial. Readers see the write cache over RocksDB.
"""

from __future__ import annotations

import asyncio
import time

from om.consensus.port import ReplicateResult, Replicator
from om.executor.registry import error_response
from om.flows.read_rounds import ReadRound, ReadRounds
from om.flows.settings import LeaderConfig
from om.flows.template import Clock, RequestService, Write, entry_answer, wall_clock_ms
from om.gatekeeper.retry_cache import StoredReply, expired_row_deletes, reply_row
from om.observe.audit import AuditSink
from om.observe.metrics import NodeMetrics
from om.observe.tracing import TraceSink
from om.protocol import om_pb2
from om.schema.ids import RetryKey
from om.statemachine import log_entry
from om.statemachine.replicated_apply import ReplicatedStateMachine


class ReplicatedFlowService(RequestService):
    """Replicates each write request; apply executes it on every node."""

    def __init__(self, node_id: str, state_machine: ReplicatedStateMachine,
                 replicator: Replicator, config: LeaderConfig, tracer: TraceSink,
                 clock_ms: Clock = wall_clock_ms, metrics: NodeMetrics | None = None,
                 audit: AuditSink | None = None) -> None:
        super().__init__(node_id, replicator, state_machine, state_machine.view, config,
                         tracer, clock_ms, metrics, audit)
        self._state_machine = state_machine
        self._config = config
        self._sweeper: asyncio.Task[None] | None = None
        self.read_rounds = ReadRounds(self._read_round_trip)

    async def start(self) -> None:
        """Starts the retry-cache sweeper (apply writes reply rows; only the leader
        deletes expired ones, through the log, so every node deletes the same)."""
        self._sweeper = asyncio.get_running_loop().create_task(
            self.sweep_forever(self._config.sweep_interval_s, self._config.sweep_rows_max))

    async def close(self) -> None:
        """Stops the sweeper, lets every admitted request finish."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        await self.drain()
        await self.read_rounds.close()

    def sweep_expired(self) -> int:
        """Replicates deletes of expired reply rows as a batch entry (apply takes both
        kinds, docs/FLOW_SWITCH.md), in a task; returns how many rows."""
        role = self.role()
        if not role.ready or self.prepare_gate_closed():
            return 0
        deletes = expired_row_deletes(self._state_machine.view, self.clock_ms(),
                                      self._config.retry.expiry_ms,
                                      self._config.sweep_rows_max)
        if deletes:
            batch = om_pb2.PersistDbBatch(term=role.term, leader_id=self.node_id,
                                          timestamp_ms=self.clock_ms(), retry_expiry=deletes)
            self.spawn(self._replicate_sweep(log_entry.encode_batch(batch)))
        return len(deletes) // 2

    async def _replicate_sweep(self, encoded: bytes) -> None:
        """A sweep that did not commit is retried by the next one."""
        await self._replicator.replicate(encoded)

    def leadership_lost(self) -> None:
        """Nothing is queued on the request side; in-flight entries settle via Raft."""

    def gauges(self) -> dict[str, float]:
        """None of its own: apply holds the retry cache (the state machine reports it)."""
        return {}

    def _on_read_round(self, done: ReadRound) -> None:
        self.read_rounds.add(done)

    async def _read_round_trip(self) -> ReplicateResult:
        """One read round: an empty entry of this term, committed and applied."""
        empty = om_pb2.PersistDbBatch(term=self.role().term, leader_id=self.node_id,
                                      timestamp_ms=self.clock_ms())
        return await self._replicator.replicate(log_entry.encode_batch(empty))

    def _committed_response(self, key: RetryKey) -> StoredReply | None:
        """From memory, else from the reply row (which outlives a restart)."""
        stored = self._state_machine.retry.lookup(key, self.clock_ms())
        if stored is not None:
            return StoredReply(om_pb2.OMResponse.FromString(stored[0]), stored[1])
        row = reply_row(self._state_machine.view, key, self.clock_ms(),
                        self._config.retry.expiry_ms)
        if row is None:
            return None
        return StoredReply(om_pb2.OMResponse.FromString(row.response), row.fingerprint)

    def _write_ended(self, write: Write, committed: om_pb2.ClientRequestReply | None) -> None:
        """The retry cache is filled by apply, on every node."""

    def _start_write(self, write: Write) -> None:
        """Fixes the write's time and managed index (Ozone's ``preExecute``) and
        replicates it as its own entry, in a task: every node executes it in apply.

        A CreateSnapshot is refused first when this leader's disk has no headroom for a
        checkpoint: apply, on every node, must not consult its own disk."""
        role = self.role()
        if write.request.cmd_type == om_pb2.CreateSnapshot and self.snapshot_views is not None:
            problem = self.snapshot_views.headroom_problem()
            if problem is not None:
                self._end_write(write, error_response(write.request, om_pb2.QUOTA_EXCEEDED,
                                                      f"no snapshot now: {problem}"), None)
                return
        entry = om_pb2.ReplicatedRequest(request=write.request, timestamp_ms=self.clock_ms(),
                                         managed_index=self.managed_index.next(),
                                         leader_id=self.node_id, term=role.term)
        self.spawn(self._replicate(write, log_entry.encode_request(entry)))

    async def _replicate(self, write: Write, encoded: bytes) -> None:
        request, trace = write.request, write.trace
        started = time.perf_counter_ns()
        try:
            result = await self._replicator.replicate(encoded)
        except BaseException:     # cancelled at shutdown: the entry may still commit
            self._end_write(write, error_response(
                request, om_pb2.LEADER_NOT_READY,
                f"OM:{self.node_id} is shutting down; retry"), None)
            raise
        trace.execute_ns = result.apply_ns
        trace.replicate_ns = max(time.perf_counter_ns() - started - result.apply_ns, 0)
        self.metrics.batches.replicated(1, len(encoded), trace.replicate_ns / 1e9,
                                        result.apply_ns / 1e9)
        trace.settled_ns = time.perf_counter_ns()
        self._end_write(write, entry_answer(request, result, self.node_id,
                                            self._replicator.role()), None)
