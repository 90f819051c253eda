"""A node of two shards (docs/SHARDS.md, increment B step 3): the node's own process
(shard 0) starts its Raft process with two channels and shard 1's process on the
second, each serving its port over its own store; a shard process that dies stops the
node; an orderly stop stops every shard with status 0; a client given the node's
address learns S from its first misrouted request and routes the next straight.

Red cases: a node that did not start the shard process leaves shard 1's port closed
and its channel silent (the Raft process then stops ticking); a shard's death that
did not reach the node leaves it serving with a shard gone; a close that did not stop
the Raft process first makes every shard fail stop (status 70, not 0); a client that
did not learn S gets WRONG_SHARD for every request of shard 1's buckets; a volume
sealed as shard 0's own slice never reaches shard 1's store.
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


async def _put(client: AsyncOMClient, bucket: str, key: str, volume: str = VOLUME) -> None:
    created = await client.call(build.create_key(volume, bucket, key, data_size=0))
    await client.call(build.commit_key(volume, bucket, key,
                                       created.create_key.client_session_id, 0))


async def test_each_shard_serves_its_buckets_on_its_port(serving: Serving) -> None:
    clients = [serving.client(shard) for shard in range(SHARDS)]
    try:
        for shard, client in enumerate(clients):
            for index in range(3):
                await _put(client, BUCKETS[shard], f"k{index}")
        # a client given shard 1's port for a node's: shard 0's bucket is refused there
        misrouted, _ = await clients[1].call_raw(build.lookup_key(VOLUME, BUCKETS[0], "k0"))
        assert misrouted.status == om_pb2.WRONG_SHARD
        assert misrouted.shard_address == serving.config.node.address
        assert misrouted.shards == SHARDS
        # a client given the node's address learns S from its first misrouted request
        # and sends the next ones straight to their shard
        for key, redirects in (("k0", 1), ("k1", 0)):
            routed, retries = await clients[0].call_raw(
                build.lookup_key(VOLUME, BUCKETS[1], key))
            assert routed.status == om_pb2.OK, routed
            assert retries == redirects
        listed, _ = await clients[0].call_raw(build.service_list())
        assert listed.service_list.shards == SHARDS
        fresh = serving.client(0)     # calls in flight together before it knows S
        try:
            answers = await asyncio.gather(*(
                fresh.call_raw(build.lookup_key(VOLUME, BUCKETS[1], f"k{i % 3}"))
                for i in range(8)))
        finally:
            await fresh.close()
        assert [response.status for response, _ in answers] == [om_pb2.OK] * 8
        await clients[0].call(build.create_volume("vol2"))    # rows every shard reads
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
            assert store.get(om_pb2.VOLUME, tables.volume_key("vol2")) is not None, \
                "a volume created on shard 0 is in every shard's store"
        finally:
            store.close()


async def test_buckets_are_created_on_shard_0_and_served_by_their_own_shard(
        serving: Serving) -> None:
    """Through the node's address only: a bucket created (on shard 0) takes a key at
    once on its own shard, whichever it is; shard 0 lists it with the quota its shard
    set; its shard refuses to delete it while it holds a key and deletes it after;
    shard 0 refuses to delete the volume while it holds a bucket. Red: a bucket row
    sealed as shard 0's own (BUCKET_NOT_FOUND on shard 1), or an answer before every
    shard applied it (BUCKET_NOT_FOUND now and then)."""
    client = serving.client(0)
    names = [f"bkt{i}" for i in range(6)]
    try:
        await client.call(build.create_volume("vol3"))
        for name in names:
            await client.call(build.create_bucket("vol3", name))
            await _put(client, name, "k", "vol3")       # at once, on the bucket's shard
        assert {shard_of("vol3", name, SHARDS) for name in names} == {0, 1}
        owned_by_1 = next(name for name in names if shard_of("vol3", name, SHARDS) == 1)
        await client.call(build.set_bucket_property("vol3", owned_by_1, quota_in_bytes=1 << 30))
        listed = await client.call(build.list_buckets("vol3"))
        buckets = {b.bucket_name: b for b in listed.list_buckets.bucket_info}
        assert sorted(buckets) == names
        assert buckets[owned_by_1].quota_in_bytes == 1 << 30, "shard 0's copy follows"
        full, _ = await client.call_raw(build.delete_bucket("vol3", owned_by_1))
        assert full.status == om_pb2.BUCKET_NOT_EMPTY
        await client.call(build.delete_key("vol3", owned_by_1, "k"))
        await client.call(build.delete_bucket("vol3", owned_by_1))
        listed = await client.call(build.list_buckets("vol3"))
        assert sorted(b.bucket_name for b in listed.list_buckets.bucket_info) == \
            [name for name in names if name != owned_by_1]
        busy, _ = await client.call_raw(build.delete_volume("vol3"))
        assert busy.status == om_pb2.VOLUME_NOT_EMPTY
    finally:
        await client.close()


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
