"""A real three-node cluster at S = 2 (docs/SHARDS.md, increment B step 5): every node
runs its own process (shard 0), a shard process (shard 1) and a Raft process with a
channel for each; buckets are seeded offline into their shard's store on every node
(``om freon generate --shards``), since CreateBucket across shards is step 3.

Key writes start on each of the three nodes through both shards' ports (a follower's
shard k answers NOT_LEADER naming the leader's shard-k port); every acknowledged key is
readable through its shard; a bucket's request on the other shard's port is answered
WRONG_SHARD with the owning shard's address; the leader stopped under load, the new
leader serves both shards and nothing acknowledged is lost; with the old leader back
and every shard of every node at one position, each shard's store holds the same rows
(digests) on every node, and only its own buckets' keys.

Red cases: NOT_LEADER on shard 1 naming shard 0's port sends writers that start on a
follower to the leader's shard 0, which answers WRONG_SHARD (the writes fail); a slice
applied to the other shard's store (its apply asserts: the node fails stop, the cluster
does not converge); a shard whose follower missed entries or applied them twice (the
digests of that shard differ); a key acknowledged and lost in the failover (missing
from its bucket's listing). The leader killed (kill -9, every process) under load on
both shards: restarted, each shard replays from its own position, nothing lost, nothing
applied twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from om.client import OMClient, OMClientError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.cluster import preload
from om.config import shard_data_dir
from om.protocol import om_pb2
from om.protocol.shard_routing import shard_of
from om.schema import tables
from om.statemachine.store import Store
from tests import cluster_harness

pytestmark = pytest.mark.integration
SHARDS = 2
VOLUME = "vol"
NAMESPACE = preload.Namespace(volume=VOLUME, bucket="b", buckets=6, keys=12, user="alice",
                              shards=SHARDS)
# one seeded bucket of each shard
BUCKETS = [next(b for v, b in NAMESPACE.bucket_names() if shard_of(v, b, SHARDS) == k)
           for k in range(SHARDS)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    directory = tmp_path / "cluster"
    data = directory.resolve() / "data"   # write_config's data_dir
    preload.generate_shards(data / "om1", NAMESPACE)
    preload.copy_shards(data / "om1", [data / "om2", data / "om3"], SHARDS)
    started = cluster_harness.start(directory, shards=SHARDS)
    try:
        yield started
    finally:
        om_cluster.down(started)


def _client(cluster: om_cluster.Cluster, shard: int, first: int = 0) -> OMClient:
    """A client of shard ``shard``'s ports of every node, trying node ``first`` first."""
    addresses = [node.shard_address(shard) for node in cluster.nodes]
    return OMClient(addresses[first:] + addresses[:first], tls=cluster.client_tls(),
                    policy=RetryPolicy(deadline_s=20.0, attempt_timeout_s=2.0))


@dataclass
class ShardWriters:
    """A writer per shard and node it starts on, putting keys into its shard's bucket
    until stopped; what each acknowledged, and when."""

    cluster: om_cluster.Cluster
    acknowledged: dict[int, list[tuple[str, float]]] = field(
        default_factory=lambda: {k: [] for k in range(SHARDS)})
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, keys_each: int) -> None:
        for shard in range(SHARDS):
            for first in range(len(self.cluster.nodes)):
                thread = threading.Thread(target=self._run, args=(shard, first, keys_each),
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    def _run(self, shard: int, first: int, keys_each: int) -> None:
        with _client(self.cluster, shard, first) as om:
            for index in range(keys_each):
                if self._stop.is_set():
                    return
                key = f"from-om{first + 1}/{index:04d}"
                try:
                    om.put_key(VOLUME, BUCKETS[shard], key, 10)
                except OMClientError as error:
                    self.failures.append(f"shard {shard} via om{first + 1}: {key}: {error}")
                    continue
                self.acknowledged[shard].append((key, time.monotonic()))

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=90)
            assert not thread.is_alive(), "a writer did not stop"

    def stop(self) -> None:
        self._stop.set()
        self.join()


def _listed(om: OMClient, bucket: str) -> set[str]:
    """Every key of ``bucket`` under "from-", read through its shard."""
    keys: set[str] = set()
    start = ""
    while True:
        page = om.list_keys(VOLUME, bucket, prefix="from-", start_key=start, max_keys=1000)
        keys.update(k.key_name for k in page.key_info)
        if not page.truncated:
            return keys
        start = page.key_info[-1].key_name


def _check_misrouted(cluster: om_cluster.Cluster, leader: str) -> None:
    """A bucket's lookup on the other shard's port of the leader: WRONG_SHARD, naming the
    owning shard's address, never an answer from rows that shard does not hold (a
    client given shard 1's port as a node's gets it as its answer); a client given the
    node's address follows it to the bucket's shard."""
    node = next(n for n in cluster.nodes if n.id == leader)
    with OMClient([node.shard_address(1)], tls=cluster.client_tls()) as om:
        response = om.call_raw(build.lookup_key(VOLUME, BUCKETS[0], "from-om1/0000"))
    assert response.status == om_pb2.WRONG_SHARD, response
    assert response.shard_address == node.shard_address(0)
    with OMClient([node.address], tls=cluster.client_tls()) as om:
        response = om.call_raw(build.lookup_key(VOLUME, BUCKETS[1], "from-om1/0000"))
        assert response.status == om_pb2.OK, response
        assert (om.last_node, om.last_retries) == (node.shard_address(1), 1)


