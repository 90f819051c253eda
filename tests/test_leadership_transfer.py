"""``om admin om transfer`` on a real 3-node cluster: aimed, random, refused; and the
membership and match-index columns of ``om admin roles``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cli import main
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
TRANSFER_BOUND_S = 10.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path_factory.mktemp("transfer") / "cluster")
    with harness.client(started) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
    yield started
    om_cluster.down(started)


def _leader_and_term(cluster: om_cluster.Cluster) -> tuple[str, int]:
    leader = cluster.wait_for_leader()
    return leader.node_id, leader.term


def _transfer(cluster: om_cluster.Cluster, *how: str) -> int:
    return main(["admin", "om", "transfer", "--config", str(cluster.config_path), *how])


def test_transfer_to_a_named_follower_under_load_loses_no_write(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    old, term = _leader_and_term(cluster)
    target = next(n.id for n in cluster.nodes if n.id != old)
    load = harness.WriteLoad(cluster)
    load.start()
    time.sleep(0.5)
    started = time.monotonic()
    status = _transfer(cluster, "-n", target)
    took = time.monotonic() - started
    time.sleep(0.5)
    load.stop()
    assert status == 0, capsys.readouterr().err
    assert took < TRANSFER_BOUND_S
    new, new_term = _leader_and_term(cluster)
    assert (new, new_term > term) == (target, True)
    with harness.client(cluster) as om:
        stored = harness.all_keys(om)
    lost = {k for k, object_id in load.acknowledged.items()
            if k not in stored or stored[k].object_id != object_id}
    assert load.count() > 0
    assert not lost
    assert target in capsys.readouterr().out


def test_transfer_to_a_random_follower(cluster: om_cluster.Cluster) -> None:
    old, _ = _leader_and_term(cluster)
    assert _transfer(cluster, "-r") == 0
    assert _leader_and_term(cluster)[0] != old


@pytest.mark.parametrize("whom", ["om9", "leader"])
def test_refusals_change_nothing(cluster: om_cluster.Cluster, whom: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    before = _leader_and_term(cluster)
    target = before[0] if whom == "leader" else whom
    assert _transfer(cluster, "-n", target) == 1
    status = "TRANSFER_REFUSED" if whom == "leader" else "INVALID_REQUEST"
    assert status in capsys.readouterr().err
    time.sleep(0.3)
    assert _leader_and_term(cluster) == before


def test_refusal_status_on_the_wire(cluster: om_cluster.Cluster) -> None:
    leader = cluster.wait_for_leader()
    with harness.client(cluster) as om:
        response = om.call_raw(om_pb2.OMRequest(
            cmd_type=om_pb2.TransferLeadership,
            transfer_leadership=om_pb2.TransferLeadershipRequest(node_id=leader.node_id)))
    assert response.status == om_pb2.TRANSFER_REFUSED
    assert "leader already" in response.message


def test_roles_show_membership_and_the_leaders_match_indexes(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    leader = cluster.wait_for_leader()
    assert main(["admin", "roles", "--config", str(cluster.config_path), "--json"]) == 0
    infos = json.loads(capsys.readouterr().out)
    assert {i["membership"] for i in infos} == {"VOTER"}
    matches = next(i for i in infos if i["node_id"] == leader.node_id)["match_index"]
    assert set(matches) == {n.id for n in cluster.nodes} - {leader.node_id}
    assert main(["admin", "roles", "--config", str(cluster.config_path)]) == 0
    table = capsys.readouterr().out
    assert "MEMBERSHIP" in table
    assert "MATCH_INDEX" in table


def test_transfer_with_raft_in_the_serving_process(tmp_path: Path) -> None:
    """The in-process replicator (``separate_process = false``) answers the same way."""
    started = harness.start(tmp_path / "cluster", "separate_process = false\n")
    try:
        old, term = _leader_and_term(started)
        target = next(n.id for n in started.nodes if n.id != old)
        assert _transfer(started, "-n", target) == 0
        assert _leader_and_term(started)[0] == target
        assert _leader_and_term(started)[1] > term
    finally:
        om_cluster.down(started)
