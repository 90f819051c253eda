"""The Raft process serves a channel per shard (docs/SHARDS.md step 2): three real Raft
processes on 127.0.0.1, each with two channels, a driver per channel applying its
shard's slices to a store of its own.

Channel 0 is the spawning side (``RaftProcessReplicator`` with ``shards=2``); channel 1
a driver attached to the end the spawner hands over (``channel=``), as a shard process
will be. Red cases: without the merge across channels, sub-batches of two shards read
together take two positions (and the merge-rate gauge counts no entry of two
slices); without the split, a channel applies the other shard's slices (its store's
apply asserts); a channel left out of an entry it has no slice in has a hole in its
positions; a result sent to the wrong channel leaves the submitter waiting (request
ids are per channel and collide); a closed shard channel that did not stop its
node's Raft process leaves that node leading; without ``closing``, an orderly stop
of the Raft process looks like its death to every shard; a write every shard applies
answered before the leader's shard 1 applied it (or held for good by a stalled one).
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
from om.config import SHARD_PORT_OFFSET, SHARD_PORT_STEP, NodeAddress, Raft
from om.consensus.port import ReplicateResult, ReplicateStatus
from om.consensus.pysyncobj.process import RaftProcessReplicator
from om.protocol import merged_entry, om_pb2
from om.protocol.channel import Message
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.store import Store
from tests.consensus.raft_nodes import NoSnapshots

pytestmark = pytest.mark.integration
SHARDS = 2
# Elections slow enough that stopping the leader's Raft process for a moment, on a
# loaded machine, never deposes it (a new leader would fail the submits instead).
STEADY = Raft(election_timeout_min_s=2.0, election_timeout_max_s=3.0,
              leader_fallback_timeout_s=6.0)
ENTRY_BYTES_MAX = 1 << 20


def _barrier(term: int) -> bytes:
    return log_entry.encode_batch(om_pb2.PersistDbBatch(term=term, leader_id="test"))


class RecordingReplicator(RaftProcessReplicator):
    """The real adapter, noting every ``result`` its channel receives."""

    results: list[Message]

    def received(self, message: Message) -> None:
        if message[0] == "result":
            self.results.append(message)
        super().received(message)


@dataclass
class ShardDriver:
    """One channel of one node: shard ``shard``'s store and what reached it, in order."""

    shard: int
    machine: StateMachine
    replicator: RecordingReplicator | None = None
    events: list[tuple[int, bytes | None]] = field(default_factory=list)  # None: passed
    exits: int = 0

    @property
    def raft(self) -> RecordingReplicator:
        assert self.replicator is not None
        return self.replicator

    def apply(self, position: int, entry: bytes) -> ApplyResult:
        """Applies the entry to the shard's store (which asserts every slice its own)."""
        self.events.append((position, entry))
        return self.machine.apply_entry(position, entry)

    def passed(self, position: int) -> None:
        self.events.append((position, None))

    def exited(self) -> None:
        self.exits += 1

    @property
    def positions(self) -> list[int]:
        return [position for position, _ in self.events]


Node = list[ShardDriver]     # channel k at k


def _sub_batch(shard: int, index: int, term: int) -> bytes:
    batch = om_pb2.PersistDbBatch(batch_id=index, term=term, managed_index=100 + index,
                                  request_count=1, timestamp_ms=index)
    batch.ops.add(table=om_pb2.KEY, key=f"/v/b{shard}/k{index}".encode(), value=b"v" * 300)
    return merged_entry.encode_slice(shard, batch.SerializeToString(deterministic=True))


async def _start(address: NodeAddress, addresses: tuple[NodeAddress, ...],
                 directory: Path, node: Node) -> None:
    spawner, driver = node
    spawner.replicator = RecordingReplicator(
        address, addresses, directory / "raft", STEADY, spawner.apply, NoSnapshots(),
        _barrier, ENTRY_BYTES_MAX, spawner.exited, shards=SHARDS, on_position=spawner.passed)
    spawner.raft.results = []
    (channel,) = spawner.raft.take_shard_channels()
    driver.replicator = RecordingReplicator(
        address, addresses, directory / "raft", STEADY, driver.apply, NoSnapshots(),
        _barrier, ENTRY_BYTES_MAX, driver.exited, channel=channel, on_position=driver.passed,
        shard=1)
    driver.raft.results = []
    await spawner.raft.start()
    await driver.raft.start()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[list[Node]]:
    base = om_cluster.free_port_base(3)
    addresses = tuple(NodeAddress(f"n{i + 1}", "127.0.0.1", base + i, base + 10 + i)
                      for i in range(3))
    started: list[Node] = []
    try:
        for address in addresses:
            directory = tmp_path / address.id
            node = [ShardDriver(k, StateMachine(Store(directory / f"shard-{k}"), k))
                    for k in range(SHARDS)]
            started.append(node)
            await _start(address, addresses, directory, node)
        yield started
    finally:
        for node in started:      # the spawner first: its child says "closing" to shards
            for driver in node:
                if driver.replicator is not None:
                    await driver.replicator.close()
                driver.machine.store.close()
    assert [d.exits for node in started for d in node[1:]] == [0] * len(started), \
        "an orderly stop of the Raft process (closing) is no failure of a shard's"


