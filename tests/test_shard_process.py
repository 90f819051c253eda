"""Shard k's process (docs/SHARDS.md, increment B step 2): a real Raft process of one
node with two channels, channel 0 driven here (as the node's own process will drive it),
channel 1 handed to a real ``python -m om.node.shard_process`` that serves shard 1's
port with its own store.

Red cases: a shard process sealing shard 0's slices makes the Raft process stop
("channel 1 submitted another shard's slice"), and the write is never answered; a
node request (StartVerify) or a volume's (CreateVolume) that a shard executed would be
answered OK (a verify entry proposed through a shard's channel, which every shard
applies; a volume row in shard 1's store); a shard
process killed alone that did not stop its node's Raft process would leave the node
running without it; a shard that ignored its Raft process's death would serve on.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from om.client import requests as build
from om.client.aio import AsyncOMClient
from om.cluster import lifecycle as om_cluster
from om.cluster.preload import Namespace, generate
from om.config import NodeAddress, Raft, ServerConfig
from om.consensus.pysyncobj.process import NoSnapshots, RaftProcessReplicator
from om.node import shard_pool
from om.node.node import FAIL_STOP_EXIT
from om.protocol import om_pb2
from om.protocol.shard_routing import shard_of
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store

pytestmark = pytest.mark.integration
SHARDS = 2
VOLUME = "vol"
BUCKET = next(f"bucket{i}" for i in range(100) if shard_of(VOLUME, f"bucket{i}", SHARDS) == 1)


def _barrier(term: int) -> bytes:
    return log_entry.encode_batch(om_pb2.PersistDbBatch(term=term, leader_id="test"))


@dataclass
class NodeSide:
    """The node's own process as far as this test needs it: channel 0 of the Raft
    process, applying shard 0's part to shard 0's store; the shard process on channel 1."""

    config: ServerConfig
    machine: StateMachine
    raft: RaftProcessReplicator
    shard: subprocess.Popen[bytes]
    exits: list[int] = field(default_factory=list)   # the node's fail-stops


def _config(tmp_path: Path) -> ServerConfig:
    base = om_cluster.free_port_base(1, shards=SHARDS)
    address = NodeAddress("om1", "127.0.0.1", base, base + 10, 0)
    return ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(address,), shards=SHARDS,
                        raft=Raft(fsync=False))


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[NodeSide]:
    config = _config(tmp_path)
    seeded = Store(config.for_shard(1).node_data_dir / "db")
    generate(seeded, Namespace(volume=VOLUME, bucket=BUCKET))   # step 3 makes buckets
    seeded.close()
    machine = StateMachine(Store(tmp_path / "db"))
    exits: list[int] = []
    raft = RaftProcessReplicator(
        config.node, config.nodes, tmp_path / "raft", config.raft, machine.apply_entry,
        NoSnapshots(), _barrier, config.batch.bytes_max, lambda: exits.append(1),
        shards=SHARDS, on_position=machine.pass_position)
    (channel,) = raft.take_shard_channels()
    side = NodeSide(config, machine, raft, shard_pool.spawn(config, 1, channel), exits)
    await raft.start()
    try:
        yield side
    finally:
        await raft.close()                 # its Raft process says "closing" to shard 1
        await shard_pool.stop(side.shard)
        machine.store.close()


def _client(config: ServerConfig) -> AsyncOMClient:
    return AsyncOMClient([f"127.0.0.1:{config.node.shard_port(1)}"], user="alice")


async def _put(client: AsyncOMClient, key: str) -> None:
    created = await client.call(build.create_key(VOLUME, BUCKET, key, data_size=0))
    await client.call(build.commit_key(VOLUME, BUCKET, key,
                                       created.create_key.client_session_id, 0))


async def test_a_shard_process_executes_its_buckets_writes_into_its_own_store(
        node: NodeSide) -> None:
    client = _client(node.config)
    try:
        for index in range(3):
            await _put(client, f"k{index}")
        looked_up = await client.call(build.lookup_key(VOLUME, BUCKET, "k2"))
        assert looked_up.lookup_key.key_info.key_name == "k2"
        listed, _ = await client.call_raw(build.service_list())
        assert listed.status == om_pb2.OK
        verify = om_pb2.OMRequest(cmd_type=om_pb2.StartVerify,
                                  start_verify=om_pb2.StartVerifyRequest())
        refused, _ = await client.call_raw(verify)
        assert refused.status == om_pb2.WRONG_SHARD, refused
        assert refused.shard_address == node.config.node.address
        volume, _ = await client.call_raw(build.create_volume("vol2"))
        assert volume.status == om_pb2.WRONG_SHARD, "shard 0's: not executed on shard 1"
        assert client.shards == 2, "learned from the refusals"
    finally:
        await client.close()
    # A client that learned S takes its addresses for nodes' (shard 0's) and would send
    # shard 1's buckets to shard 1 of "the node at shard 1's port": a fresh one asks
    # shard 1 directly, as the test needs (no shard 0 serves clients here).
    again = _client(node.config)
    try:
        await _put(again, "after-the-refusal")   # the Raft process still runs
    finally:
        await again.close()
    assert node.exits == [], "the node's Raft process went on"
    assert node.machine.store.get(om_pb2.KEY, tables.key_key(VOLUME, BUCKET, "k0")) is None, \
        "shard 1's rows reach shard 1's store only"
    await node.raft.close()
    assert await shard_pool.stop(node.shard) == 0, "an orderly stop is no failure"
    store = Store(node.config.for_shard(1).node_data_dir / "db")
    try:
        shard_1 = StateMachine(store, 1)
        assert shard_1.applied_index > 0
        for key in ("k0", "k1", "k2", "after-the-refusal"):
            assert store.get(om_pb2.KEY, tables.key_key(VOLUME, BUCKET, key)) is not None
    finally:
        store.close()


async def _exited(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    return await asyncio.to_thread(process.wait, timeout_s)


async def _waited(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_a_shard_process_killed_alone_stops_its_node(node: NodeSide) -> None:
    client = _client(node.config)
    try:
        await _put(client, "before")
    finally:
        await client.close()
    child = node.raft.child_pid
    node.shard.kill()
    await _waited(lambda: bool(node.exits), 15.0, "the node did not stop with its shard")
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


async def test_a_shard_process_stops_when_its_raft_process_dies(node: NodeSide) -> None:
    client = _client(node.config)
    try:
        await _put(client, "before")
    finally:
        await client.close()
    os.kill(node.raft.child_pid, signal.SIGKILL)
    assert await _exited(node.shard, 15.0) == FAIL_STOP_EXIT
