"""kill -9 at any point loses no acknowledged write and applies nothing twice.

The nodes run with RocksDB's own write-ahead log off (``unsafe_store_without_wal``):
a killed node loses every applied batch RocksDB had not flushed, far more than a
power loss would take, so what it serves after a restart comes from its last
checkpoint plus the Raft journal's replay. That is the claim that lets apply write
RocksDB without syncing it: the durable journal is the write-ahead log. Compaction
runs every second, so restarts also land just after journal compactions.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from tests import cluster_harness as harness

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CRASHY = """
compaction_min_entries = 40
compaction_min_time_s = 1.0
"""
ROUNDS = ("leader", "follower", "all", "leader", "all")


def _victims(cluster: om_cluster.Cluster, kind: str) -> list[str]:
    leader = harness.leader_id(cluster)
    if kind == "leader":
        return [leader]
    if kind == "follower":
        return [random.choice([n.id for n in cluster.nodes if n.id != leader])]
    return [n.id for n in cluster.nodes]


@pytest.mark.parametrize("flow", harness.FLOW_PARAMS)
def test_kill_9_anywhere_loses_no_acknowledged_write_and_applies_nothing_twice(
        tmp_path: Path, flow: str) -> None:
    execution, workers = harness.FLOWS[flow]
    cluster = om_cluster.up(tmp_path / "cluster", 3, om_cluster.free_port_base(), execution,
                            harness.FAST_RAFT + CRASHY, timeout_s=60, remember_it=False,
                            top_level_toml=f"unsafe_store_without_wal = true\nworkers = {workers}")
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
            om.put_key("vol", "bkt", "first", 10)
            per_key = om.info_bucket("vol", "bkt").used_bytes
        load = harness.WriteLoad(cluster)
        load.start()
        for kind in ROUNDS:
            target = load.count() + random.randint(10, 40)
            deadline = time.monotonic() + 60
            while load.count() < target:
                assert time.monotonic() < deadline, "writes stopped"
                time.sleep(0.02)
            victims = _victims(cluster, kind)
            for victim in victims:
                cluster.kill_node(victim)
            time.sleep(random.uniform(0.05, 0.5))
            for victim in victims:
                cluster.start_node(victim)
        load.stop()
        cluster.wait_for_leader(timeout_s=60)
        with harness.client(cluster) as om:
            stored = harness.all_keys(om)
            bucket = om.info_bucket("vol", "bkt")
        lost = {k for k in load.acknowledged if k not in stored}
        assert not lost, f"acknowledged writes lost: {sorted(lost)[:5]}"
        assert all(stored[k].object_id == oid for k, oid in load.acknowledged.items())
        assert bucket.used_namespace == len(stored), "a commit was applied twice"
        assert bucket.used_bytes == per_key * len(stored), "quota charged twice"
        assert len(load.acknowledged) > 100
        harness.wait_converged(cluster)
        digests = harness.digests_after_stop(cluster)
        assert digests["om1"] == digests["om2"] == digests["om3"]
    finally:
        om_cluster.down(cluster)
