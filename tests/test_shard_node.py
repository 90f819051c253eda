"""A node of two shards (docs/SHARDS.md, increment B step 3): the node's own process
(shard 0) starts its Raft process with two channels and shard 1's process on the
second, each serving its port over its own store; a shard process that dies stops the
node; an orderly stop stops every shard with status 0.

Red cases: a node that did not start the shard process leaves shard 1's port closed
and its channel silent (the Raft process then stops ticking); a shard's death that
did not reach the node leaves it serving with a shard gone; a close that did not stop
the Raft process first makes every shard fail stop (status 70, not 0).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from om.client import requests as build
from om.client.aio import AsyncOMClient
from om.cluster import lifecycle as om_cluster
from om.cluster.preload import Namespace, generate
from om.config import NodeAddress, Raft, ServerConfig
from om.node.node import Node
from om.node.rpc import serve
from om.protocol import om_pb2
from om.protocol.shard_routing import shard_of
from om.schema import tables
from om.statemachine.store import Store

pytestmark = pytest.mark.integration
SHARDS = 2
VOLUME = "vol"
BUCKETS = [next(name for name in (f"bucket{i}" for i in range(100))
                if shard_of(VOLUME, name, SHARDS) == k) for k in range(SHARDS)]


@dataclass
class Serving:
    """A node served in this test's loop, and its fail-stops."""

    config: ServerConfig
    node: Node
    stop: asyncio.Event
    task: asyncio.Future[None]
    exits: list[int] = field(default_factory=list)

    def client(self, shard: int) -> AsyncOMClient:
        return AsyncOMClient([f"127.0.0.1:{self.config.node.shard_port(shard)}"], user="alice")


def _config(tmp_path: Path) -> ServerConfig:
    base = om_cluster.free_port_base(1, shards=SHARDS)
    address = NodeAddress("om1", "127.0.0.1", base, base + 10, 0)
    return ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(address,), shards=SHARDS,
                        raft=Raft(fsync=False))


def _store(config: ServerConfig, shard: int) -> Store:
    """Shard ``shard``'s store, opened directly."""
    return Store((config.for_shard(shard) if shard else config).node_data_dir / "db")


def _seed(config: ServerConfig) -> None:
    """Each shard's bucket into its store, as step 5's preload will (CreateBucket
    across shards is step 3 of docs/SHARDS.md)."""
    for shard, bucket in enumerate(BUCKETS):
        store = _store(config, shard)
        generate(store, Namespace(volume=VOLUME, bucket=bucket))
        store.close()


@pytest.fixture
async def serving(tmp_path: Path) -> AsyncIterator[Serving]:
    config = _config(tmp_path)
    _seed(config)
    exits: list[int] = []
    node = Node(config, fail_stop=lambda: exits.append(1))
    stop = asyncio.Event()
    task = asyncio.ensure_future(serve(node, stop))
    running = Serving(config, node, stop, task, exits)
    try:
        yield running
    finally:
        stop.set()
        await asyncio.wait_for(task, 60.0)


async def _put(client: AsyncOMClient, bucket: str, key: str) -> None:
    created = await client.call(build.create_key(VOLUME, bucket, key, data_size=0))
    await client.call(build.commit_key(VOLUME, bucket, key,
                                       created.create_key.client_session_id, 0))


async def test_each_shard_serves_its_buckets_on_its_port(serving: Serving) -> None:
    clients = [serving.client(shard) for shard in range(SHARDS)]
    try:
        for shard, client in enumerate(clients):
            for index in range(3):
                await _put(client, BUCKETS[shard], f"k{index}")
        misrouted, _ = await clients[0].call_raw(build.lookup_key(VOLUME, BUCKETS[1], "k0"))
        assert misrouted.status == om_pb2.WRONG_SHARD
        assert misrouted.shard_address == f"127.0.0.1:{serving.config.node.shard_port(1)}"
    finally:
        for client in clients:
            await client.close()
    serving.stop.set()
    await asyncio.wait_for(serving.task, 60.0)
    assert serving.exits == []
    shards = serving.node.shard_processes
    assert shards is not None
    assert [p.returncode for p in shards.processes] == [0], \
        "an orderly stop is no failure of a shard's"
    for shard in range(SHARDS):
        store = _store(serving.config, shard)
        try:
            for other, other_bucket in enumerate(BUCKETS):
                found = store.get(om_pb2.KEY, tables.key_key(VOLUME, other_bucket, "k2"))
                assert (found is not None) == (other == shard), "each shard's rows, its store"
        finally:
            store.close()


async def test_a_shard_process_that_dies_stops_the_node(serving: Serving) -> None:
    client = serving.client(1)
    try:
        await _put(client, BUCKETS[1], "before")
    finally:
        await client.close()
    shards = serving.node.shard_processes
    assert shards is not None
    shards.processes[0].kill()
    deadline = time.monotonic() + 15.0
    while not serving.exits:
        assert time.monotonic() < deadline, "the node went on without its shard"
        await asyncio.sleep(0.05)
