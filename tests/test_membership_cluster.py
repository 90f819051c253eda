"""``om admin om add | decommission | maintenance`` on a real cluster: 3 -> 4 through a
learner, the new node serving what was written before it joined; back to 3; a node
serviced while writes go on; every refusal changes nothing. The tests run in order
on one ring."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from om import config as om_config
from om.cli import main
from om.client import OMClient
from om.cluster import lifecycle as om_cluster
from om.cluster import membership
from om.config import ConfigError
from tests import cluster_harness as harness

# one ring through a story of joins, refusals and removals (40 s on two cores)
pytestmark = [pytest.mark.integration, pytest.mark.slow]
BEFORE = 50   # keys written before om4 joins


@pytest.fixture(scope="module")
def ring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path_factory.mktemp("membership") / "cluster")
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(BEFORE):
            om.put_key("vol", "bkt", f"before-{i:03d}", 10)
    yield started
    om_cluster.down(started)


def _admin(ring: om_cluster.Cluster, *args: str) -> int:
    return main(["admin", "om", *args, "--dir", str(ring.directory)])


def _roles(ring: om_cluster.Cluster,
           capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    capsys.readouterr()
    main(["admin", "roles", "--dir", str(ring.directory), "--json"])
    return {i["node_id"]: i for i in json.loads(capsys.readouterr().out)}


def _leader_matches(ring: om_cluster.Cluster,
                    capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, int]]:
    """The leader and its match indexes, once it has reported them (about once a second
    from its Raft process)."""
    deadline = time.monotonic() + 10
    while True:
        leaders = [r for r in _roles(ring, capsys).values() if r["role"] == "LEADER"]
        matches = leaders[0].get("match_index", {}) if leaders else {}
        if matches or time.monotonic() > deadline:
            assert leaders, "no leader"
            return leaders[0]["node_id"], matches
        time.sleep(0.2)


def _ring_state(ring: om_cluster.Cluster) -> tuple[object, ...]:
    config = ring.config
    return config.nodes, config.decommissioned


def test_a_node_joins_as_a_learner_then_votes_and_serves_old_data(
        ring: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    base = om_cluster.free_port_base(1)
    status = _admin(ring, "add", "--node-id", "om4", "--address", f"127.0.0.1:{base}",
                    "--raft-address", f"127.0.0.1:{base + om_cluster.RAFT_PORT_OFFSET}")
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "started as a learner" in out.out
    assert "is a voter" in out.out
    roles = _roles(ring, capsys)
    assert {r["membership"] for r in roles.values()} == {"VOTER"}
    assert set(roles) == {"om1", "om2", "om3", "om4"}
    assert "om4" in _leader_matches(ring, capsys)[1], "the leader replicates to om4"
    om4 = next(n for n in ring.nodes if n.id == "om4")
    with harness.client(ring) as om:
        om.put_key("vol", "bkt", "after-join", 10)
    ring.wait_converged(timeout_s=30)
    with OMClient([om4.address], read_mode="local", tls=ring.client_tls()) as local:
        keys = harness.all_keys(local)
    assert {f"before-{i:03d}" for i in range(BEFORE)} | {"after-join"} <= set(keys)


def test_refusals_change_nothing(ring: om_cluster.Cluster,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    before = _ring_state(ring)
    base = om_cluster.free_port_base(1)
    cases = [
        (("decommission", "--node-id", "om9"), "no OM 'om9'"),
        (("add", "--node-id", "om2", "--address", f"127.0.0.1:{base}",
          "--raft-address", f"127.0.0.1:{base + 10}"), "already a member"),
        (("maintenance", "end", "--node-id", "om2"), "not in maintenance"),
    ]
    for args, reason in cases:
        capsys.readouterr()
        assert _admin(ring, *args) == 1, args
        assert reason in capsys.readouterr().err
        assert _ring_state(ring) == before


def test_a_removal_that_would_lose_quorum_is_refused(
        ring: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """4 voters, two of them down: removing a third would leave 1 of 3 up."""
    leader = harness.leader_id(ring)
    down = [n.id for n in ring.nodes if n.id != leader][:2]
    before = _ring_state(ring)
    for node_id in down:
        ring.stop_node(node_id)
    try:
        target = next(n.id for n in ring.nodes if n.id not in (*down, leader))
        capsys.readouterr()
        assert _admin(ring, "decommission", "--node-id", target) == 1
        assert "need 2 up" in capsys.readouterr().err
        assert _ring_state(ring) == before
    finally:
        for node_id in down:
            ring.start_node(node_id)
    ring.wait_converged(timeout_s=60)


def test_decommission_back_to_three(ring: om_cluster.Cluster,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _admin(ring, "decommission", "--node-id", "om4") == 0, capsys.readouterr().err
    assert ring.config.decommissioned == ("om4",)
    assert [n.id for n in ring.nodes] == ["om1", "om2", "om3"]
    roles = _roles(ring, capsys)
    assert roles["om4"]["membership"] == "DECOMMISSIONED"
    deadline = time.monotonic() + 10      # the leader reports its matches once a second
    while True:
        leader_id, matches = _leader_matches(ring, capsys)
        if set(matches) == {"om1", "om2", "om3"} - {leader_id} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert set(matches) == {"om1", "om2", "om3"} - {leader_id}, "om4 left the configuration"
    with pytest.raises(ConfigError, match="decommissioned"):
        om_config.load(ring.config_path, node_id="om4")
    with harness.client(ring) as om:
        om.put_key("vol", "bkt", "after-decommission", 10)


def test_maintenance_while_writes_continue(ring: om_cluster.Cluster,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    load = harness.WriteLoad(ring)
    load.start()
    try:
        target = harness.leader_id(ring)          # the leader itself: it hands over first
        assert _admin(ring, "maintenance", "start", "--node-id", target, "--for", "1h") == 0
        assert "in maintenance" in capsys.readouterr().out
        assert harness.leader_id(ring) != target
        assert _roles(ring, capsys)[target]["membership"] == "MAINTENANCE"
        second = next(n.id for n in ring.nodes if n.id != target)
        before = _ring_state(ring)
        assert _admin(ring, "maintenance", "start", "--node-id", second) == 1
        assert "below the quorum" in capsys.readouterr().err
        assert _ring_state(ring) == before
        during = load.count()
        with harness.client(ring) as om:
            om.put_key("vol", "bkt", "during-maintenance", 10)
        assert _admin(ring, "maintenance", "end", "--node-id", target) == 0
        assert "caught up" in capsys.readouterr().out
    finally:
        load.stop()
    assert load.count() > during, "writes went on during the maintenance"
    ring.wait_converged(timeout_s=60)
    with harness.client(ring) as om:
        stored = harness.all_keys(om)
    lost = {k for k, oid in load.acknowledged.items() if stored.get(k) is None
            or stored[k].object_id != oid}
    assert not lost
    roles = _roles(ring, capsys)
    assert {r["membership"] for r in roles.values() if r["node_id"] != "om4"} == {"VOTER"}


def test_a_timed_out_add_reports_its_real_outcome_and_the_node_serves_and_votes(
        ring: om_cluster.Cluster, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool starts om5 itself; a paused follower holds the addition's commit past
    the client's 1.5 s answer timeout, the tool asks again with the same request id and
    reports the leader's recorded outcome. Then om5 counts: with one original voter
    down, 3 of the 4 acknowledge a write only with om5, and om5 serves it locally.
    Decommissioning it (again past a tiny answer timeout) stops its process."""
    leader = harness.leader_id(ring)
    # not the first address, which the tool's client tries first: the first request
    # reaches the leader (directly or redirected) and records its id there
    paused = [n.id for n in ring.nodes[1:] if n.id != leader][-1]
    ask = membership._ask_leader

    def ask_with_a_paused_follower(*args: Any) -> Any:
        ring.signal_node(paused, signal.SIGSTOP)
        resume = threading.Timer(4.0, ring.signal_node, (paused, signal.SIGCONT))
        resume.start()
        try:
            return ask(*args)
        finally:
            resume.join()

    monkeypatch.setattr(membership, "_ask_leader", ask_with_a_paused_follower)
    base = om_cluster.free_port_base(1)
    capsys.readouterr()
    status = _admin(ring, "add", "--node-id", "om5", "--address", f"127.0.0.1:{base}",
                    "--raft-address", f"127.0.0.1:{base + om_cluster.RAFT_PORT_OFFSET}",
                    "--answer-timeout", "1.5")
    monkeypatch.setattr(membership, "_ask_leader", ask)
    out = capsys.readouterr()
    assert status == 0, out.err
    assert f"log {ring.directory / 'om5'}.log" in out.out
    assert "no answer within 1.5 s" in out.out
    assert "asking the leader again with request id" in out.out
    assert "the addition of OM:om5 was committed" in out.out
    assert "(recorded outcome)" in out.out, "the leader answered the first request's id"
    assert "OM:om5 is a voter" in out.out
    assert ring.pid("om5") is not None
    ring.wait_converged(timeout_s=60)
    down = next(n.id for n in ring.nodes if n.id not in (harness.leader_id(ring), "om5"))
    ring.stop_node(down)
    try:
        with harness.client(ring) as om:
            om.put_key("vol", "bkt", "needs-om5", 10)
        om5 = next(n for n in ring.nodes if n.id == "om5")
        with OMClient([om5.address], read_mode="local", tls=ring.client_tls()) as local:
            assert "needs-om5" in harness.all_keys(local)
    finally:
        ring.start_node(down)
    ring.wait_converged(timeout_s=60)
    capsys.readouterr()
    assert _admin(ring, "decommission", "--node-id", "om5", "--answer-timeout", "0.001") == 0
    out = capsys.readouterr()
    assert "the removal of OM:om5 was committed" in out.out, out
    assert ring.pid("om5") is None, "decommission stopped the process it started"
    assert [n.id for n in ring.nodes] == ["om1", "om2", "om3"]


def test_add_given_only_addresses_says_what_to_start(
        ring: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    before = _ring_state(ring)
    capsys.readouterr()
    assert main(["admin", "om", "add", "--om", ",".join(ring.addresses), "--node-id", "om6",
                 "--address", "127.0.0.1:1", "--raft-address", "127.0.0.1:2"]) == 1
    err = capsys.readouterr().err
    assert "cannot start OM:om6; nothing was changed" in err
    assert "om serve --config CONFIG --node-id om6" in err
    assert _ring_state(ring) == before


def test_every_voter_holds_the_same_data(ring: om_cluster.Cluster) -> None:
    digests = harness.digests_after_stop(ring)
    assert set(digests) == {"om1", "om2", "om3"}
    assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1
