"""Group commit on the leader: the asyncio half of the batcher.

Executed writes queue here in index order. One loop seals a batch whenever an
in-flight slot is free, taking everything that queued meanwhile (under the
byte and count caps, ``om.executor.batcher``), so batches grow exactly when
replication is the bottleneck and a lone request never waits for a timer.
With a batch already in flight, a free slot waits for its share of the
replication cycle before it seals (``_gather``), so several batches in flight
split the load evenly.
At most ``inflight_batches_max`` batches are being replicated at once, and at
most ``queue_max`` writes wait; past that, ``submit`` refuses (SERVER_BUSY).
The default is one: requests keep executing while a batch replicates, and on
two cores fewer, larger batches beat more in flight, because every batch costs
the leader's GIL a round of hand-offs with pysyncobj's tick thread (measured:
freon omkg -t 64, two alternating rounds, 9,143 and 9,079 write req/s with one
in flight against 8,685 and 7,709 with four).

When a batch settles, every write's ``settle`` callback runs synchronously,
right after the replicator returns, so quota reservations are released before
any other coroutine can execute against the newly applied state.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from om.config import Batch
from om.consensus.port import ReplicateResult, ReplicateStatus, Replicator
from om.executor.batcher import BatchBuilder, PendingWrite
from om.flows.read_rounds import ReadRound
from om.observe.metrics import BatchMetrics
from om.observe.tracing import TraceSink
from om.protocol import merged_entry
from om.schema.seam import Seam
from om.statemachine import log_entry

logger = logging.getLogger(__name__)

Settle = Callable[[ReplicateResult, int, int], None]  # result, batch wait ns, batch id
CYCLE_WEIGHT = 0.2   # of the newest batch in the running mean of the replication time
_DEFAULT = Batch()   # the limits' defaults are stated once, in om/config.py


@dataclass(frozen=True)
class BatchConfig:
    """Limits of group commit (``[batch]``; the defaults are ``om.config.Batch``'s)."""

    bytes_max: int = _DEFAULT.bytes_max
    writes_max: int = _DEFAULT.writes_max
    inflight_batches_max: int = _DEFAULT.inflight_batches_max
    queue_max: int = _DEFAULT.queue_max

    def __post_init__(self) -> None:
        assert self.bytes_max > 0
        assert self.writes_max > 0
        assert self.inflight_batches_max > 0
        assert self.queue_max > 0


@dataclass
class _Queued:
    write: PendingWrite
    settle: Settle
    queued_ns: int


class BatchPipeline:
    """Seals and replicates batches; settles every write exactly once."""

    def __init__(self, replicator: Replicator, config: BatchConfig, leader_id: str,
                 tracer: TraceSink, metrics: BatchMetrics,
                 seam: Seam, merged_entries: Callable[[], bool],
                 shard: int = log_entry.SHARD, shards: int = 1) -> None:
        """``seam``: the node's clocks: its wall clock stamps each batch (replicated
        data) and dates its trace record, its elapsed clock times the queue and the
        replication cycle, which decides how long a batch gathers (``_gather``); a
        simulator drives both.
        ``merged_entries``: whether a batch sealed now travels as a merged entry (``M``)
        or as a ``B`` entry (``log_entry.encode_sealed``), asked once per batch.
        ``shard``: the shard this pipeline seals for (its state machine's); every slice
        it submits carries it, so the Raft process hands it back to this shard alone.
        With ``shards`` > 1 a write that changes only rows every shard reads
        (``PendingWrite.every_shard``: shard 0's volumes, tokens, certificates and
        upgrade rows) is sealed in a batch of such writes only, as a slice every shard
        applies (``merged_entry.EVERY_SHARD``); a batch never mixes the two."""
        assert shard >= 0
        assert shards >= 1
        self._replicator = replicator
        self._shard = shard
        self.every_shard_slices = shards > 1
        self._merged_entries = merged_entries
        self._seam = seam
        self._elapsed_ns = seam.elapsed_ns
        self._metrics = metrics
        self.config = config
        self._leader_id = leader_id
        self._tracer = tracer
        self._queue: deque[_Queued] = deque()
        self._wakeup = asyncio.Event()
        self._read_rounds: list[ReadRound] = []
        self._slots = asyncio.Semaphore(config.inflight_batches_max)
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_batch_id = 1
        self._loop_task: asyncio.Task[None] | None = None
        self._replicating = 0              # batches sealed and not yet settled
        self._idle = asyncio.Event()       # set when the last of them settles
        self._cycle_ns = 0.0               # recent mean replication time of a batch

    @property
    def batches(self) -> int:
        """Batches replicated so far, whatever their outcome."""
        return self._metrics.totals()[0]

    @property
    def writes(self) -> int:
        """Writes in those batches."""
        return self._metrics.totals()[1]

    def start(self) -> None:
        """Starts the sealing loop."""
        assert self._loop_task is None
        self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def submit(self, write: PendingWrite, settle: Settle) -> bool:
        """Queues an executed write; False when the queue is full (back-pressure)."""
        if len(self._queue) >= self.config.queue_max:
            return False
        self._queue.append(_Queued(write, settle, self._elapsed_ns()))
        self._wakeup.set()
        return True

    def on_read_round(self, done: ReadRound) -> None:
        """Calls ``done`` once a batch sealed after this call has committed and been
        applied here: the read index of a linearizable read. Every read waiting when a
        batch is sealed rides on it; with no write waiting, the batch is empty."""
        self._read_rounds.append(done)
        self._wakeup.set()

    def fail_queued(self, status: ReplicateStatus) -> None:
        """Settles every write and read not yet sealed with ``status`` (leadership lost)."""
        assert status is not ReplicateStatus.COMMITTED
        while self._queue:
            queued = self._queue.popleft()
            queued.settle(ReplicateResult(status), 0, 0)
        rounds, self._read_rounds = self._read_rounds, []
        _resolve_all(rounds, ReplicateResult(status))

    async def close(self) -> None:
        """Waits for in-flight batches, fails what is still queued, stops the loop."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self.fail_queued(ReplicateStatus.NOT_LEADER)

    async def _run(self) -> None:
        while True:
            while not self._queue and not self._read_rounds:
                self._wakeup.clear()
                await self._wakeup.wait()
            await self._slots.acquire()
            if self._replicating:
                await self._gather()
            if not self._queue and not self._read_rounds:
                self._slots.release()
                continue
            sealed = self._seal()
            task = asyncio.get_running_loop().create_task(self._replicate(*sealed))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _gather(self) -> None:
        """With a batch in flight and a slot free: lets the next batch gather for its
        share of the replication cycle (the cycle's recent mean over the slots,
        measured from the oldest write waiting) rather than sealing the first write to
        arrive, so batches in flight split the load instead of alternating a full batch
        with a one-write one (each batch costs the Raft process, the journal syncs and
        every follower's apply the same, whatever it carries). Ends at once when no
        batch is in flight any more (a lone write never waits for a timer) or the queue
        fills a batch."""
        spacing_s = self._cycle_ns / self.config.inflight_batches_max / 1e9
        while self._replicating and self._queue and len(self._queue) < self.config.writes_max:
            waited_s = (self._elapsed_ns() - self._queue[0].queued_ns) / 1e9
            if waited_s >= spacing_s:
                return
            self._idle.clear()
            try:
                await asyncio.wait_for(self._idle.wait(), spacing_s - waited_s)
            except TimeoutError:
                return

    def _seal(self) -> tuple[bytes, list[_Queued], int, list[ReadRound]]:
        builder = BatchBuilder(self.config.bytes_max, self.config.writes_max)
        taken: list[_Queued] = []
        every_shard = self.every_shard_slices and bool(self._queue) \
            and self._queue[0].write.every_shard
        while self._queue and builder.fits(self._queue[0].write):
            if self.every_shard_slices and self._queue[0].write.every_shard != every_shard:
                break                      # the other kind starts the next batch
            queued = self._queue.popleft()
            builder.add(queued.write)
            taken.append(queued)
        batch_id = self._next_batch_id
        self._next_batch_id += 1
        sealed = builder.seal(batch_id, self._seam.clock_ms(), self._leader_id,
                              self._replicator.role().term)
        assert len(builder.writes) == len(taken)
        rounds, self._read_rounds = self._read_rounds, []
        shard = merged_entry.EVERY_SHARD if every_shard else self._shard
        entry = log_entry.encode_sealed(sealed, self._merged_entries(), shard)
        return entry, taken, batch_id, rounds

    async def _replicate(self, entry: bytes, taken: list[_Queued], batch_id: int,
                         rounds: list[ReadRound]) -> None:
        sealed_ns = self._elapsed_ns()
        t_ns = self._seam.wall_ns()
        result = ReplicateResult(ReplicateStatus.LEADER_CHANGED)
        self._metrics.in_flight.inc()
        self._replicating += 1
        try:
            result = await self._replicator.replicate(entry)
        except Exception:
            logger.exception("replicating batch %d failed; its writes fail retryably", batch_id)
        finally:
            self._metrics.in_flight.dec()
            self._replicating -= 1
            if not self._replicating:
                self._idle.set()
            self._slots.release()
            for queued in taken:
                queued.settle(result, sealed_ns - queued.queued_ns, batch_id)
            _resolve_all(rounds, result)
        replicate_ns = self._elapsed_ns() - sealed_ns - result.apply_ns
        if result.status is ReplicateStatus.COMMITTED:
            self._cycle_ns += (replicate_ns - self._cycle_ns) * CYCLE_WEIGHT
        self._metrics.replicated(len(taken), len(entry), replicate_ns / 1e9, result.apply_ns / 1e9)
        self._tracer.emit("server_batch", {
            "t_ns": t_ns, "node": self._leader_id, "batch_id": batch_id,
            "requests": len(taken), "bytes": len(entry),
            "replicate_ns": replicate_ns, "apply_ns": result.apply_ns})


def _resolve_all(rounds: list[ReadRound], result: ReplicateResult) -> None:
    for round_done in rounds:
        round_done(result)
