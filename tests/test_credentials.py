"""Secure by default: what ``om cluster up`` writes, and how the tools find a cluster's
certificate: flagless ones (the locust file) and those given addresses, from any of the
cluster's current members."""

from __future__ import annotations

from pathlib import Path

import pytest

from om import config as om_config
from om.cluster import lifecycle as om_cluster
from om.cluster import ring as cluster_ring
from om.cluster.credentials import environment_tls
from om.config import ConfigError, NodeAddress

ADDRESSES = ["127.0.0.1:20000"]


def test_a_cluster_is_secure_by_default(tmp_path: Path) -> None:
    path = om_cluster.write_config(tmp_path, 3, 20_000, "leader")
    config = om_config.load(path)
    assert config.raft.secret
    assert config.tls.enabled
    tls = om_cluster.client_tls(config)
    assert tls is not None
    assert tls.cert_file.exists()
    assert tls.key_file.stat().st_mode & 0o077 == 0


def test_insecure_turns_off_both_and_no_tls_only_tls(tmp_path: Path) -> None:
    insecure = om_config.load(om_cluster.write_config(tmp_path / "a", 3, 20_000, "leader",
                                                      secure=False))
    assert not insecure.raft.secret
    assert not insecure.tls.enabled
    no_tls = om_config.load(om_cluster.write_config(tmp_path / "b", 3, 20_000, "leader",
                                                    tls=False))
    assert no_tls.raft.secret
    assert not no_tls.tls.enabled


def test_environment_names_the_certificate_or_the_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OM_CERT", "OM_KEY", "OM_CA", "OM_CLUSTER_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(om_cluster, "LAST_CLUSTER_FILE", tmp_path / "none")
    assert environment_tls(ADDRESSES) is None
    om_cluster.write_config(tmp_path / "c", 3, 20_000, "leader")
    monkeypatch.setenv("OM_CLUSTER_DIR", str(tmp_path / "c"))
    found = environment_tls(ADDRESSES)
    assert found == om_cluster.Cluster(tmp_path / "c").client_tls()
    assert found is not None
    monkeypatch.setenv("OM_CERT", str(found.cert_file))
    with pytest.raises(ConfigError, match="go together"):
        environment_tls(ADDRESSES)
    monkeypatch.setenv("OM_KEY", str(found.key_file))
    monkeypatch.setenv("OM_CA", str(found.ca_file))
    monkeypatch.delenv("OM_CLUSTER_DIR")
    assert environment_tls(ADDRESSES) == found


def test_the_last_cluster_is_found_when_it_serves_the_addresses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OM_CERT", "OM_KEY", "OM_CA", "OM_CLUSTER_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(om_cluster, "LAST_CLUSTER_FILE", tmp_path / "last")
    om_cluster.write_config(tmp_path / "c", 3, 20_000, "leader")
    om_cluster.remember(tmp_path / "c")
    assert environment_tls(ADDRESSES) == om_cluster.Cluster(tmp_path / "c").client_tls()
    assert environment_tls(["127.0.0.1:9"]) is None


def test_a_cluster_is_recognised_from_any_of_its_current_members(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OM_CERT", "OM_KEY", "OM_CA", "OM_CLUSTER_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(om_cluster, "LAST_CLUSTER_FILE", tmp_path / "last")
    first, second = tmp_path / "first", tmp_path / "second"
    om_cluster.write_config(first, 3, 20_000, "leader")
    om_cluster.remember(first)
    om_cluster.write_config(second, 3, 20_100, "leader")
    om_cluster.remember(second)
    om_cluster.remember(first)                   # again: first, once
    assert [c.directory for c in om_cluster.known()] == [first.resolve(), second.resolve()]
    tls_of = {d: om_cluster.Cluster(d).client_tls() for d in (first, second)}
    # the earlier cluster too, and from one address among others that are not its
    assert environment_tls(["127.0.0.1:20101"]) == tls_of[second]
    assert environment_tls(["127.0.0.1:9", "127.0.0.1:20102"]) == tls_of[second]
    # the ring follows om admin om add / decommission (cluster.toml)
    config_path = first / "cluster.toml"
    cluster_ring.add_node(config_path, NodeAddress("om4", "127.0.0.1", 20_003, 20_013, 20_023),
                          learner=False)
    assert environment_tls(["127.0.0.1:20003"]) == tls_of[first]
    cluster_ring.decommission(config_path, "om1")
    assert environment_tls(["127.0.0.1:20000"]) is None
    # a remembered directory that is gone is skipped
    (second / "cluster.toml").unlink()
    assert environment_tls(["127.0.0.1:20101"]) is None
    assert environment_tls(["127.0.0.1:20001"]) == tls_of[first]


def test_the_remembered_clusters_are_bounded(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(om_cluster, "LAST_CLUSTER_FILE", tmp_path / "last")
    (tmp_path / "last").write_text(f"{tmp_path / 'old'}\n")    # one line, as before
    assert om_cluster.last().directory == tmp_path / "old"
    for n in range(om_cluster.KNOWN_CLUSTERS_MAX + 5):
        om_cluster.remember(tmp_path / f"c{n}")
    clusters = om_cluster.known()
    assert len(clusters) == om_cluster.KNOWN_CLUSTERS_MAX
    assert clusters[0].directory == (tmp_path / f"c{om_cluster.KNOWN_CLUSTERS_MAX + 4}")
