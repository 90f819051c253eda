"""The flow switch on real 3-node clusters of ``execution = "switchable"`` OMs (127.0.0.1).

* The operator's commands: ``om admin om flow set`` moves types while every node
  reports the same selection (``flow status``); a retry of a write the old flow
  accepted gets its stored answer from the leader flow after its type moved, on a new
  leader too (from the reply rows), and the other way round; at the end every
  replica holds the same bytes.
* The way in: a replicated cluster restarted one OM at a time as switchable, under
  writes, then a type switched.
* Leaving for the leader flow: every type switched, prepare, every node restarted
  with ``execution = "leader"``, cancel: data, stored answers and ids go on.
* Under load: ``om chaos`` with the ``flow_switch`` nemesis (two switches to each
  leader kill, one a second) for 20 s: the existing checkers judge the history (nothing
  lost, nothing applied twice, reads linearizable, exactly-once retries, every
  replica's Merkle trees and tables equal). Red without the shared locks: the
  nemesis's bucket rewrites, run in the other flow than the commits, put usage back
  (the exactly-once checker's ``lost``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.chaos.nemesis import FLOW_SWITCH
from om.chaos.runner import ChaosConfig, run
from om.chaos.workload import WorkloadConfig
from om.cli import main
from om.cli.chaos import ops_budget
from om.client import requests as build
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
V, B = "vol", "bkt"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path / "switchable", execution="switchable")
    try:
        yield started
    finally:
        om_cluster.down(started)


def flow(capsys: pytest.CaptureFixture[str], cluster: om_cluster.Cluster, *args: str
         ) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["admin", "om", "flow", *args, "--dir", str(cluster.directory)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_types_move_both_ways_and_retries_get_their_stored_answers(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = flow(capsys, cluster, "status")
    assert code == 0, out
    assert out.count("leader flow: (none)") == 3, out
    with harness.client(cluster) as om:
        om.create_volume(V)
        om.create_bucket(V, B)
        session = om.call(build.create_key(V, B, "k1", 10)).create_key.client_session_id
        old_commit = build.commit_key(V, B, "k1", session, 10)
        first = om.call_raw(old_commit)                    # the old flow
        assert first.status == om_pb2.OK
        code, out = flow(capsys, cluster, "set", "CreateKey,CommitKey")
        assert code == 0, out
        assert "leader flow: (none) -> CommitKey,CreateKey" in out
        assert out.count("leader flow: CommitKey,CreateKey (applied index") == 3, out
        assert "every OM applied the switch" in out
        assert om.call_raw(old_commit).SerializeToString() == first.SerializeToString()
        session = om.call(build.create_key(V, B, "k2", 20)).create_key.client_session_id
        new_commit = build.commit_key(V, B, "k2", session, 20)
        second = om.call_raw(new_commit)                   # the leader flow
        assert second.status == om_pb2.OK
        cluster.kill_node(harness.leader_id(cluster))      # memory gone: the reply rows
        code, out = flow(capsys, cluster, "set", "none", "--wait", "2")
        assert code == 1, "a dead OM never reports it"
        assert "leader flow: CommitKey,CreateKey -> (none)" in out
        assert om.call_raw(old_commit).SerializeToString() == first.SerializeToString()
        assert om.call_raw(new_commit).SerializeToString() == second.SerializeToString()
        reused = build.commit_key(V, B, "k2", session, 99)
        reused.call_id = new_commit.call_id
        assert om.call_raw(reused).status == om_pb2.INVALID_REQUEST, "another request"
        bucket = om.info_bucket(V, B)
        assert (bucket.used_bytes, bucket.used_namespace) == (3 * 30, 2), "each charged once"
    for node in cluster.nodes:
        if cluster.pid(node.id) is None:
            cluster.start_node(node.id)
    code, out = flow(capsys, cluster, "set", "bogus")
    assert code == 2
    assert "no request type 'bogus'" in out
    code, out = flow(capsys, cluster, "set", "LookupKey")
    assert code == 1
    assert "INVALID_REQUEST" in out
    harness.wait_converged(cluster)
    digests = harness.digests_after_stop(cluster)
    assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests


@pytest.mark.slow
def test_the_switch_under_load_loses_duplicates_and_re_executes_nothing(
        tmp_path: Path) -> None:
    duration = 20.0
    faults = (FLOW_SWITCH, FLOW_SWITCH, "kill_leader")    # two switches to a kill
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=duration,
                             execution="switchable", faults=faults, fault_interval_s=1.0,
                             fault_hold_s=1.5,
                             workload=WorkloadConfig(ops_per_worker_max=ops_budget(duration))))
    assert result["violations"] == []
    events = [json.loads(line) for line in
              (tmp_path / "chaos" / "switchable" / "traces" / "faults.jsonl").read_text()
              .splitlines()]
    switches = [e for e in events if e["action"] == FLOW_SWITCH and e["outcome"] == "done"]
    assert len(switches) >= 6, events
    assert all(e["touched"] == "OK,OK" for e in switches), "each bucket rewritten"
    assert "none" in {e["types"] for e in switches}, "every type back to the old flow"
    assert len({e["types"] for e in switches}) >= 4
    assert result["retries"] > 0, "no retry was exercised: the run proves nothing"
    assert result["ops"]["ok"] > 300
    assert result["verify"]["result"] == "clean"


def test_a_switched_cluster_leaves_for_the_leader_flow_through_prepare(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """Every type switched, prepare (every node compacts its log: no old-flow entry is
    left to replay), every node restarted with execution = "leader", cancel: the
    data, the old flow's answers and the ids go on."""
    with harness.client(cluster) as om:
        om.create_volume(V)
        om.create_bucket(V, B)
        session = om.call(build.create_key(V, B, "old", 10)).create_key.client_session_id
        old_commit = build.commit_key(V, B, "old", session, 10)
        first = om.call_raw(old_commit)                    # the old flow
        assert first.status == om_pb2.OK
        code, out = flow(capsys, cluster, "set", "all")
        assert code == 0, out
        session = om.call(build.create_key(V, B, "new", 20)).create_key.client_session_id
        assert om.call_raw(build.commit_key(V, B, "new", session, 20)).status == om_pb2.OK
        capsys.readouterr()
        assert main(["admin", "om", "prepare", "--dir", str(cluster.directory),
                     "--wait", "30"]) == 0, capsys.readouterr()
        for node in cluster.nodes:
            cluster.stop_node(node.id)
        text = cluster.config_path.read_text()
        assert 'execution = "switchable"' in text
        cluster.config_path.write_text(text.replace('execution = "switchable"',
                                                    'execution = "leader"'))
        for node in cluster.nodes:
            cluster.start_node(node.id)
        cluster.wait_ready(60)
        assert {i.execution for i in cluster.node_infos()} == {"leader"}
        assert main(["admin", "om", "cancelprepare", "--dir", str(cluster.directory)]) == 0
        assert om.call_raw(old_commit).SerializeToString() == first.SerializeToString()
        session = om.call(build.create_key(V, B, "after", 30)).create_key.client_session_id
        assert om.call_raw(build.commit_key(V, B, "after", session, 30)).status == om_pb2.OK
        keys = om.list_keys(V, B).key_info
        assert [k.key_name for k in keys] == ["after", "new", "old"]
        assert len({k.object_id for k in keys}) == 3
        assert om.info_bucket(V, B).used_bytes == 3 * 60
    harness.wait_converged(cluster)
    digests = harness.digests_after_stop(cluster)
    assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests


