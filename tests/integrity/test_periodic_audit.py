"""The periodic auditor on real 3-node clusters: followers only, skipped when a run is still
going, stopped when its node becomes leader, a seeded violation reported and never fixed,
nothing at all when off (the default).

What each node did is read from its metrics through ServiceList, as ``om admin audit
--last`` reads them (``om.cli.admin.audit.last_periodic``).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from om.cli import main
from om.cli.admin.audit import last_periodic
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError
from om.config import load as load_config
from om.integrity import auditor
from om.integrity.periodic import RESULT_FILE, Schedule, load_result
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.store import Store
from tests import cluster_harness as harness

KEYS = 40
CLEAN = dict.fromkeys(auditor.STORE_CATEGORIES, 0)


def _start(directory: Path, auditor_toml: str = "") -> om_cluster.Cluster:
    started = harness.start(directory, extra_toml=auditor_toml)
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(KEYS):
            om.put_key("vol", "bkt", f"key-{i:03d}", 100 + i)
    harness.wait_converged(started)
    return started


def _auditor_toml(interval_s: float, rows_per_s: int = 50_000) -> str:
    return f"\n[auditor]\nperiodic_interval_s = {interval_s}\nrows_per_s = {rows_per_s}\n"


def _periodic(cluster: om_cluster.Cluster) -> dict[str, dict[str, Any]]:
    """Each node's periodic audit, by node id."""
    report = last_periodic(cluster.node_infos(timeout_s=3.0), time.time())
    nodes = {n["node_id"]: n for n in report["nodes"]}
    assert set(nodes) == {n.id for n in cluster.nodes}, report
    return nodes


def _wait_for(cluster: om_cluster.Cluster, what: str,
              done: Callable[[dict[str, dict[str, Any]]], bool],
              timeout_s: float = 30.0) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = _periodic(cluster)
        if done(nodes):
            return nodes
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}: {json.dumps(nodes)}")
        time.sleep(0.2)


def _roles(cluster: om_cluster.Cluster) -> tuple[str, list[str]]:
    leader = cluster.wait_for_leader().node_id
    return leader, sorted(n.id for n in cluster.nodes if n.id != leader)


def _runs(node: dict[str, Any]) -> int:
    return int(node["periodic"]["runs"])


def _last_counts(node: dict[str, Any]) -> dict[str, int] | None:
    return None if node["last"] is None else dict(node["last"]["counts"])


# ------------------------------------------------------------ the schedule ---

def test_the_schedule_spreads_runs_and_the_config_is_checked(tmp_path: Path) -> None:
    schedule = Schedule(interval_s=100.0, jitter_fraction=0.2)
    rng = random.Random(7)
    firsts = [schedule.first_delay(rng, None) for _ in range(200)]
    assert all(0 <= d < 100 for d in firsts)
    assert max(firsts) - min(firsts) > 50, "followers started together start apart"
    intervals = [schedule.next_interval(rng) for _ in range(200)]
    assert all(80 <= i <= 120 for i in intervals)
    assert len(set(intervals)) == 200
    after_restart = [schedule.first_delay(rng, 30.0) for _ in range(50)]
    assert all(70 <= d <= 90 for d in after_restart), "an interval after the last run"
    assert all(0 <= schedule.first_delay(rng, 500.0) <= 20 for _ in range(50)), "overdue"

    assert load_config(None).auditor.periodic_interval_s == 0, "off by default"
    path = tmp_path / "om.toml"
    path.write_text("[auditor]\nperiodic_interval_s = 3600\njitter_fraction = 0.3\n")
    assert (load_config(path).auditor.periodic_interval_s,
            load_config(path).auditor.jitter_fraction) == (3600, 0.3)
    for bad in ("periodic_interval_s = -1", "jitter_fraction = 1.0", "rows_per_s = 0",
                "interval_s = 10"):
        path.write_text(f"[auditor]\n{bad}\n")
        with pytest.raises(ConfigError):
            load_config(path)


# ---------------------------------------------------------------- clusters ---

