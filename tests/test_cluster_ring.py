"""``cluster.toml`` kept true by membership changes (``om/cluster/ring.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from om import config as om_config
from om.cluster import lifecycle as om_cluster
from om.cluster import ring as cluster_ring
from om.config import ConfigError, NodeAddress


@pytest.fixture
def ring_file(tmp_path: Path) -> Path:
    return om_cluster.write_config(tmp_path, 3, 20_000, "leader",
                                   "\n[raft]\nelection_timeout_min_s = 0.4\n")


def test_a_learner_is_added_then_promoted(ring_file: Path) -> None:
    node = NodeAddress("om4", "127.0.0.1", 20_050, 20_060, 0)
    config = cluster_ring.add_node(ring_file, node, learner=True)
    assert config.nodes[-1] == NodeAddress("om4", "127.0.0.1", 20_050, 20_060, 0, learner=True)
    assert config.raft.election_timeout_min_s == 0.4, "the tables after the nodes are kept"
    promoted = cluster_ring.set_fields(ring_file, "om4", learner=False)
    assert promoted.nodes[-1] == node


def test_maintenance_fields_are_set_and_cleared(ring_file: Path) -> None:
    config = cluster_ring.set_fields(ring_file, "om2", maintenance=True,
                                     maintenance_until=1_900_000_000.5)
    om2 = next(n for n in config.nodes if n.id == "om2")
    assert (om2.maintenance, om2.maintenance_until) == (True, 1_900_000_000.5)
    cleared = cluster_ring.set_fields(ring_file, "om2", maintenance=False, maintenance_until=0)
    assert next(n for n in cleared.nodes if n.id == "om2") == NodeAddress(
        "om2", "127.0.0.1", 20_001, 20_011, 20_021)


def test_decommissioned_ids_never_come_back(ring_file: Path) -> None:
    cluster_ring.decommission(ring_file, "om3")
    config = cluster_ring.decommission(ring_file, "om2")
    assert [n.id for n in config.nodes] == ["om1"]
    assert config.decommissioned == ("om3", "om2")
    with pytest.raises(ConfigError, match="decommissioned"):
        om_config.load(ring_file, node_id="om3")


def test_an_edit_that_breaks_the_ring_is_not_kept(ring_file: Path) -> None:
    before = ring_file.read_text()
    clash = NodeAddress("om4", "127.0.0.1", 20_050, 20_050, 0)   # port = raft port
    with pytest.raises(ConfigError):
        cluster_ring.add_node(ring_file, clash, learner=True)
    with pytest.raises(ConfigError, match="no \\[\\[nodes\\]\\] block"):
        cluster_ring.set_fields(ring_file, "om9", maintenance=True)
    assert ring_file.read_text() == before
    assert not ring_file.with_name("cluster.toml.new").exists()
