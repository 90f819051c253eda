"""A hung disk costs no election: real 3-node clusters under load, one node's Raft
journal stalled for two seconds (several election timeouts) through its stall
file (``[raft] unsafe_journal_stall``), in each node's Raft process.

With the leader's journal stalled, no election and no failed write, and writes
go on (the followers' disks hold a majority) and after the stall; with a
follower's, the leader keeps its majority with the other. The red case, a Raft
thread that waits for its sync, is ``tests/consensus/test_heartbeats.py``'s.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
STALL_S = 2.0          # election timeouts are 0.4-0.8 s


def _stall_file(cluster: om_cluster.Cluster, node_id: str) -> Path:
    return cluster.config.data_dir / node_id / "raft" / "raft.wal.stall"


def _views(cluster: om_cluster.Cluster) -> tuple[set[int], set[str]]:
    """The terms the nodes are in, and who says it leads."""
    infos = cluster.node_infos()
    assert all(i.role != "UNREACHABLE" for i in infos)
    return {i.term for i in infos}, {i.node_id for i in infos if i.role == "LEADER"}


def _settled_views(cluster: om_cluster.Cluster, timeout_s: float = 20.0) -> tuple[set[int],
                                                                                set[str]]:
    """The views once every node is in one term under one leader (a follower that
    has not heard from the new leader yet still says term 0)."""
    deadline = time.monotonic() + timeout_s
    while True:
        views = _views(cluster)
        if len(views[0]) == 1 and len(views[1]) == 1:
            return views
        assert time.monotonic() < deadline, f"the nodes never agreed: {views}"
        time.sleep(0.1)


def _stall_under_load(directory: Path, stall_leader: bool) -> None:
    cluster = harness.start(directory, "unsafe_journal_stall = true\n")
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
        leader = harness.leader_id(cluster)
        stalled = leader if stall_leader else next(
            n.id for n in cluster.nodes if n.id != leader)
        before = _settled_views(cluster)
        load = harness.WriteLoad(cluster, threads=4)
        load.start()
        time.sleep(1.5)
        _stall_file(cluster, stalled).touch()
        began = time.monotonic()
        time.sleep(STALL_S)
        _stall_file(cluster, stalled).unlink()
        ended = time.monotonic()
        time.sleep(1.5)
        load.stop()
        after = _views(cluster)
        assert before[1] == {leader}
        assert after == before, f"terms and leader {before} became {after}"
        assert load.failures == 0
        during = sum(began + 0.2 < at < ended for at in load.acknowledged_at)
        assert during > 0, "writes stopped while one node's disk hung"
        assert sum(at > ended for at in load.acknowledged_at) > 0
        harness.wait_converged(cluster)
    finally:
        om_cluster.down(cluster)


def test_a_stalled_leader_journal_costs_no_election_and_no_write(tmp_path: Path) -> None:
    _stall_under_load(tmp_path / "cluster", stall_leader=True)


def test_a_stalled_follower_journal_leaves_the_leader_its_majority(tmp_path: Path) -> None:
    _stall_under_load(tmp_path / "cluster", stall_leader=False)
