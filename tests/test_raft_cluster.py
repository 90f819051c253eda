"""Raft HA with real processes on 127.0.0.1: replicas agree, failover, snapshots."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, encode_frame
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration

SNAPSHOT_OFTEN = """
compaction_min_entries = 40
compaction_min_time_s = 1.0
"""


@pytest.fixture(params=harness.FLOW_PARAMS)
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[om_cluster.Cluster]:
    execution, workers = harness.FLOWS[request.param]
    started = harness.start(tmp_path / "cluster", execution=execution, workers=workers)
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
    yield started
    om_cluster.down(started)


def _wait_until(condition: object, timeout_s: float = 30.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.1)


def test_replicas_hold_identical_tables_after_a_write_run(cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster) as om:
        for i in range(60):
            om.put_key("vol", "bkt", f"k{i}", i)
        for i in range(0, 60, 3):
            om.delete_key("vol", "bkt", f"k{i}")
        om.rename_key("vol", "bkt", "k1", "renamed")
    harness.wait_converged(cluster)
    digests = harness.digests_after_stop(cluster)
    assert digests["om1"] == digests["om2"] == digests["om3"]


def test_follower_answers_not_leader_with_the_leaders_address(
        cluster: om_cluster.Cluster) -> None:
    leader = cluster.wait_for_leader()
    follower = next(n for n in cluster.nodes if n.id != leader.node_id)
    request = om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume, client_id="c", call_id=1,
                               create_volume=om_pb2.CreateVolumeRequest(volume="vol2"))

    def ask_follower() -> om_pb2.OMResponse:
        with harness.raw_connection(cluster, follower, timeout_s=5) as conn:
            conn.sendall(encode_frame(request.SerializeToString()))
            (frame,) = FrameDecoder().feed(conn.recv(65536))
        return om_pb2.OMResponse.FromString(frame)

    # The leader is ready once one follower has its entry; the other learns the
    # leader from its next heartbeat and until then rightly says LEADER_NOT_READY.
    answer = ask_follower()
    deadline = time.monotonic() + 10.0
    while answer.status == om_pb2.LEADER_NOT_READY and time.monotonic() < deadline:
        time.sleep(0.1)
        answer = ask_follower()
    assert answer.status == om_pb2.NOT_LEADER
    assert answer.leader_address == leader.address
    assert answer.leader_node_id == leader.node_id
    with harness.client(cluster) as om:
        om.addresses = [follower.address]
        assert om.create_volume("vol2").volume == "vol2"
        assert om.last_node == leader.address


def test_leader_kill_under_load_loses_no_acknowledged_write(
        cluster: om_cluster.Cluster) -> None:
    load = harness.WriteLoad(cluster)
    load.start()
    _wait_until(lambda: load.count() >= 50)
    victim = harness.leader_id(cluster)
    cluster.kill_node(victim)
    before = load.count()
    _wait_until(lambda: load.count() >= before + 50, timeout_s=45)
    load.stop()
    new_leader = harness.leader_id(cluster)
    assert new_leader != victim
    with harness.client(cluster) as om:
        stored = harness.all_keys(om)
    missing = set(load.acknowledged) - set(stored)
    assert not missing, f"acknowledged writes lost: {sorted(missing)[:5]}"
    ids = [k.object_id for k in stored.values()]
    assert len(set(ids)) == len(ids), "an object id was reused"
    assert all(stored[k].object_id == oid for k, oid in load.acknowledged.items())


def test_retry_of_a_write_committed_before_the_leader_died(
        cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster, client_id="retrying-client") as om:
        opened = om.create_key("vol", "bkt", "k", 100)
        commit = om_pb2.OMRequest(
            cmd_type=om_pb2.CommitKey, call_id=1000,
            commit_key=om_pb2.CommitKeyRequest(volume="vol", bucket="bkt", key="k",
                                               client_session_id=opened.client_session_id,
                                               data_size=100))
        first = om.call(commit)
        cluster.kill_node(harness.leader_id(cluster))
        again = om.call(commit)
        assert again.SerializeToString() == first.SerializeToString()
        bucket = om.info_bucket("vol", "bkt")
        assert (bucket.used_bytes, bucket.used_namespace) == (300, 1), "charged once"
        assert len(harness.all_keys(om)) == 1


def test_full_restart_keeps_state_and_replays_nothing_twice(
        cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster) as om:
        for i in range(30):
            om.put_key("vol", "bkt", f"k{i}", 7)
        before = om.info_bucket("vol", "bkt")
        keys_before = harness.all_keys(om)
    for node in cluster.nodes:
        cluster.kill_node(node.id)
    time.sleep(0.5)
    for node in cluster.nodes:
        cluster.start_node(node.id)
    cluster.wait_for_leader(timeout_s=60)
    with harness.client(cluster) as om:
        after = om.info_bucket("vol", "bkt")
        assert (after.used_bytes, after.used_namespace) == (before.used_bytes,
                                                             before.used_namespace)
        assert harness.all_keys(om) == keys_before
        om.put_key("vol", "bkt", "after-restart", 1)
    harness.wait_converged(cluster)
    digests = harness.digests_after_stop(cluster)
    assert digests["om1"] == digests["om2"] == digests["om3"]


# Each flow and each way of falling behind runs in the suite once; the other two
# pairs (~40 s each on two cores) run in the slow tier.
@pytest.mark.parametrize(("wipe", "execution"), [
    pytest.param(True, "leader", id="wiped-leader"),
    pytest.param(False, "replicated", id="stopped-replicated"),
    pytest.param(False, "leader", id="stopped-leader", marks=pytest.mark.slow),
    pytest.param(True, "replicated", id="wiped-replicated", marks=pytest.mark.slow),
])
def test_lagging_or_wiped_follower_catches_up_by_snapshot(tmp_path: Path, wipe: bool,
                                                          execution: str) -> None:
    cluster = harness.start(tmp_path / "cluster", extra_toml=SNAPSHOT_OFTEN,
                            execution=execution)
    try:
        leader = harness.leader_id(cluster)
        lagging = next(n.id for n in cluster.nodes if n.id != leader)
        cluster.stop_node(lagging)
        if wipe:
            shutil.rmtree(cluster.config.data_dir / lagging)
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
            for i in range(120):
                om.put_key("vol", "bkt", f"k{i}", 5)
            time.sleep(1.5)  # let compaction's time window come round
            for i in range(120, 160):
                om.put_key("vol", "bkt", f"k{i}", 5)
        cluster.start_node(lagging)
        harness.wait_converged(cluster)
        log = (cluster.directory / f"{lagging}.log").read_text()
        assert "installed a snapshot" in log, "caught up from the log, not a snapshot"
        digests = harness.digests_after_stop(cluster)
        assert digests["om1"] == digests["om2"] == digests["om3"]
    finally:
        om_cluster.down(cluster)


def test_fsync_opt_out_cluster_serves_and_says_it_is_not_durable(tmp_path: Path) -> None:
    cluster = harness.start(tmp_path / "cluster", extra_toml="fsync = false\n")
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
            for i in range(10):
                om.put_key("vol", "bkt", f"k{i}", 1)
            assert len(harness.all_keys(om)) == 10
        harness.wait_converged(cluster)
        log = (cluster.directory / "om1.log").read_text()
        assert "durable=NO: fsync = false" in log
        assert "NOT a power loss" in log
    finally:
        om_cluster.down(cluster)


def test_pipelined_batches_commit_in_order_and_replicas_stay_identical(tmp_path: Path) -> None:
    cluster = harness.start(tmp_path / "cluster",
                            extra_toml="\n[batch]\ninflight_batches_max = 4\n")
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
        load = harness.WriteLoad(cluster, threads=8)
        load.start()
        _wait_until(lambda: load.count() >= 300)
        load.stop()
        with harness.client(cluster) as om:
            stored = harness.all_keys(om)
            bucket = om.info_bucket("vol", "bkt")
        assert set(load.acknowledged) <= set(stored)
        assert bucket.used_namespace == len(stored)
        ids = sorted(k.object_id for k in stored.values())
        assert len(set(ids)) == len(ids)
        harness.wait_converged(cluster)
        log = "".join((cluster.directory / f"{n.id}.log").read_text() for n in cluster.nodes)
        assert "truncating already-applied" not in log, "pipelined entries were sent twice"
        digests = harness.digests_after_stop(cluster)
        assert digests["om1"] == digests["om2"] == digests["om3"]
    finally:
        om_cluster.down(cluster)


def test_a_leader_kill_with_several_batches_in_flight_keeps_writes_exactly_once(
        tmp_path: Path) -> None:
    """Four batches in flight when the leader dies: every acknowledged write survives,
    once (each key's size charged once, its object id its own), the clients' retries of
    writes in flight (same call ids) are answered once, and the replicas agree."""
    cluster = harness.start(tmp_path / "cluster",
                            extra_toml="\n[batch]\ninflight_batches_max = 4\n")
    try:
        with harness.client(cluster) as om:
            om.create_volume("vol")
            om.create_bucket("vol", "bkt")
        load = harness.WriteLoad(cluster, threads=8)
        load.start()
        _wait_until(lambda: load.count() >= 100)
        victim = harness.leader_id(cluster)
        cluster.kill_node(victim)
        before = load.count()
        _wait_until(lambda: load.count() >= before + 100, timeout_s=45)
        load.stop()
        assert harness.leader_id(cluster) != victim
        with harness.client(cluster) as om:
            stored = harness.all_keys(om)
            bucket = om.info_bucket("vol", "bkt")
        missing = set(load.acknowledged) - set(stored)
        assert not missing, f"acknowledged writes lost: {sorted(missing)[:5]}"
        assert all(stored[k].object_id == oid for k, oid in load.acknowledged.items())
        assert (bucket.used_namespace, bucket.used_bytes) == (len(stored), 30 * len(stored))
        ids = [k.object_id for k in stored.values()]
        assert len(set(ids)) == len(ids), "an object id was reused"
        cluster.start_node(victim)
        harness.wait_converged(cluster)
        digests = harness.digests_after_stop(cluster)
        assert digests["om1"] == digests["om2"] == digests["om3"]
    finally:
        om_cluster.down(cluster)


def test_a_reused_call_id_with_another_body_is_refused_and_a_retry_is_answered(
        cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster, client_id="reusing-client") as om:
        first = om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume, call_id=777,
                                 create_volume=om_pb2.CreateVolumeRequest(volume="first"))
        answered = om.call(first)
        other = om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume, call_id=777,
                                 create_volume=om_pb2.CreateVolumeRequest(volume="second"))
        refused = om.call_raw(other)
        assert refused.status == om_pb2.INVALID_REQUEST
        assert "call id 777" in refused.message
        retried = om.call(first)
        assert retried.SerializeToString() == answered.SerializeToString()
        names = {v.volume for v in om.call(om_pb2.OMRequest(
            cmd_type=om_pb2.ListVolume, list_volume=om_pb2.ListVolumeRequest())).list_volume
                 .volume_info}
        assert "first" in names
        assert "second" not in names
