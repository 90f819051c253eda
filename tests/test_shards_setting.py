"""The ``shards`` setting, the shard ports and the bucket -> shard rule (docs/SHARDS.md).

Red cases: a routing rule that changed would send an existing bucket's requests to a
shard that does not hold it (the pinned values); a rule that ignores the bucket puts
every bucket on one shard; a shard port that collides with the Raft or HTTP ports of
``om cluster up``'s layout; ``shards`` above 1 accepted where no Raft process merges
(the in-thread adapter), where the old flow runs, or on a store made below
MERGED_ENTRIES.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from om.config import (
    MERGED_ENTRIES_LAYOUT,
    SHARDS_MAX,
    ConfigError,
    NodeAddress,
    Raft,
    ServerConfig,
    Upgrade,
    load,
)
from om.executor.admin import upgrade
from om.protocol.shard_routing import shard_of


def test_a_buckets_shard_is_fixed_and_spread() -> None:
    assert [shard_of("vol1", f"bucket{i}", 4) for i in range(8)] == [0, 2, 0, 2, 1, 3, 1, 3]
    assert shard_of("vol1", "bucket0", 1) == 0
    for shards in (2, 4, SHARDS_MAX):
        counts = Counter(shard_of("v", f"b{i}", shards) for i in range(4000))
        assert sorted(counts) == list(range(shards))
        assert min(counts.values()) > 4000 / shards * 0.8, "buckets spread over the shards"
    assert shard_of("vol2", "bucket0", 4) != shard_of("vol1", "bucket0", 4), "the volume counts"


def test_shard_ports_sit_above_the_clusters_raft_and_http_ports() -> None:
    nodes = om_cluster.node_addresses(9, 20_000)
    taken = {port for node in nodes for port in node.ports}
    shard_ports = [node.shard_port(k) for node in nodes for k in range(1, SHARDS_MAX)]
    assert len(set(shard_ports)) == len(shard_ports)
    assert not taken & set(shard_ports)
    assert nodes[0].shard_port(0) == nodes[0].port
    assert nodes[2].shard_port(3) == 20_000 + 2 + 20 + 30


def _config(**values: object) -> ServerConfig:
    return ServerConfig(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("shards", [0, -1, SHARDS_MAX + 1])
def test_shards_out_of_range_is_refused(shards: int) -> None:
    with pytest.raises(ConfigError, match=f"shards must be 1 to {SHARDS_MAX}"):
        _config(shards=shards).validate()


def test_several_shards_need_the_raft_process_and_the_leader_flow() -> None:
    with pytest.raises(ConfigError, match=r"\[raft\] separate_process = true"):
        _config(shards=2, raft=Raft(separate_process=False)).validate()
    with pytest.raises(ConfigError, match='execution = "leader"'):
        _config(shards=2, execution="switchable").validate()
    high = (NodeAddress("om1", port=65_500, raft_port=65_510, http_port=65_520),)
    with pytest.raises(ConfigError, match="shard ports"):
        _config(shards=4, nodes=high).validate()
    with pytest.raises(ConfigError, match="retires the front workers"):
        _config(shards=2, workers=2).validate()
    assert _config(shards=2).validate().shards == 2, "with the Raft process and the leader flow"


@pytest.mark.parametrize("layout", [0, MERGED_ENTRIES_LAYOUT - 1])
def test_several_shards_need_a_layout_with_merged_entries(layout: int) -> None:
    """A store made below MERGED_ENTRIES seals "B" until finalized, and a shard above 0
    may not (a "B" goes whole to every shard): refused at load, not asserted later."""
    assert upgrade.MERGED_ENTRIES.version == MERGED_ENTRIES_LAYOUT, "config's copy"
    with pytest.raises(ConfigError, match=f"init_layout_version {layout} is below"):
        _config(shards=2, upgrade=Upgrade(init_layout_version=layout)).validate()
    _config(upgrade=Upgrade(init_layout_version=layout)).validate()   # one shard: B is fine


def test_a_shard_process_runs_the_nodes_configuration_in_a_directory_of_its_own(
        tmp_path: Path) -> None:
    """Shard k's files (store, OM snapshot checkpoints, markers, audit log, trace) are
    its own; it proposes no verify entries; the TOML may not name a shard."""
    node = _config(shards=3, data_dir=tmp_path, workers=0,
                   trace_path=tmp_path / "trace.jsonl")
    shard = node.for_shard(2)
    assert shard.serving_shard == 2
    assert node.serving_shard == 0
    assert shard.node_data_dir == node.node_data_dir / "shard-2"
    assert shard.audit_path.parent == shard.node_data_dir
    assert shard.trace_path == tmp_path / "trace.jsonl.shard-2"
    assert shard.verify.interval_s == 0
    assert node.verify.interval_s > 0
    assert node.workers_count(cores=64) == shard.workers_count(cores=64) == 1, "no fronts"
    path = tmp_path / "om.toml"
    path.write_text("serving_shard = 1\n")
    with pytest.raises(ConfigError, match="serving_shard"):
        load(path)


def test_shards_is_read_from_the_toml(tmp_path: Path) -> None:
    path = tmp_path / "om.toml"
    path.write_text("shards = 1\n")
    assert load(path).shards == 1
    path.write_text("shards = 3\n[raft]\nseparate_process = false\n")
    with pytest.raises(ConfigError, match="separate_process"):
        load(path)
    path.write_text("shards = 3\n")
    assert load(path).shards == 3


def test_om_cluster_up_writes_the_shards_it_is_given(tmp_path: Path) -> None:
    """``om cluster up --shards N`` (``write_config``): ``shards = N`` in cluster.toml,
    none with one shard (today's file, byte for byte)."""
    path = om_cluster.write_config(tmp_path / "four", 3, 20_000, "leader", secure=False,
                                   shards=4)
    assert load(path).shards == 4
    one = om_cluster.write_config(tmp_path / "one", 3, 20_000, "leader", secure=False)
    assert "shards" not in one.read_text()