def _keys_in_stores(cluster: om_cluster.Cluster, node_id: str
                    ) -> list[dict[str, int]]:
    """The written keys each shard's store of a stopped node holds, as bucket/key, with
    their object ids."""
    held = []
    for shard in range(SHARDS):
        store = Store(shard_data_dir(cluster.config.data_dir / node_id, shard) / "db")
        try:
            held.append({f"{info.bucket_name}/{info.key_name}": info.object_id
                         for _, raw in store.iterate(om_pb2.KEY, tables.bucket_prefix(VOLUME))
                         for info in [om_pb2.KeyInfo.FromString(raw)]
                         if info.key_name.startswith("from-")})
        finally:
            store.close()
    return held


def test_two_shards_on_three_nodes_serve_fail_over_and_agree(
        cluster: om_cluster.Cluster) -> None:
    cluster.wait_converged(timeout_s=60)     # every shard of every node answers
    writers = ShardWriters(cluster)
    writers.start(keys_each=4)
    writers.join()
    assert writers.failures == []
    assert all(len(keys) == 3 * 4 for keys in writers.acknowledged.values())
    leader = cluster_harness.leader_id(cluster)
    _check_misrouted(cluster, leader)

    loaded = ShardWriters(cluster)
    loaded.start(keys_each=10_000)
    time.sleep(1.0)
    cluster.stop_node(leader)
    stopped_at = time.monotonic()
    successor = cluster_harness.leader_id(cluster)
    assert successor != leader
    deadline = time.monotonic() + 30.0
    while not all(acked and acked[-1][1] > stopped_at + 0.5
                  for acked in loaded.acknowledged.values()):
        assert time.monotonic() < deadline, "the new leader serves both shards"
        time.sleep(0.1)
    loaded.stop()
    for shard in range(SHARDS):
        with _client(cluster, shard) as om:
            listed = _listed(om, BUCKETS[shard])
        acknowledged = {key for key, _ in writers.acknowledged[shard] + loaded.acknowledged[shard]}
        assert acknowledged <= listed, f"shard {shard} lost {sorted(acknowledged - listed)[:5]}"

    cluster.start_node(leader)
    cluster.wait_converged(timeout_s=60)
    om_cluster.down(cluster)
    for shard in range(SHARDS):
        digests = cluster.stopped_digests(shard)
        assert digests["om1"] == digests["om2"] == digests["om3"], f"shard {shard}"
    for node in cluster.nodes:
        held = _keys_in_stores(cluster, node.id)
        for shard, keys in enumerate(held):
            assert keys, f"{node.id}'s shard {shard} holds its writes"
            assert {key.split("/")[0] for key in keys} == {BUCKETS[shard]}, \
                f"{node.id}'s shard {shard} holds only its own bucket's keys"
        ids = [object_id for keys in held for object_id in keys.values()]
        assert len(ids) == len(set(ids)), "object ids unique across the shards"


def test_a_leader_killed_between_its_shards_applies_loses_and_duplicates_nothing(
        cluster: om_cluster.Cluster) -> None:
    """kill -9 of the leader's every process under load on both shards (one shard has
    applied entries the other has not, most of the time): restarted, each shard replays
    from its own applied position. Nothing acknowledged is lost, nothing applied twice:
    each shard's digests equal the other nodes' (a key write applied twice charges its
    bucket's usage twice). Red: a shard replaying from shard 0's position (it skips
    what it had not applied, or re-applies what it had)."""
    cluster.wait_converged(timeout_s=60)
    leader = cluster_harness.leader_id(cluster)
    writers = ShardWriters(cluster)
    writers.start(keys_each=10_000)
    deadline = time.monotonic() + 30.0
    while not all(len(acked) >= 20 for acked in writers.acknowledged.values()):
        assert time.monotonic() < deadline, "no writes acknowledged on both shards"
        time.sleep(0.05)
    cluster.kill_node(leader)
    killed_at = time.monotonic()
    deadline = time.monotonic() + 30.0
    while not all(acked and acked[-1][1] > killed_at + 0.5
                  for acked in writers.acknowledged.values()):
        assert time.monotonic() < deadline, "a new leader serves both shards"
        time.sleep(0.1)
    cluster.start_node(leader)
    time.sleep(1.0)
    writers.stop()
    for shard in range(SHARDS):
        with _client(cluster, shard) as om:
            listed = _listed(om, BUCKETS[shard])
        acknowledged = {key for key, _ in writers.acknowledged[shard]}
        assert acknowledged <= listed, f"shard {shard} lost {sorted(acknowledged - listed)[:5]}"
    cluster.wait_converged(timeout_s=60)
    om_cluster.down(cluster)
    for shard in range(SHARDS):
        digests = cluster.stopped_digests(shard)
        assert digests["om1"] == digests["om2"] == digests["om3"], f"shard {shard}"
