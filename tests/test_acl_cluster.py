"""Native ACLs on a real 3-node cluster with ``acl_enabled = true``, through ``om sh``.

Users act with ``om sh --cert/--key/--ca``, each with a certificate of its own from
the cluster's CA (the cluster is secure, as ``om cluster up`` makes it: the user is
the certificate's, tests/test_tls.py). The ACL changes
are replicated writes: every replica ends with the same rows, a retried
AddAcl is answered from the retry cache (its original "added" answer, where a
second execution would say "already exists"), and the leader's audit log has
one line per ACL operation, denials included.
"""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from om import cli
from om.client import OMClient
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.protocol import acls, om_pb2
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
FAILED, USAGE = 255, 2
KEY = "/projects/shared/report"


@dataclass
class Shell:
    """``om sh --om ADDRESSES --cert USER.pem --key USER.key --ca CA ...`` in this
    process."""

    cluster: om_cluster.Cluster

    def __call__(self, user: str, *args: str) -> tuple[int, str, str]:
        tls = harness.user_tls(self.cluster, user)
        credentials = ["--cert", str(tls.cert_file), "--key", str(tls.key_file),
                       "--ca", str(tls.ca_file)]
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main(["sh", "--om", ",".join(self.cluster.addresses), *credentials,
                                 *args])
            except SystemExit as exit_:
                code = int(exit_.code or 0)
        return code, out.getvalue(), err.getvalue()

    def ok(self, user: str, *args: str) -> str:
        code, out, err = self(user, *args)
        assert code == 0, err
        return out

    def denied(self, user: str, *args: str) -> str:
        code, _, err = self(user, *args)
        assert (code, err.split(" ")[0]) == (FAILED, "PERMISSION_DENIED"), err
        return err.strip()


def test_acls_are_enforced_replicated_and_audited(tmp_path: Path) -> None:
    cluster = om_cluster.up(tmp_path / "cluster", 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT, timeout_s=60, remember_it=False,
                            top_level_toml='acl_enabled = true\nadmins = ["admin"]')
    try:
        leader = harness.leader_id(cluster)
        sh = Shell(cluster)
        _scenario(sh)
        _retried_add_acl_runs_once(cluster)
        harness.wait_converged(cluster)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1, "the replicas differ"
    _audited(cluster.config.data_dir / leader / "audit.log")


def _scenario(sh: Shell) -> None:
    sh.ok("admin", "volume", "create", "/projects")
    sh.ok("admin", "bucket", "create", "/projects/shared")
    assert sh.denied("bob", "key", "put", KEY, "--size", "10") == (
        "PERMISSION_DENIED User bob doesn't have READ permission to access VOLUME "
        "Volume:projects Bucket:shared Key:report")
    assert sh.ok("admin", "volume", "addacl", "/projects", "-a", "user:bob:r") == (
        "ACL USER:bob:r[ACCESS] added successfully.\n")
    sh.ok("admin", "bucket", "addacl", "/projects/shared", "-a", "user:bob:rw,world::r[DEFAULT]")
    sh.ok("bob", "key", "put", KEY, "--size", "10")
    assert sh.ok("bob", "key", "getacl", KEY, "--no-json") == "USER:bob:a,WORLD:WORLD:r\n"
    assert sh.denied("carol", "key", "info", KEY).startswith(
        "PERMISSION_DENIED User carol doesn't have READ permission to access VOLUME")
    sh.ok("admin", "volume", "addacl", "/projects", "-a", "world::r")
    sh.ok("admin", "bucket", "addacl", "/projects/shared", "-a", "world::r")
    assert '"name" : "report"' in sh.ok("carol", "key", "info", KEY)
    assert sh.denied("carol", "key", "delete", KEY) == (
        "PERMISSION_DENIED User carol doesn't have DELETE permission to access KEY "
        "Volume:projects Bucket:shared Key:report")
    assert "READ_ACL permission" in sh.denied("carol", "key", "getacl", KEY)
    sh.ok("bob", "key", "addacl", KEY, "-a", "user:carol:d")      # bob's key: he has ALL
    code, _, err = sh("admin", "volume", "addacl", "/projects", "-a", "user:bob:z")
    assert (code, "[z] ACL right is not recognized" in err) == (USAGE, True)
    sh.ok("carol", "key", "delete", KEY)


def _retried_add_acl_runs_once(cluster: om_cluster.Cluster) -> None:
    policy = RetryPolicy(deadline_s=30, attempt_timeout_s=2)
    with OMClient(cluster.addresses, policy=policy,
                  tls=harness.user_tls(cluster, "admin")) as client:
        request = build.add_acl(build.acl_object("projects"), acls.parse("group:ops:a").to_proto())
        first = client.call_raw(request)
        again = client.call_raw(request)                # the same call id: a retry
        assert (first.status, first.add_acl.response) == (om_pb2.OK, True)
        assert again == first                            # not "already exists"
        fresh = client.call(build.add_acl(build.acl_object("projects"),
                                          acls.parse("group:ops:a").to_proto()))
        assert not fresh.add_acl.response


def _audited(path: Path) -> None:
    lines = path.read_text().splitlines()
    ops = [re.search(r"user=(\S+) .* op=(\S+) .*ret=(\w+)", line) for line in lines]
    summary = [(m.group(1), m.group(2), m.group(3)) for m in ops if m]
    acl_ops = [s for s in summary if s[1].endswith("_ACL")]
    admin_adds = [("admin", "ADD_ACL", "SUCCESS")]
    assert acl_ops == [
        *admin_adds * 3,                            # volume, then bucket: two entries
        ("bob", "GET_ACL", "SUCCESS"), *admin_adds * 2, ("carol", "GET_ACL", "FAILURE"),
        ("bob", "ADD_ACL", "SUCCESS"),
        *admin_adds * 2]                            # the retried one once, then the fresh one
    assert ("bob", "ALLOCATE_KEY", "FAILURE") in summary
    assert ("carol", "DELETE_KEY", "FAILURE") in summary
    assert any("op=ADD_ACL {res_type=KEY, volume=projects, bucket=shared, key=report, "
               "type=USER, name=carol, rights=[DELETE]} | ret=SUCCESS" in line for line in lines)