def test_a_replicated_cluster_becomes_switchable_by_a_rolling_restart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The way in: a cluster of the old flow, each OM restarted in turn with
    execution = "switchable" while writes go on (both kinds of OM in one ring
    meanwhile), then a type switched: a write the old flow answered before the
    restarts is answered again from its reply row, and every replica is the same."""
    cluster = harness.start(tmp_path / "replicated", execution="replicated")
    try:
        with harness.client(cluster) as om:
            om.create_volume(V)
            om.create_bucket(V, B)
            session = om.call(build.create_key(V, B, "k0", 10)).create_key.client_session_id
            old_commit = build.commit_key(V, B, "k0", session, 10)
            first = om.call_raw(old_commit)
            assert first.status == om_pb2.OK
            text = cluster.config_path.read_text()
            cluster.config_path.write_text(text.replace('execution = "replicated"',
                                                        'execution = "switchable"'))
            for n, node in enumerate(cluster.nodes, 1):
                cluster.stop_node(node.id)
                cluster.start_node(node.id)
                cluster.wait_ready(60)
                session = om.call(build.create_key(V, B, f"k{n}", 10)
                                  ).create_key.client_session_id
                assert om.call_raw(build.commit_key(V, B, f"k{n}", session, 10)).status \
                    == om_pb2.OK
            assert {i.execution for i in cluster.node_infos()} == {"switchable"}
            code, out = flow(capsys, cluster, "set", "CommitKey")
            assert code == 0, out
            assert om.call_raw(old_commit).SerializeToString() == first.SerializeToString()
            assert [k.key_name for k in om.list_keys(V, B).key_info] == ["k0", "k1", "k2", "k3"]
            assert om.info_bucket(V, B).used_bytes == 4 * 30
        harness.wait_converged(cluster)
        digests = harness.digests_after_stop(cluster)
        assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests
    finally:
        om_cluster.down(cluster)