async def _ready_leader(nodes: list[Node], timeout_s: float = 20.0) -> Node:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for node in nodes:
            if all(driver.raft.role().ready for driver in node):
                return node
        await asyncio.sleep(0.05)
    raise AssertionError("no leader became ready on both channels")


async def _submitted_together(leader: Node, entries: list[tuple[int, bytes]]
                              ) -> list[ReplicateResult]:
    """Submits (channel, entry) pairs while the leader's Raft process is stopped, so
    that it reads them all in one pass over its channels."""
    child = leader[0].raft.child_pid
    os.kill(child, signal.SIGSTOP)
    try:
        calls = [asyncio.ensure_future(leader[channel].raft.replicate(entry))
                 for channel, entry in entries]
        await asyncio.sleep(0.1)    # every submit written to its channel
    finally:
        os.kill(child, signal.SIGCONT)
    return list(await asyncio.wait_for(asyncio.gather(*calls), 15.0))


async def _caught_up(nodes: list[Node], position: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(not d.events or d.events[-1][0] < position for n in nodes for d in n):
        assert time.monotonic() < deadline, "a channel did not reach the position"
        await asyncio.sleep(0.05)


async def test_sub_batches_of_two_shards_read_together_share_one_position(
        nodes: list[Node]) -> None:
    leader = await _ready_leader(nodes)
    term = leader[0].raft.role().term
    results = await _submitted_together(leader, [(0, _sub_batch(0, 1, term)),
                                                 (1, _sub_batch(1, 2, term))])
    assert leader[0].raft.role().term == term, "leadership changed meanwhile: no verdict"
    assert [r.status for r in results] == [ReplicateStatus.COMMITTED] * 2
    assert results[0].position == results[1].position, "one entry for both shards' slices"
    position = results[0].position
    answered = [[m[1] for m in driver.raft.results if m[3] == position] for driver in leader]
    assert [len(ids) for ids in answered] == [1, 1], "one result a channel, as submitted"
    assert [len(ids[0]) for ids in answered] == [1, 1], "each channel's own id alone"
    await _caught_up(nodes, position)
    for node in nodes:
        for driver in node:
            (entry,) = [e for p, e in driver.events if p == position]
            assert entry is not None
            assert [s.shard for s in merged_entry.slices(entry)] == [driver.shard]
    deadline = time.monotonic() + 5.0    # the gauge is reported about once a second
    while (gauges := leader[0].raft.metrics())["merged_slices_appended"] \
            <= gauges["merged_entries_appended"]:
        assert time.monotonic() < deadline, f"no merge in the merge-rate gauge: {gauges}"
        await asyncio.sleep(0.1)


async def test_every_channel_gets_its_shards_slices_in_log_order_and_every_position(
        nodes: list[Node]) -> None:
    leader = await _ready_leader(nodes)
    term = leader[0].raft.role().term
    submitted: list[int] = []    # the shard of sub-batch i + 1
    for shards_submitting in ([0], [1], [0, 1, 1], [1, 0], [0, 0]):
        submits = []
        for shard in shards_submitting:
            submitted.append(shard)
            submits.append((shard, _sub_batch(shard, len(submitted), term)))
        results = await _submitted_together(leader, submits)
        assert {r.status for r in results} == {ReplicateStatus.COMMITTED}
    last = max(r.position for r in results)
    await _caught_up(nodes, last)
    first = max(d.positions[0] for n in nodes for d in n)
    for node in nodes:
        upto = [[p for p in driver.positions if p <= last] for driver in node]
        assert upto[0] == list(range(upto[0][0], last + 1)), "a position for every entry"
        assert upto[0] == upto[1], "both channels learn every position"
    for shard in range(SHARDS):
        seen = [[e for p, e in node[shard].events if first <= p <= last] for node in nodes]
        assert seen[0] == seen[1] == seen[2], "every node hands shard k the same entries"
        slices = [(s.shard, om_pb2.PersistDbBatch.FromString(s.batch).batch_id)
                  for entry in seen[0] if entry and entry[:1] == merged_entry.MERGED
                  for s in merged_entry.slices(entry)]
        assert slices == [(shard, i) for i, s in enumerate(submitted, 1) if s == shard], \
            "shard k's slices, all of them, in the order they were submitted"
        digests = [node[shard].machine.store.digests() for node in nodes]
        assert digests[0] == digests[1] == digests[2]
    assert [node[0].exits for node in nodes] == [0, 0, 0]


def _every_shards(index: int, term: int) -> bytes:
    batch = om_pb2.PersistDbBatch(batch_id=index, term=term, managed_index=200 + index,
                                  request_count=1, timestamp_ms=index)
    batch.ops.add(table=om_pb2.VOLUME, key=f"/vol{index}".encode(), value=b"v")
    return merged_entry.encode_slice(merged_entry.EVERY_SHARD,
                                     batch.SerializeToString(deterministic=True))


async def test_a_write_every_shard_applies_is_answered_once_every_shard_applied_it(
        nodes: list[Node]) -> None:
    """Shard 0 submits a volume (a slice every shard applies) while the leader's shard 1
    reads nothing: no answer until shard 1 applied it, then at once; every shard of
    every node holds the row. Red: answered when only its submitter applied it."""
    leader = await _ready_leader(nodes)
    term = leader[0].raft.role().term
    shard_1 = leader[1].raft._channel.transport
    assert shard_1 is not None
    shard_1.pause_reading()
    call = asyncio.ensure_future(leader[0].raft.replicate(_every_shards(1, term)))
    await asyncio.sleep(0.5)
    assert not call.done(), "answered before shard 1 applied it"
    shard_1.resume_reading()
    result = await asyncio.wait_for(call, 1.5)
    assert result.status is ReplicateStatus.COMMITTED
    assert result.position in leader[1].positions, "shard 1 applied it first"
    await _caught_up(nodes, result.position)
    for node in nodes:
        for driver in node:
            assert driver.machine.store.get(om_pb2.VOLUME, b"/vol1") == b"v"


async def test_a_stalled_shard_holds_the_answer_for_a_moment_only(
        nodes: list[Node]) -> None:
    leader = await _ready_leader(nodes)
    term = leader[0].raft.role().term
    shard_1 = leader[1].raft._channel.transport
    assert shard_1 is not None
    shard_1.pause_reading()
    try:
        started = time.monotonic()
        result = await asyncio.wait_for(leader[0].raft.replicate(_every_shards(2, term)), 10.0)
        assert result.status is ReplicateStatus.COMMITTED
        assert 1.5 < time.monotonic() - started < 8.0, "held about WAIT_S, then answered"
    finally:
        shard_1.resume_reading()


async def test_closing_a_shards_channel_stops_its_node_and_the_others_go_on(
        nodes: list[Node]) -> None:
    leader = await _ready_leader(nodes)
    child = leader[0].raft.child_pid
    await leader[1].raft.close()      # shard 1 of the leader goes, unannounced
    deadline = time.monotonic() + 10.0
    while leader[0].exits == 0:
        assert time.monotonic() < deadline, "the node did not stop with its shard"
        await asyncio.sleep(0.05)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    others = [node for node in nodes if node is not leader]
    successor = await _ready_leader(others)
    term = successor[0].raft.role().term
    results = await _submitted_together(successor, [(0, _sub_batch(0, 7, term)),
                                                    (1, _sub_batch(1, 8, term))])
    assert [r.status for r in results] == [ReplicateStatus.COMMITTED] * 2
    await _caught_up(others, results[0].position)
    assert [d.exits for n in others for d in n] == [0, 0, 0, 0]


async def test_each_channel_names_the_leaders_client_port_of_its_own_shard(
        nodes: list[Node]) -> None:
    """NOT_LEADER sends a client to ``role().leader_address``: on channel 1 it is the
    leader's shard 1 port (red: shard 0's port, where shard 1's requests are answered
    WRONG_SHARD, so a client that followed it would never reach the leader's shard 1)."""
    leader = await _ready_leader(nodes)
    leader_id = leader[0].raft.role().leader_id
    for node in nodes:
        deadline = time.monotonic() + 10.0
        while any(driver.raft.role().leader_id != leader_id for driver in node):
            assert time.monotonic() < deadline, "a channel does not know the leader"
            await asyncio.sleep(0.05)
        host, port = node[0].raft.role().leader_address.rsplit(":", 1)
        shard_1 = int(port) + SHARD_PORT_OFFSET + SHARD_PORT_STEP
        assert node[1].raft.role().leader_address == f"{host}:{shard_1}"
