"""The Raft process merges the sub-batches that reached it together into one entry
(docs/SHARDS.md step 1), on three real Raft processes applying to real stores.

The leader's Raft process is stopped (SIGSTOP) while four sub-batches are submitted,
so they reach it in one read of its channel; its byte cap lets two fit an entry. The
red cases: without the merge every sub-batch gets a position of its own; with the
merged entry's outcome given to every caller alike, the caller whose slice carried a
deposed leader's term is told COMMITTED (or the others are not); a result sent for
the first id only leaves the others waiting; a leader that rebuilt the entry other
than the Raft process appended it applies other bytes than its followers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from om.config import NodeAddress, Raft
from om.consensus.port import ReplicateResult, ReplicateStatus
from om.consensus.pysyncobj.process import RaftProcessReplicator
from om.protocol import om_pb2
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.store import Store
from tests.consensus.raft_nodes import NoSnapshots

pytestmark = pytest.mark.integration

# Elections slow enough that stopping the leader's Raft process for a moment, on a
# loaded machine, never deposes it (a new leader would fail the submits instead).
STEADY = Raft(election_timeout_min_s=2.0, election_timeout_max_s=3.0,
              leader_fallback_timeout_s=6.0)

ENTRY_BYTES_MAX = 2000    # two of the sub-batches below fit an entry, three do not
VALUE_BYTES = 800


@dataclass
class Replica:
    """One node: its Raft process's adapter, its store, and every entry it applied."""

    machine: StateMachine
    replicator: RaftProcessReplicator | None = None
    applied: dict[int, bytes] = field(default_factory=dict)
    child_exits: int = 0

    @property
    def raft(self) -> RaftProcessReplicator:
        assert self.replicator is not None
        return self.replicator

    def apply(self, position: int, entry: bytes) -> ApplyResult:
        self.applied[position] = entry
        return self.machine.apply_entry(position, entry)

    def child_exited(self) -> None:
        self.child_exits += 1


def _barrier(term: int) -> bytes:
    return log_entry.encode_batch(om_pb2.PersistDbBatch(term=term, leader_id="test"))


def _sub_batch(index: int, term: int) -> bytes:
    batch = om_pb2.PersistDbBatch(batch_id=index, term=term, managed_index=100 + index,
                                  request_count=1, timestamp_ms=index)
    batch.ops.add(table=om_pb2.KEY, key=f"/v/b/k{index}".encode(), value=b"v" * VALUE_BYTES)
    return log_entry.encode_sealed(batch.SerializeToString(deterministic=True), merged=True)


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[list[Replica]]:
    base = om_cluster.free_port_base(3)
    addresses = tuple(NodeAddress(f"n{i + 1}", "127.0.0.1", base + i, base + 10 + i)
                      for i in range(3))
    started: list[Replica] = []
    try:
        for address in addresses:
            replica = Replica(StateMachine(Store(tmp_path / address.id / "db")))
            started.append(replica)
            replica.replicator = RaftProcessReplicator(
                address, addresses, tmp_path / address.id / "raft", STEADY, replica.apply,
                NoSnapshots(), _barrier, ENTRY_BYTES_MAX, replica.child_exited)
            await replica.raft.start()
        yield started
    finally:
        for replica in started:
            if replica.replicator is not None:
                await replica.replicator.close()
            replica.machine.store.close()
    assert [r.child_exits for r in started] == [0, 0, 0]


async def _ready_leader(replicas: list[Replica], timeout_s: float = 20.0) -> Replica:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for replica in replicas:
            if replica.raft.role().ready:
                return replica
        await asyncio.sleep(0.05)
    raise AssertionError("no leader became ready")


async def _submitted_together(leader: Replica, entries: list[bytes]) -> list[ReplicateResult]:
    """Submits ``entries`` while the leader's Raft process is stopped, so that it reads
    them in one pass over its channel."""
    os.kill(leader.raft.child_pid, signal.SIGSTOP)
    try:
        calls = [asyncio.ensure_future(leader.raft.replicate(entry)) for entry in entries]
        await asyncio.sleep(0.1)    # every submit written to the channel
    finally:
        os.kill(leader.raft.child_pid, signal.SIGCONT)
    return list(await asyncio.wait_for(asyncio.gather(*calls), 15.0))


async def _caught_up(replicas: list[Replica], position: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(r.machine.applied_index < position for r in replicas):
        assert time.monotonic() < deadline, "a follower did not apply the merged entries"
        await asyncio.sleep(0.05)


async def test_sub_batches_that_arrive_together_share_an_entry_and_each_gets_its_own_result(
        replicas: list[Replica]) -> None:
    leader = await _ready_leader(replicas)
    term = leader.raft.role().term
    stale = 0    # below every term a leader has: a deposed leader's slice
    results = await _submitted_together(
        leader, [_sub_batch(1, term), _sub_batch(2, stale), _sub_batch(3, term),
                 _sub_batch(4, term)])
    assert leader.raft.role().term == term, "leadership changed meanwhile: no verdict"
    assert [r.status for r in results] == [
        ReplicateStatus.COMMITTED, ReplicateStatus.LEADER_CHANGED,
        ReplicateStatus.COMMITTED, ReplicateStatus.COMMITTED]
    first, second = results[0].position, results[2].position
    assert second == first + 1, "two sub-batches an entry: the byte cap split four in two"
    assert results[3].position == second
    await _caught_up(replicas, second)
    for position, slices in ((first, 2), (second, 2)):
        entries = {replica.applied[position] for replica in replicas}
        assert len(entries) == 1, "every replica applied the same bytes"
        assert len(log_entry.decode_batches(entries.pop())) == slices
    digests = [replica.machine.store.digests() for replica in replicas]
    assert digests[0] == digests[1] == digests[2]
    store = leader.machine.store
    assert [store.get(om_pb2.KEY, f"/v/b/k{i}".encode()) is not None for i in (1, 2, 3, 4)] \
        == [True, False, True, True], "the deposed leader's slice alone was skipped"
