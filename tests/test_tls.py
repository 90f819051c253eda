"""TLS with client certificates on the client port (``om cluster up``'s default): the user is
the certificate's CN; no certificate, a stranger's certificate or a forged user is
refused; the tools find the cluster's certificate by themselves."""

from __future__ import annotations

import getpass
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import OMClient, OMConnectionError
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from om.security.certificates import CertificateAuthority
from om.security.tls import ClientTls
from tests import cluster_harness as harness
from tests.processes import REPO, om_command

pytestmark = pytest.mark.integration
POLICY = RetryPolicy(deadline_s=3, attempt_timeout_s=1)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    directory = tmp_path_factory.mktemp("tls") / "cluster"
    cluster = om_cluster.up(directory, 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT, timeout_s=60, remember_it=False, tls=True,
                            top_level_toml='acl_enabled = true\nadmins = ["admin"]')
    yield cluster
    om_cluster.down(cluster)


def user_tls(cluster: om_cluster.Cluster, user: str) -> ClientTls:
    """A certificate for ``user`` from the cluster's own CA (as an admin would issue)."""
    authority = CertificateAuthority.load(cluster.directory / om_cluster.TLS_DIR)
    issued = authority.issue_client(user)
    return ClientTls(issued.cert_file, issued.key_file, authority.ca_file)


def create_volume(client: OMClient, volume: str, user: str = "") -> om_pb2.OMResponse:
    return client.call_raw(om_pb2.OMRequest(
        cmd_type=om_pb2.CreateVolume, user=user,
        create_volume=om_pb2.CreateVolumeRequest(volume=volume, owner="admin")))


def test_private_keys_are_private(secure: om_cluster.Cluster) -> None:
    keys = list((secure.directory / om_cluster.TLS_DIR).glob("*.key"))
    assert len(keys) >= 5   # CA, three nodes, this user
    assert all(key.stat().st_mode & 0o077 == 0 for key in keys)
    assert "clients=TLS, certificate required" in (secure.directory / "om1.log").read_text()


def test_a_client_without_a_certificate_is_refused(secure: om_cluster.Cluster) -> None:
    with OMClient(secure.addresses, user="admin", policy=POLICY) as plain, \
            pytest.raises(OMConnectionError):
        create_volume(plain, "plainvol")


def test_a_certificate_from_another_ca_is_refused(secure: om_cluster.Cluster,
                                                  tmp_path: Path) -> None:
    stranger = CertificateAuthority.create(tmp_path / "other-ca")
    issued = stranger.issue_client("admin")
    forged = ClientTls(issued.cert_file, issued.key_file,
                       secure.directory / om_cluster.TLS_DIR / "ca.pem")
    with OMClient(secure.addresses, policy=POLICY, tls=forged) as client, \
            pytest.raises(OMConnectionError):
        create_volume(client, "strangervol")


def test_the_user_is_the_certificates_and_cannot_be_forged(secure: om_cluster.Cluster) -> None:
    admin = user_tls(secure, "admin")
    mallory = user_tls(secure, "mallory")
    policy = RetryPolicy(deadline_s=30, attempt_timeout_s=2)
    with OMClient(secure.addresses, policy=policy, tls=admin) as client:
        assert create_volume(client, "adminvol").status == om_pb2.OK
    with OMClient(secure.addresses, policy=policy, tls=mallory) as client:
        forged = create_volume(client, "forgedvol", user="admin")
        assert forged.status == om_pb2.PERMISSION_DENIED
        assert "not the authenticated user 'mallory'" in forged.message
        as_herself = create_volume(client, "hervol")
        assert as_herself.status == om_pb2.PERMISSION_DENIED   # not an administrator
        assert "mallory" in as_herself.message
    # the leader audits what it ran; a forged user is refused (and audited) by the
    # node the client reached, before any flow runs
    time.sleep(2 * secure.config.audit.flush_interval_s)   # the writer's interval
    audit = "".join((secure.config.data_dir / node.id / "audit.log").read_text()
                    for node in secure.nodes)
    assert re.search(r"user=admin \| ip=127\.0\.0\.1 \| op=CREATE_VOLUME \{volume=adminvol", audit)
    assert re.search(r"user=admin .*volume=forgedvol.* ret=FAILURE \| PERMISSION_DENIED", audit)
    assert re.search(r"user=mallory .*volume=hervol.* ret=FAILURE \| PERMISSION_DENIED", audit)


def test_the_tools_find_the_clusters_certificate(secure: om_cluster.Cluster) -> None:
    roles = subprocess.run(om_command("admin", "roles", "--dir", str(secure.directory),
                                      "--json"), capture_output=True, text=True, cwd=REPO,
                           timeout=60, check=True)
    assert {n["role"] for n in json.loads(roles.stdout)} >= {"LEADER", "FOLLOWER"}
    me = getpass.getuser()
    tls = secure.directory / om_cluster.TLS_DIR
    shell = subprocess.run(om_command("sh", "--om", ",".join(secure.addresses),
                                      "--cert", str(tls / f"user-{me}.pem"),
                                      "--key", str(tls / f"user-{me}.key"),
                                      "--ca", str(tls / "ca.pem"), "volume", "list", "--all"),
                           capture_output=True, text=True, cwd=REPO, timeout=60)
    assert shell.returncode in (0, 255), shell.stderr   # 255: not an admin, but authenticated
    assert "PERMISSION_DENIED" in shell.stderr or shell.stdout.startswith("[")
    partial = subprocess.run(om_command("sh", "--om", secure.addresses[0], "--cert",
                                        str(tls / "ca.pem"), "volume", "list"),
                             capture_output=True, text=True, cwd=REPO, timeout=60)
    assert partial.returncode == 2
    assert "--cert, --key and --ca go together" in partial.stderr