@pytest.mark.integration
@pytest.mark.slow
def test_followers_audit_periodically_the_leader_never(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Runs of ~4 s (about 250 row reads at 60 rows/s) due every 0.5 s: most are skipped.
    cluster = _start(tmp_path / "cluster", _auditor_toml(0.5, rows_per_s=60))
    try:
        leader, followers = _roles(cluster)
        # (a run may have begun before the keys were written: wait for one that saw them)
        nodes = _wait_for(cluster, "each follower ran over the keys and skipped some",
                          lambda ns: all(ns[f]["last"] is not None
                                         and ns[f]["last"]["rows_checked"] > KEYS
                                         and ns[f]["periodic"]["skipped"] >= 1
                                         for f in followers))
        assert cluster.wait_for_leader().node_id == leader, "leadership moved: rerun"
        assert nodes[leader]["periodic"]["runs"] == 0
        assert nodes[leader]["periodic"]["not_follower"] >= 1, "due on the leader, not started"
        assert nodes[leader]["last"] is None
        for follower in followers:
            assert _last_counts(nodes[follower]) == CLEAN, "a clean store reports clean"

        capsys.readouterr()
        status = main(["admin", "audit", "--last", "--dir", str(cluster.directory)])
        text = capsys.readouterr().out
        assert status == 0, text
        assert f"{leader} (LEADER): periodic audit every 0.5 s: no run yet" in text
        assert text.count(": clean") == 2, text

        # A follower that becomes leader mid-run stops it and starts no other.
        target = followers[0]
        _wait_for(cluster, f"{target} in a run", lambda ns: ns[target]["periodic"]["running"])
        assert main(["admin", "om", "transfer", "-n", target, "--dir",
                     str(cluster.directory)]) == 0
        nodes = _wait_for(cluster, f"{target} stopped its run",
                          lambda ns: ns[target]["periodic"]["stopped"] >= 1, timeout_s=10)
        assert not nodes[target]["periodic"]["running"]
        runs_as_leader = _runs(nodes[target])
        # ... while the old leader, now a follower, starts auditing.
        nodes = _wait_for(cluster, f"{leader} ran as a follower",
                          lambda ns: _runs(ns[leader]) >= 1)
        assert cluster.wait_for_leader().node_id == target
        assert _runs(nodes[target]) == runs_as_leader
        assert nodes[target]["periodic"]["not_follower"] >= 1
        assert not nodes[target]["periodic"]["running"]
        assert "periodic audit stopped half-way: this node leads now" in cluster.log_tail(
            target, 200)
    finally:
        om_cluster.down(cluster)


@pytest.mark.integration
@pytest.mark.slow
def test_a_violation_seeded_on_a_follower_is_reported_by_its_periodic_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _start(tmp_path / "cluster", _auditor_toml(1.0))
    try:
        leader, (victim, other) = _roles(cluster)
        _wait_for(cluster, "a clean run over the keys on each follower", lambda ns: all(
            _last_counts(ns[f]) == CLEAN and ns[f]["last"]["rows_checked"] > KEYS
            for f in (victim, other)))

        cluster.stop_node(victim)
        store = Store(cluster.config.data_dir / victim / "db")
        try:
            bucket = tables.bucket_key("vol", "bkt")
            info = om_pb2.BucketInfo.FromString(store.get(om_pb2.BUCKET, bucket) or b"")
            edited = info.used_bytes + 7
            info.used_bytes = edited
            batch = store.new_batch()
            store.batch_put(batch, om_pb2.BUCKET, bucket, info.SerializeToString())
            store.write(batch)
        finally:
            store.close()
        restarted = time.time()
        cluster.start_node(victim)
        harness.wait_converged(cluster)

        nodes = _wait_for(cluster, f"{victim}'s periodic run reports the edit", lambda ns: (
            ns[victim]["last"] is not None
            and ns[victim]["last"]["finished_at_s"] > restarted
            and ns[victim]["last"]["violations_total"] > 0))
        assert cluster.wait_for_leader().node_id == leader, "leadership moved: rerun"
        assert _last_counts(nodes[victim]) == {**CLEAN, auditor.BUCKET_USAGE: 1}
        assert _last_counts(nodes[other]) == CLEAN
        assert _runs(nodes[leader]) == 0
        assert nodes[leader]["last"] is None
        log = cluster.log_tail(victim, 300)
        assert (f"periodic audit violation bucket_usage: bucketTable /vol/bkt: used_bytes "
                f"{edited}") in log, "each violation logged in full"

        capsys.readouterr()
        status = main(["admin", "audit", "--last", "--json", "--dir", str(cluster.directory)])
        report = json.loads(capsys.readouterr().out)
        assert status == 1
        assert not report["clean"]
        (entry,) = [n for n in report["nodes"] if n["node_id"] == victim]
        assert entry["last"]["counts"][auditor.BUCKET_USAGE] == 1
        assert entry["role"] == "FOLLOWER"
    finally:
        om_cluster.down(cluster)
    # It reported; it fixed nothing. And its last result outlives the process.
    store = Store(cluster.config.data_dir / victim / "db")
    try:
        info = om_pb2.BucketInfo.FromString(
            store.get(om_pb2.BUCKET, tables.bucket_key("vol", "bkt")) or b"")
    finally:
        store.close()
    assert info.used_bytes == edited
    persisted = load_result(cluster.config.data_dir / victim)
    assert persisted is not None
    assert persisted.counts[auditor.BUCKET_USAGE] >= 1
    assert not (cluster.config.data_dir / leader / RESULT_FILE).exists()


@pytest.mark.integration
@pytest.mark.slow
def test_off_by_default_nothing_runs(tmp_path: Path) -> None:
    cluster = _start(tmp_path / "cluster")
    try:
        time.sleep(2.0)   # the schedule of an interval misread as 0 s would have fired
        for node_id, node in _periodic(cluster).items():
            assert node["periodic"] == {"interval_s": 0.0, "running": False, "runs": 0,
                                        "skipped": 0, "not_follower": 0, "stopped": 0,
                                        "failures": 0}, node_id
            assert node["last"] is None
    finally:
        om_cluster.down(cluster)
    for address in cluster.nodes:
        assert not (cluster.config.data_dir / address.id / RESULT_FILE).exists()
