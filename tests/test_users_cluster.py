"""Two users on a real 3-node cluster, as an operator manages them (issue 28, part 3).

The cluster is secure as ``om cluster up`` makes it: TLS with client certificates,
native ACLs on, the user running the tests its administrator. The operator issues a
certificate to alice and one to bob (``om admin user add``, bob's naming the group
``readers``); alice creates a bucket in the volume she owns and grants bob read (by
name on the volume, through his certificate's group on the bucket); bob reads and
cannot write; alice takes the grant back and bob can no longer read; then the
operator revokes bob's certificate (``om admin user revoke``) and every node refuses
it with UNAUTHORIZED, in one line, also after every node restarted. The red case of
part 3: a revoked certificate that still works fails this test.

Every command runs through ``om``'s own entry point (``cli.main``), in this process.
"""

from __future__ import annotations

import getpass
import io
import re
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from om import cli
from om.client import OMClient
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.cluster import users
from om.protocol import om_pb2
from om.security.tls import ClientTls
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
FAILED = 255
KEY = "/team/reports/q1"


@dataclass
class Om:
    """``om ...`` in this process: (exit status, stdout, stderr)."""

    cluster: om_cluster.Cluster

    def __call__(self, *args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as exit_:
                code = int(exit_.code or 0)
        return code, out.getvalue(), err.getvalue()

    def admin(self, *args: str) -> str:
        """``om admin ... --dir DIR``, as the operator; must succeed."""
        code, out, err = self("admin", *args, "--dir", str(self.cluster.directory))
        assert code == 0, err
        return out

    def sh(self, who: ClientTls | None, *args: str) -> tuple[int, str, str]:
        """``om sh`` as the holder of ``who`` (the operator: None)."""
        if who is None:
            return self("sh", "--dir", str(self.cluster.directory), *args)
        return self("sh", "--om", ",".join(self.cluster.addresses), "--cert", str(who.cert_file),
                    "--key", str(who.key_file), "--ca", str(who.ca_file), *args)

    def ok(self, who: ClientTls | None, *args: str) -> str:
        code, out, err = self.sh(who, *args)
        assert code == 0, err
        return out

    def refused(self, who: ClientTls | None, *args: str) -> str:
        """The one line a refused command prints."""
        code, _, err = self.sh(who, *args)
        assert code == FAILED, err
        assert len(err.splitlines()) == 1, err
        return err.strip()

    def add_user(self, name: str, *flags: str) -> ClientTls:
        """``om admin user add``: the files it printed, as the user's credentials."""
        out = self.admin("user", "add", name, *flags)
        cert = re.search(r"certificate: (\S+) \(mode 0600\)", out)
        key = re.search(r"key: +(\S+) \(mode 0600\)", out)
        assert cert is not None, out
        assert key is not None, out
        tls = ClientTls(Path(cert.group(1)), Path(key.group(1)),
                        self.cluster.directory / om_cluster.TLS_DIR / "ca.pem")
        for path in (tls.cert_file, tls.key_file):
            assert path.stat().st_mode & 0o777 == 0o600, path
        return tls


def test_two_users_walk_through(tmp_path: Path) -> None:
    cluster = om_cluster.up(tmp_path / "cluster", 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT, timeout_s=60, remember_it=False, acls=True)
    try:
        operator = cluster.client_tls()
        assert operator is not None
        users.register(operator.cert_file, cluster.addresses, operator, 30)  # as up does
        om = Om(cluster)
        alice = om.add_user("alice")
        bob = om.add_user("bob", "--groups", "readers")
        _only_administrators_issue(om, alice, tmp_path)
        _alice_shares_a_bucket_with_bob(om, alice, bob)
        _bob_is_revoked_on_every_node(om, cluster, bob)
        listed = om.admin("user", "list")
        assert re.search(r"^bob +readers +\w+ +\S+ +REVOKED \S+ by " + getpass.getuser(), listed,
                         re.MULTILINE), listed
        assert re.search(r"^alice +- +\w+ +\S+ +VALID ", listed, re.MULTILINE), listed
        for node in cluster.nodes:       # the revocation is state: it survives a restart
            cluster.stop_node(node.id)
            cluster.start_node(node.id)
        cluster.wait_ready(60)
        assert om.refused(bob, "key", "info", KEY).startswith("UNAUTHORIZED ")
        assert '"name" : "q1"' in om.ok(alice, "key", "info", KEY)
        again = om.add_user("bob", "--groups", "readers")   # a new certificate works
        assert om.refused(again, "key", "info", KEY).startswith("PERMISSION_DENIED ")
        harness.wait_converged(cluster)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1, "the replicas differ"
    leader_audit = "".join((cluster.config.data_dir / n.id / "audit.log").read_text()
                           for n in cluster.nodes)
    assert re.search(r"user=\S+ \| .* \| op=REVOKE_USER_CERTIFICATES \{user=bob\} \| "
                     r"ret=SUCCESS", leader_audit)
    assert re.search(r"user=bob \| .* \| ret=FAILURE \| UNAUTHORIZED: the certificate of "
                     r"user bob", leader_audit)


def _only_administrators_issue(om: Om, alice: ClientTls, tmp_path: Path) -> None:
    code, _, err = om("admin", "user", "add", "mallory", "--dir", str(om.cluster.directory),
                      "--cert", str(alice.cert_file), "--key", str(alice.key_file),
                      "--ca", str(alice.ca_file))
    assert (code, err.strip()) == (1, "om admin user add: PERMISSION_DENIED User alice is not "
                                      "an OM administrator: only administrators (admins, "
                                      "admin_groups) may send AddUserCertificate")
    assert not (om.cluster.directory / om_cluster.TLS_DIR / "user-mallory.pem").exists()
    code, _, err = om("admin", "user", "revoke", "nobody", "--dir", str(om.cluster.directory))
    assert code == 1
    assert err.startswith("om admin user revoke: USER_NOT_FOUND no unexpired certificate")


def _alice_shares_a_bucket_with_bob(om: Om, alice: ClientTls, bob: ClientTls) -> None:
    om.ok(None, "volume", "create", "/team", "--user", "alice")        # the operator, for alice
    om.ok(alice, "bucket", "create", "/team/reports")
    assert om.refused(bob, "key", "list", "/team/reports").startswith(
        "PERMISSION_DENIED User bob doesn't have READ permission to access VOLUME")
    om.ok(alice, "volume", "addacl", "/team", "-a", "user:bob:r")
    om.ok(alice, "bucket", "addacl", "/team/reports", "-a",
          "group:readers:rl,group:readers:r[DEFAULT]")                   # bob's certificate's
    om.ok(alice, "key", "put", KEY, "--size", "10")
    assert '"name" : "q1"' in om.ok(bob, "key", "info", KEY)             # bob reads
    assert '"name" : "q1"' in om.ok(bob, "key", "list", "/team/reports")
    assert om.refused(bob, "key", "put", "/team/reports/q2", "--size", "1") == (
        "PERMISSION_DENIED User bob doesn't have CREATE permission to access KEY "
        "Volume:team Bucket:reports Key:q2")                              # and cannot write
    assert om.refused(bob, "key", "delete", KEY).startswith(
        "PERMISSION_DENIED User bob doesn't have DELETE permission to access KEY")
    om.ok(alice, "bucket", "removeacl", "/team/reports", "-a",
          "group:readers:rl,group:readers:r[DEFAULT]")                   # alice takes it back
    assert om.refused(bob, "key", "list", "/team/reports").startswith(
        "PERMISSION_DENIED User bob doesn't have LIST permission to access BUCKET")
    assert om.refused(bob, "key", "info", KEY) == (
        "PERMISSION_DENIED User bob doesn't have READ permission to access KEY Volume:team "
        "Bucket:reports Key:q1")


def _bob_is_revoked_on_every_node(om: Om, cluster: om_cluster.Cluster, bob: ClientTls) -> None:
    assert '"name" : "team"' in om.ok(bob, "volume", "info", "/team")   # he may, until:
    out = om.admin("user", "revoke", "bob")
    assert re.fullmatch(r"user bob: revoked the certificate serial [0-9A-F]+ \(recorded \S+ by "
                        r"\S+\); every node refuses it once it applied this\n", out), out
    line = om.refused(bob, "volume", "info", "/team")
    assert re.fullmatch(r"UNAUTHORIZED the certificate of user bob \(serial [0-9A-F]+\) was "
                        r"revoked at \S+ by \S+: this OM refuses it; an administrator may "
                        r"issue a new one \(om admin user add bob\)", line), line
    for node in cluster.nodes:   # each node refuses it once it applied the revocation
        deadline = time.monotonic() + 30
        with OMClient([node.address], tls=bob, policy=RetryPolicy(deadline_s=5)) as client:
            while True:
                answer = client.call_raw(build.service_list())
                if answer.status == om_pb2.UNAUTHORIZED or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        assert answer.status == om_pb2.UNAUTHORIZED, (node.id, answer)
