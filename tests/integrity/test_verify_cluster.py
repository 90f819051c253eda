"""om admin verify / repair / audit, and continuous verification, on real 3-node clusters.

A row changed, deleted or added offline on one follower as a wrong apply would
(its digests follow) must be found by the next continuous check and named
exactly; that node must refuse clients, across a restart too; a repair must
bring its roots back to the majority's (and only then let it serve), must refuse
to pass a leaf its source cannot supply, and must survive a crash in the middle.
A row changed behind RocksDB's back, and a digest leaf changed alone, are the
scrub's: ``om admin verify --full`` finds both as drift and mends them, after
which a changed row is a divergence verify names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from om.cli import main
from om.cli.admin.integrity_rpc import NodeLink
from om.cli.admin.verify import CRASH_ENV, CRASH_EXIT
from om.client import OMClient
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.config import NodeAddress
from om.integrity import marker
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import digests
from om.statemachine.store import Store
from tests import cluster_harness as harness
from tests.integrity.populate import write_through

pytestmark = pytest.mark.integration
KEYS = 40


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[om_cluster.Cluster]:
    execution = getattr(request, "param", "leader")
    started = harness.start(tmp_path / "cluster", execution=execution)
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(KEYS):
            om.put_key("vol", "bkt", f"key-{i:03d}", 100 + i)
    harness.wait_converged(started)
    yield started
    om_cluster.down(started)


def _admin(capsys: pytest.CaptureFixture[str], cluster: om_cluster.Cluster,
           *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    status = main(["admin", *args, "--dir", str(cluster.directory), "--json"])
    return status, json.loads(capsys.readouterr().out)


def _status(cluster: om_cluster.Cluster, address: str) -> tuple[str, str]:
    """The status a node alone gives a read (no retries elsewhere)."""
    with OMClient([address], policy=RetryPolicy(deadline_s=2.0),
                  tls=cluster.client_tls()) as om:
        answer = om.call_raw(build.info_bucket("vol", "bkt"))
    return om_pb2.Status.Name(answer.status), answer.message


def _others(cluster: om_cluster.Cluster, node_id: str) -> OMClient:
    return OMClient([n.address for n in cluster.nodes if n.id != node_id],
                    policy=RetryPolicy(deadline_s=30.0, attempt_timeout_s=2.0),
                    tls=cluster.client_tls())


def _follower(cluster: om_cluster.Cluster) -> NodeAddress:
    leader = cluster.wait_for_leader().node_id
    return next(n for n in cluster.nodes if n.id != leader)


def _edit_offline(cluster: om_cluster.Cluster, node_id: str) -> set[tuple[str, str, str, str]]:
    """Stops the node, changes a bucket row, deletes a key and adds one as a wrong apply
    would (its digests follow), starts it again; returns what verify must name."""
    cluster.stop_node(node_id)
    store = Store(cluster.config.data_dir / node_id / "db")
    try:
        bucket = tables.bucket_key("vol", "bkt")
        info = om_pb2.BucketInfo.FromString(store.get(om_pb2.BUCKET, bucket) or b"")
        info.used_bytes += 7
        gone = tables.key_key("vol", "bkt", "key-010")
        ghost = tables.key_key("vol", "bkt", "ghost")
        write_through(store, {(om_pb2.BUCKET, bucket): info.SerializeToString(),
                              (om_pb2.KEY, gone): None,
                              (om_pb2.KEY, ghost): store.get(om_pb2.KEY, gone) or b""})
    finally:
        store.close()
    cluster.start_node(node_id)
    harness.wait_converged(cluster)
    return {(node_id, "bucketTable", "/vol/bkt", "different"),
            (node_id, "keyTable", "/vol/bkt/key-010", "missing"),
            (node_id, "keyTable", "/vol/bkt/ghost", "extra")}


def _repair_process(cluster: om_cluster.Cluster, node_id: str, *args: str,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "om", "admin", "repair", "--dir",
                           str(cluster.directory), "--node-id", node_id, *args],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=120)


def _wait_exit(cluster: om_cluster.Cluster, node_id: str, process: subprocess.Popen[bytes],
               timeout_s: float = 30.0) -> int:
    status = process.wait(timeout=timeout_s)
    cluster.pid_file(node_id).unlink(missing_ok=True)
    return status


@pytest.mark.parametrize("cluster", ["leader", "replicated"], indirect=True)
def test_a_healthy_cluster_verifies_and_audits_clean(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = _admin(capsys, cluster, "verify")
    assert status == 0, report
    assert report["result"] == "clean"
    assert [n["state"] for n in report["nodes"]] == ["DONE"] * 3
    assert len({n["rows"] for n in report["nodes"]}) == 1
    status, audit = _admin(capsys, cluster, "audit")
    assert status == 0, audit
    assert audit["cluster"] == []
    assert all(n["violations_total"] == 0 and n["rows_checked"] > KEYS for n in audit["nodes"])


@pytest.mark.slow
def test_a_diverged_follower_is_named_refused_and_repaired(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    victim = _follower(cluster)
    expected = _edit_offline(cluster, victim.id)

    status, report = _admin(capsys, cluster, "verify")
    assert status == 1
    assert (report["result"], report["minority"]) == ("minority", [victim.id])
    assert {(d["node"], d["table"], d["key"], d["kind"])
            for d in report["differences"]} == expected
    assert report["marked"] == {victim.id: ["bucketTable", "keyTable"]}

    status, audit = _admin(capsys, cluster, "audit", "--node-id", victim.id)
    assert status == 1
    assert {v["category"] for v in audit["cluster"]} == {"verify_disagrees"}
    (node,) = [n for n in audit["nodes"] if n.get("node_id") == victim.id]
    assert node["counts"]["bucket_usage"] == 1

    assert _status(cluster, victim.address)[0] == "REPLICA_DIVERGED"
    with _others(cluster, victim.id) as om:
        om.put_key("vol", "bkt", "while-diverged", 1)         # the others serve
    cluster.stop_node(victim.id)
    cluster.start_node(victim.id)
    cluster.wait_converged(timeout_s=30)
    assert _status(cluster, victim.address)[0] == "REPLICA_DIVERGED", "kept out across a restart"

    crashed = _repair_process(cluster, victim.id, env={CRASH_ENV: "1"})
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    found = marker.load(cluster.config.data_dir / victim.id)
    assert found is not None
    assert (found.state, found.repaired) == (marker.REPAIRING, 1)
    status = _wait_exit(cluster, victim.id, cluster.start_node(victim.id))
    assert status == 3, "a node stopped for repair refuses to start"
    assert "stopped for repair" in cluster.log_tail(victim.id, 3)

    # The only allowed source lost its key rows from its checkpoint (its digests kept):
    # whichever keyTable leaves are left to repair, it cannot supply them.
    source = next(n.id for n in cluster.nodes if n.id != victim.id)
    _stop_serving_checkpoint(cluster, source, found.position)
    refused = _repair_process(cluster, victim.id, "--source", source)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "unrepairable: keyTable" in refused.stdout
    assert f"{source}: " in refused.stdout
    kept = marker.load(cluster.config.data_dir / victim.id)
    assert kept is not None
    assert kept.stops_start
    assert any("keyTable" in why for why in kept.unrepairable)

    done = _repair_process(cluster, victim.id, "--json", "--start")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)       # one document: the start's outcome is in it
    assert (result["cleared"], result["started"]) == (True, f"{victim.id} started")
    assert set(result["repaired"]) <= {"keyTable"}
    assert marker.load(cluster.config.data_dir / victim.id) is None
    harness.wait_converged(cluster)
    assert _status(cluster, victim.address)[0] in ("OK", "NOT_LEADER")
    status, report = _admin(capsys, cluster, "verify")
    assert (status, report["result"]) == (0, "clean")
    digests = harness.digests_after_stop(cluster)
    assert digests["om1"] == digests["om2"] == digests["om3"]


@pytest.mark.slow
def test_a_diverged_leader_hands_over_and_no_majority_marks_nobody(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    status, report = _admin(capsys, cluster, "verify")
    assert status == 0
    leader = cluster.wait_for_leader()
    link = NodeLink(leader.address, cluster.client_tls())
    try:
        answer = link.call(om_pb2.OMRequest(
            cmd_type=om_pb2.MarkDiverged, mark_diverged=om_pb2.MarkDivergedRequest(
                position=report["position"],
                majority_roots={"keyTable": b"\0" * 32})))
    finally:
        link.close()
    assert list(answer.mark_diverged.tables) == ["keyTable"]
    started = time.monotonic()
    while cluster.wait_for_leader().node_id == leader.node_id:
        assert time.monotonic() - started < 10, "the diverged leader kept leadership"
        time.sleep(0.05)
    assert _status(cluster, leader.address)[0] == "REPLICA_DIVERGED"
    repaired = _repair_process(cluster, leader.node_id, "--start")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "0 differing leaves" in repaired.stdout
    harness.wait_converged(cluster)

    # Two followers changed the same key differently: three roots, no majority.
    followers = [n.id for n in cluster.nodes if n.id != cluster.wait_for_leader().node_id]
    for follower, size in zip(followers, (1, 2), strict=True):
        cluster.stop_node(follower)
        store = Store(cluster.config.data_dir / follower / "db")
        key = tables.key_key("vol", "bkt", "key-005")
        info = om_pb2.KeyInfo.FromString(store.get(om_pb2.KEY, key) or b"")
        info.data_size = size
        write_through(store, {(om_pb2.KEY, key): info.SerializeToString()})
        store.close()
    for follower in followers:
        cluster.start_node(follower)
    harness.wait_converged(cluster)
    status, report = _admin(capsys, cluster, "verify")
    assert status == 1
    assert (report["result"], report["no_majority"]) == ("no_majority", ["keyTable"])
    assert report["marked"] == {}
    assert report["differences"] == []
    assert all(_status(cluster, n.address)[0] != "REPLICA_DIVERGED" for n in cluster.nodes)


def _stop_serving_checkpoint(cluster: om_cluster.Cluster, node_id: str, position: int) -> None:
    """Deletes every keyTable row of a node's checkpoint at ``position``, behind its digests
    (its process keeps the checkpoint open for reads, so it is restarted to see it)."""
    cluster.stop_node(node_id)
    checkpoint = Store(cluster.config.data_dir / node_id / "verify" / f"{position:020d}"
                       / "checkpoint")
    try:
        batch = checkpoint.new_batch()
        for key, _ in list(checkpoint.iterate(om_pb2.KEY)):
            checkpoint.batch_delete(batch, om_pb2.KEY, key)
        checkpoint.write(batch)
    finally:
        checkpoint.close()
    cluster.start_node(node_id)
    at = [n.id for n in cluster.nodes].index(node_id)
    deadline = time.monotonic() + 60
    while cluster.node_infos()[at].role == "UNREACHABLE":
        assert time.monotonic() < deadline, f"{node_id} did not come back"
        time.sleep(0.1)


@pytest.fixture
def continuous(tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path / "cluster", extra_toml=f"\n[verify]\ninterval_s = "
                            f"{INTERVAL_S}\nscrub_rows_per_s = 0\n")
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(KEYS):
            om.put_key("vol", "bkt", f"key-{i:03d}", 100 + i)
    harness.wait_converged(started)
    yield started
    om_cluster.down(started)


INTERVAL_S = 2.0


def _marked_within(cluster: om_cluster.Cluster, node_id: str, seconds: float) -> float:
    started = time.monotonic()
    while marker.load(cluster.config.data_dir / node_id) is None:
        assert time.monotonic() - started < seconds, f"{node_id} was not marked in {seconds} s"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_lost_write_is_found_by_the_next_interval_and_named(
        continuous: om_cluster.Cluster) -> None:
    cluster = continuous
    victim = _follower(cluster)
    cluster.stop_node(victim.id)
    store = Store(cluster.config.data_dir / victim.id / "db")
    try:          # the write of key-007 never reached this node's store (its digests agree)
        write_through(store, {(om_pb2.KEY, tables.key_key("vol", "bkt", "key-007")): None})
    finally:
        store.close()
    cluster.start_node(victim.id)
    took = _marked_within(cluster, victim.id, 3 * INTERVAL_S + 30)
    assert _status(cluster, victim.address)[0] == "REPLICA_DIVERGED"
    log = cluster.log_tail(victim.id, 400)
    assert "ALERT replica divergence" in log
    assert "keyTable /vol/bkt/key-007 is missing here" in log
    others = [n for n in cluster.nodes if n.id != victim.id]
    assert all(marker.load(cluster.config.data_dir / n.id) is None for n in others)
    print(f"marked {took:.1f} s after its start")


def test_drift_behind_rocksdbs_back_is_the_scrubs_and_then_verifys(
        continuous: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = continuous
    victim, other = [n for n in cluster.nodes if n.id != cluster.wait_for_leader().node_id]
    rotten = tables.key_key("vol", "bkt", "key-003")
    cluster.stop_node(victim.id)
    store = Store(cluster.config.data_dir / victim.id / "db")
    try:               # a tool writing RocksDB directly: the digests know nothing of it
        batch = store.new_batch()
        store.batch_put(batch, om_pb2.KEY, rotten, b"bit rot")
        store.write(batch)
    finally:
        store.close()
    cluster.stop_node(other.id)
    store = Store(cluster.config.data_dir / other.id / "db")
    try:               # a digest leaf changed alone
        kept = digests.read_meta(store)
        assert kept is not None
        leaf = digests.hasher_of(kept).leaf(tables.key_key("vol", "bkt", "key-004"))
        batch = store.new_batch()
        store.batch_put(batch, om_pb2.DIGESTS, digests.leaf_key(om_pb2.KEY, leaf),
                        bytes(39) + b"\1")
        store.write(batch)
    finally:
        store.close()
    for node in (victim, other):
        cluster.start_node(node.id)
    harness.wait_converged(cluster)
    assert marker.load(cluster.config.data_dir / victim.id) is None, "invisible to verify"

    status, report = _admin(capsys, cluster, "verify", "--full")
    drifted = {(scrub.get("node_id"), d["table"])
               for scrub in report["scrub"].values() for d in scrub.get("drift", [])}
    assert drifted == {(victim.id, "keyTable"), (other.id, "keyTable")}, report["scrub"]
    assert status == 1
    assert (report["result"], report["minority"]) == ("minority", [victim.id])
    assert [(d["node"], d["key"], d["kind"]) for d in report["differences"]] == [
        (victim.id, "/vol/bkt/key-003", "different")]
    assert marker.load(cluster.config.data_dir / other.id) is None


FRAME_BYTES = 8 * 1024     # the nodes' frame limit below: a page of rows outgrows it
SEEDED = 12_000


def _seed_offline(cluster: om_cluster.Cluster) -> None:
    """Stops every node, writes the same SEEDED keyTable rows into each store, starts them."""
    for node in cluster.nodes:
        cluster.stop_node(node.id)
    for node in cluster.nodes:
        store = Store(cluster.config.data_dir / node.id / "db")
        try:
            value = store.get(om_pb2.KEY, tables.key_key("vol", "bkt", "key-000")) or b""
            write_through(store, {(om_pb2.KEY, tables.key_key("vol", "bkt", f"s-{i:05d}")):
                                  value for i in range(SEEDED)})
        finally:
            store.close()
    for node in cluster.nodes:
        cluster.start_node(node.id)
    harness.wait_converged(cluster)


@pytest.fixture
def small_frames(tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path / "cluster",
                            extra_toml=f"\n[limits]\nmax_frame_bytes = {FRAME_BYTES}\n")
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(3):
            om.put_key("vol", "bkt", f"key-{i:03d}", 100 + i)
    harness.wait_converged(started)
    _seed_offline(started)
    yield started
    om_cluster.down(started)


@pytest.mark.slow
def test_rows_larger_than_a_frame_are_named_and_repaired_a_page_at_a_time(
        small_frames: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = small_frames
    victim = _follower(cluster)
    cluster.stop_node(victim.id)
    store = Store(cluster.config.data_dir / victim.id / "db")
    try:
        changed = tables.key_key("vol", "bkt", "s-04321")
        gone = tables.key_key("vol", "bkt", "s-09876")
        write_through(store, {(om_pb2.KEY, changed): b"not the majority's",
                              (om_pb2.KEY, gone): None})
    finally:
        store.close()
    cluster.start_node(victim.id)
    harness.wait_converged(cluster)

    status, report = _admin(capsys, cluster, "verify", "--stall-timeout", "60")
    assert status == 1
    assert (report["result"], report["minority"]) == ("minority", [victim.id])
    assert not report["problems"], report["problems"]
    assert {(d["node"], d["table"], d["key"], d["kind"]) for d in report["differences"]} == {
        (victim.id, "keyTable", "/vol/bkt/s-04321", "different"),
        (victim.id, "keyTable", "/vol/bkt/s-09876", "missing")}

    done = _repair_process(cluster, victim.id, "--json", "--start")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)       # one document: the start's outcome is in it
    assert (result["cleared"], result["started"]) == (True, f"{victim.id} started")
    assert set(result["repaired"]) == {"keyTable"}
    assert result["rows_written"] == 2, "only the differing rows of the leaves are written"
    harness.wait_converged(cluster)
    status, report = _admin(capsys, cluster, "verify")
    assert (status, report["result"]) == (0, "clean")
