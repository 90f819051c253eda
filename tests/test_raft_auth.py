"""Raft peers authenticate with the cluster secret: an impostor that reaches every Raft
port, claims to be a member and sends garbage and forged votes changes nothing, while
the same forged vote deposes the leader of a cluster started ``--insecure`` (the red
case that shows the attack is real)."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest

from om import config as om_config
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError, read_secret
from om.consensus.pysyncobj.transport import encode_frame
from om.protocol import om_pb2
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
FORGED_TERM = 1_000_000


def frame(message: object) -> bytes:
    """One Raft frame as a peer without the secret would send it."""
    body = encode_frame(message, compress=False)
    return len(body).to_bytes(4, "little", signed=True) + body


def impostor(cluster: om_cluster.Cluster) -> None:
    """Connects to every Raft port as each member, sends garbage and forged votes."""
    forged = {"type": "request_vote", "term": FORGED_TERM,
              "last_log_index": 10**9, "last_log_term": FORGED_TERM}
    for target in cluster.nodes:
        for claimed in cluster.nodes:
            payloads = (os.urandom(512), frame(claimed.raft_address) + frame(forged),
                        frame(os.urandom(32)) + frame(claimed.raft_address) + frame(forged))
            for payload in payloads:
                try:
                    with socket.create_connection(("127.0.0.1", target.raft_port), 2) as peer:
                        peer.sendall(payload)
                        time.sleep(0.05)
                except OSError:
                    pass   # dropped by the node: what it should do


def terms(cluster: om_cluster.Cluster) -> set[int]:
    return {i.term for i in cluster.node_infos() if i.role != "UNREACHABLE"}


def write_some(cluster: om_cluster.Cluster, volume: str, keys: int) -> None:
    with harness.client(cluster) as om:
        om.create_volume(volume)
        om.create_bucket(volume, "bkt")
        for i in range(keys):
            om.put_key(volume, "bkt", f"k{i}", 1)


def test_an_impostor_without_the_secret_changes_nothing(tmp_path: Path) -> None:
    cluster = harness.start(tmp_path / "cluster")
    try:
        secret = tmp_path / "cluster" / om_cluster.SECRET_FILE
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert "raft=authenticated" in (tmp_path / "cluster" / "om1.log").read_text()
        leader = harness.leader_id(cluster)
        write_some(cluster, "before", 5)
        term_before = terms(cluster)
        impostor(cluster)
        write_some(cluster, "after", 20)
        assert harness.leader_id(cluster) == leader
        assert terms(cluster) == term_before
        assert max(terms(cluster)) < FORGED_TERM
    finally:
        om_cluster.down(cluster)


def test_the_same_impostor_deposes_the_leader_of_an_insecure_cluster(tmp_path: Path) -> None:
    cluster = om_cluster.up(tmp_path / "cluster", 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT, timeout_s=60, remember_it=False, secure=False)
    try:
        assert "raft=UNAUTHENTICATED" in (tmp_path / "cluster" / "om1.log").read_text()
        write_some(cluster, "before", 5)
        impostor(cluster)
        deadline = time.monotonic() + 10
        while max(terms(cluster)) < FORGED_TERM and time.monotonic() < deadline:
            time.sleep(0.1)
        assert max(terms(cluster)) >= FORGED_TERM
    finally:
        om_cluster.down(cluster)


def test_a_secret_readable_by_others_or_inline_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "raft.secret"
    om_cluster.write_secret(secret)
    assert len(read_secret(secret)) >= 40
    secret.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        read_secret(secret)
    config = tmp_path / "c.toml"
    config.write_text('[raft]\nsecret = "in the clear"\n')
    with pytest.raises(ConfigError, match="raft_secret_file"):
        om_config.load(config)


def test_clients_never_see_the_secret(tmp_path: Path) -> None:
    """The secret stays out of the node's answers and its log."""
    cluster = harness.start(tmp_path / "cluster")
    try:
        secret = read_secret(tmp_path / "cluster" / om_cluster.SECRET_FILE)
        infos = cluster.node_infos()
        assert all(secret not in info.SerializeToString().decode("latin-1") for info in infos)
        assert all(secret not in (tmp_path / "cluster" / f"{n.id}.log").read_text()
                   for n in cluster.nodes)
        assert om_pb2.NodeInfo.DESCRIPTOR.fields_by_name.get("secret") is None
    finally:
        om_cluster.down(cluster)
