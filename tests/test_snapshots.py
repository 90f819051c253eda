"""A slow snapshot never stalls Raft: with the leader's snapshots taking longer than
several election timeouts (``unsafe_snapshot_delay_s``), a loaded cluster compacts on
every node and keeps its leader and term; the same slowness with pysyncobj's blocking
hook (Raft on a thread) deposes the leader: the red case that shows the stall is real."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
SNAPSHOT_DELAY_S = 2.0          # election timeouts are 0.4-0.8 s
LOAD_S = 12.0
COMPACTING_RAFT = """compaction_min_entries = 20
compaction_min_time_s = 3.0
"""


def terms(cluster: om_cluster.Cluster) -> set[int]:
    return {i.term for i in cluster.node_infos() if i.role != "UNREACHABLE"}


def run_loaded(directory: Path, separate_process: bool,
               load_s: float = LOAD_S) -> tuple[set[int], set[int], int]:
    """Terms before and after a loaded period (ended early once a term changed), and how
    many nodes wrote a snapshot."""
    extra = COMPACTING_RAFT + f"separate_process = {str(separate_process).lower()}\n"
    cluster = om_cluster.up(directory, 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT + extra, timeout_s=60, remember_it=False,
                            top_level_toml=f"unsafe_snapshot_delay_s = {SNAPSHOT_DELAY_S}")
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
        before = terms(cluster)
        load = harness.WriteLoad(cluster)
        load.start()
        deadline = time.monotonic() + load_s
        while time.monotonic() < deadline and max(terms(cluster)) == max(before):
            time.sleep(0.5)
        load.stop()
        assert load.count() > 0
        after = terms(cluster)
    finally:
        om_cluster.down(cluster)
    data = cluster.config.data_dir
    snapshots = sum((data / n.id / "raft" / "raft.snapshot").exists() for n in cluster.nodes)
    return before, after, snapshots


@pytest.mark.slow
def test_slow_snapshots_never_stall_raft(tmp_path: Path) -> None:
    before, after, snapshots = run_loaded(tmp_path / "cluster", separate_process=True)
    assert snapshots == 3
    assert max(after) == max(before)


def test_the_blocking_hook_of_pysyncobj_stalls_it(tmp_path: Path) -> None:
    before, after, snapshots = run_loaded(tmp_path / "cluster", separate_process=False,
                                          load_s=3 * LOAD_S)
    assert snapshots >= 1
    assert max(after) > max(before)


@pytest.mark.slow
def test_a_wiped_follower_catches_up_by_snapshot_without_an_election(tmp_path: Path) -> None:
    """Its data directory deleted, a follower installs the leader's snapshot (the log
    before it is compacted away) while writes go on: no node changes term, and the
    replicas agree. `python -m bench.figures wipe-catch-up` does the same at 10M keys."""
    cluster = harness.start(tmp_path / "cluster", COMPACTING_RAFT)
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
        load = harness.WriteLoad(cluster)
        load.start()
        time.sleep(5.0)                      # every node compacts (every 3 s, 20 entries)
        before = terms(cluster)
        leader = harness.leader_id(cluster)
        victim = next(n for n in cluster.nodes if n.id != leader)
        cluster.stop_node(victim.id)
        shutil.rmtree(cluster.config.data_dir / victim.id)
        cluster.start_node(victim.id)
        target = cluster.wait_for_leader().applied_index
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = om_cluster.node_infos([victim.address], 1.0, cluster.client_tls())[0]
            if info.applied_index >= target:
                break
            time.sleep(0.2)
        after = terms(cluster)
        load.stop()
        assert info.applied_index >= target, "the wiped follower did not catch up in 60 s"
        assert "installed a snapshot" in cluster.log_tail(victim.id, 200)
        assert (before, after) == ({min(before)}, {min(before)}), "an election happened"
        harness.wait_converged(cluster)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1
