"""Secure by default: what ``om cluster up`` writes, and how flagless tools (the locust
file) find a cluster's certificate."""

from __future__ import annotations

from pathlib import Path

import pytest

from om import config as om_config
from om.cli.common import environment_tls
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError

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
