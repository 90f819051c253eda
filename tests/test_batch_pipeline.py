"""Group commit's timing: a lone write is sealed at once; with batches in flight a free
slot waits for its share of the replication cycle, so batches split the load evenly
instead of alternating a full batch with a one-write one. Each batch's entry format is
asked for as it is sealed (B until the layout has MERGED_ENTRIES, then M)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from om.consensus.port import ReplicateResult, ReplicateStatus, Role
from om.executor.batcher import BatchBuilder, PendingWrite
from om.executor.change_recorder import ChangeRecorder
from om.flows.batch_pipeline import BatchConfig, BatchPipeline
from om.flows.settings import LeaderConfig
from om.node.parts import MACHINE_SEAM
from om.observe.metrics import NodeMetrics
from om.observe.tracing import NullTracer
from om.protocol import merged_entry, om_pb2
from om.statemachine import log_entry
from tests.leader_harness import LeaderUnderTest

CYCLE_S = 0.1


class SlowReplicator:
    """Commits every entry after CYCLE_S; remembers how many writes each carried."""

    def __init__(self, shard: int = 0) -> None:
        """``shard``: whose slices it decodes (a store's decode asserts them its own)."""
        self.batches: list[int] = []
        self.stamps: list[int] = []
        self.entries: list[bytes] = []
        self.shard = shard

    async def replicate(self, entry: bytes) -> ReplicateResult:
        self.entries.append(entry)
        (batch,) = log_entry.decode_batches(entry, self.shard)
        self.batches.append(batch.request_count)
        self.stamps.append(batch.timestamp_ms)
        await asyncio.sleep(CYCLE_S)
        return ReplicateResult(ReplicateStatus.COMMITTED, len(self.batches))

    def role(self) -> Role:
        return Role(True, True, "om1", "", 1, 0)


def _write(index: int) -> PendingWrite:
    recorder = ChangeRecorder()
    recorder.put(om_pb2.KEY, f"/k{index}".encode(), b"v")
    return PendingWrite.of(index, recorder)


async def _steady_load(inflight: int, writes: int, gap_s: float) -> list[int]:
    replicator = SlowReplicator()
    pipeline = BatchPipeline(replicator, BatchConfig(inflight_batches_max=inflight), "om1",
                             NullTracer(), NodeMetrics().batches, MACHINE_SEAM,
                             lambda: True)
    pipeline.start()
    settled: list[ReplicateResult] = []
    all_settled = asyncio.Event()

    def settle(result: ReplicateResult, wait_ns: int, batch_id: int) -> None:
        settled.append(result)
        if len(settled) == writes:
            all_settled.set()

    for index in range(1, writes + 1):
        pipeline.submit(_write(index), settle)
        await asyncio.sleep(gap_s)
    await asyncio.wait_for(all_settled.wait(), 10.0)
    await pipeline.close()
    assert all(r.status is ReplicateStatus.COMMITTED for r in settled)
    return replicator.batches


async def test_a_lone_write_is_sealed_at_once() -> None:
    replicator = SlowReplicator()
    pipeline = BatchPipeline(replicator, BatchConfig(inflight_batches_max=2), "om1",
                             NullTracer(), NodeMetrics().batches, MACHINE_SEAM,
                             lambda: True)
    pipeline.start()
    done = asyncio.get_running_loop().create_future()
    pipeline.submit(_write(1), lambda result, wait, batch: done.set_result(wait))
    wait_ns = await asyncio.wait_for(done, 1.0)
    await pipeline.close()
    assert wait_ns < CYCLE_S * 1e9 / 4


async def test_two_in_flight_split_a_steady_load_evenly() -> None:
    batches = await _steady_load(inflight=2, writes=100, gap_s=0.01)
    steady = batches[3:-3]          # past the first cycle's measurement, before the tail
    assert min(steady) >= max(steady) / 4, batches
    assert min(steady) > 1, batches


async def test_each_batch_is_stamped_by_the_clock_the_service_was_given() -> None:
    """The stamp is replicated data: it comes from the seam's clock, not the wall's."""
    replicator = SlowReplicator()
    readings = iter(range(7_000, 7_010))
    seam = replace(MACHINE_SEAM, wall_ns=lambda: next(readings) * 1_000_000)
    pipeline = BatchPipeline(replicator, BatchConfig(inflight_batches_max=1), "om1",
                             NullTracer(), NodeMetrics().batches, seam, lambda: True)
    pipeline.start()
    done = asyncio.get_running_loop().create_future()
    pipeline.submit(_write(1), lambda result, wait, batch: done.set_result(batch))
    await asyncio.wait_for(done, 1.0)
    await pipeline.close()
    assert replicator.stamps == [7_000]


def _settled(done: asyncio.Future[int], result: ReplicateResult, wait_ns: int,
             batch_id: int) -> None:
    done.set_result(batch_id)


async def test_each_batch_is_sealed_in_the_format_asked_for_as_it_is_sealed() -> None:
    """B (byte for byte what releases before M wrote: the tag, then the sealed batch)
    while the layout lacks MERGED_ENTRIES; M of one slice carrying the same sealed bytes
    from the first batch sealed after it changed; the answer is asked for per batch."""
    replicator = SlowReplicator()
    merged = [False]
    config = BatchConfig(inflight_batches_max=1)
    pipeline = BatchPipeline(replicator, config, "om1", NullTracer(), NodeMetrics().batches,
                             replace(MACHINE_SEAM, wall_ns=lambda: 7_000_000_000),
                             lambda: merged[0])
    pipeline.start()
    for index, merge in ((1, False), (2, True), (3, False)):
        merged[0] = merge
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pipeline.submit(_write(index), partial(_settled, done))
        await asyncio.wait_for(done, 1.0)
    await pipeline.close()
    sealed = []
    for index in (1, 2, 3):
        builder = BatchBuilder(config.bytes_max, config.writes_max)
        builder.add(_write(index))
        sealed.append(builder.seal(index, 7_000, "om1", 1))
    assert replicator.entries == [b"B" + sealed[0], merged_entry.encode_slice(0, sealed[1]),
                                  b"B" + sealed[2]]
    (slice_,) = merged_entry.slices(replicator.entries[1])
    assert slice_.batch == sealed[1]


async def test_every_batch_is_sealed_as_a_slice_of_the_pipelines_shard() -> None:
    """Shard k's pipeline tags each slice k, so the Raft process hands it back to shard
    k's store alone (docs/SHARDS.md, increment B step 1); red: a pipeline that seals
    shard 0's slices whatever its shard."""
    replicator = SlowReplicator(3)
    config = BatchConfig(inflight_batches_max=1)
    pipeline = BatchPipeline(replicator, config, "om1", NullTracer(), NodeMetrics().batches,
                             MACHINE_SEAM, lambda: True, shard=3)
    pipeline.start()
    for index in (1, 2):
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pipeline.submit(_write(index), partial(_settled, done))
        await asyncio.wait_for(done, 1.0)
    await pipeline.close()
    assert [[s.shard for s in merged_entry.slices(e)] for e in replicator.entries] == [[3], [3]]


def _volume_write(index: int) -> PendingWrite:
    recorder = ChangeRecorder()
    recorder.put(om_pb2.VOLUME, f"/vol{index}".encode(), b"v")
    recorder.quota_delta(om_pb2.VOLUME, f"/vol{index}".encode(), 7, 0, 1)
    return PendingWrite.of(index, recorder, sharded=True)


async def test_with_shards_rows_every_shard_reads_travel_in_batches_of_their_own() -> None:
    """With S > 1, shard 0's writes that change only rows every shard reads (a volume)
    are sealed apart from its own (a key), in queue order, as slices every shard
    applies; at S = 1 they share one batch. Red: a batch that mixed them would hand
    shard 0's keys to every shard, or keep a volume from shards above 0."""
    shapes = []
    for shards in (2, 1):
        replicator = SlowReplicator()
        pipeline = BatchPipeline(replicator, BatchConfig(inflight_batches_max=1), "om1",
                                 NullTracer(), NodeMetrics().batches, MACHINE_SEAM,
                                 lambda: True, shard=0, shards=shards)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pipeline.submit(_write(1), lambda *_: None)     # queued before the loop starts
        for index, write in enumerate((_volume_write(2), _volume_write(3), _write(4))):
            pipeline.submit(write, partial(_settled, done) if index == 2 else
                            (lambda *_: None))
        pipeline.start()
        await asyncio.wait_for(done, 2.0)
        await pipeline.close()
        shapes.append([([s.shard for s in merged_entry.slices(e)], count)
                       for e, count in zip(replicator.entries, replicator.batches,
                                           strict=True)])
    every = merged_entry.EVERY_SHARD
    assert shapes[0] == [([0], 1), ([every], 2), ([0], 1)]
    assert shapes[1] == [([0], 4)]


def test_only_writes_of_rows_every_shard_reads_are_every_shards() -> None:
    assert _volume_write(1).every_shard
    assert not _write(1).every_shard
    mixed = ChangeRecorder()
    mixed.put(om_pb2.VOLUME, b"/vol", b"v")
    mixed.put(om_pb2.KEY, b"/vol/b/k", b"v")
    assert not PendingWrite.of(1, mixed, sharded=True).every_shard
    assert not PendingWrite.of(1, ChangeRecorder(), sharded=True).every_shard, \
        "nothing to hand out"


def test_only_shard_0_seals_a_b_entry() -> None:
    """A B entry goes whole to every shard: sealed by a shard above 0 it would be
    applied by all of them."""
    assert log_entry.encode_sealed(b"batch", False) == b"Bbatch"
    with pytest.raises(AssertionError, match="shard 2 sealed a B entry"):
        log_entry.encode_sealed(b"batch", False, 2)


async def test_the_leader_flow_seals_for_its_state_machines_shard(tmp_path: Path) -> None:
    """The leader service over shard 1's state machine seals shard 1's slices, which
    that store applies (it asserts every slice its own)."""
    leader = LeaderUnderTest(tmp_path / "shard-1", LeaderConfig(), shard=1)
    await leader.start()
    try:
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        leader.service.flow.pipeline.submit(_write(1), partial(_settled, done))
        await asyncio.wait_for(done, 5.0)
        (entry,) = leader.replicator.sent
        assert [s.shard for s in merged_entry.slices(entry)] == [1]
        assert leader.store.get(om_pb2.KEY, b"/k1") == b"v"
    finally:
        await leader.close()
