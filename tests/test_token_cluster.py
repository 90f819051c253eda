"""Delegation tokens on real secure clusters (TLS with client certificates, 127.0.0.1):
a token got with a certificate is used without one; renew extends it, only by its
renewer; cancel, expiry, max date, tampering and a rotated-out key each get it
refused; a retried get returns the same token; the secret key reaches every node, so
the next leader validates tokens issued before a leadership change; and the shell
(``om sh token get|renew|cancel|print``, ``om sh --token FILE``).

The ``secure`` cluster runs with tiny lifetimes (``[tokens]`` below), and the waits
are computed from the token's own dates, and bounded; the shell and the leadership
changes run on ``longlived``, with Ozone's lifetimes."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cli import main
from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2, token_format
from om.security.certificates import CertificateAuthority
from om.security.tls import ClientTls
from om.security.token_client import ServerTrust, read_token_file
from tests import cluster_harness as harness
from tests.processes import REPO, om_command

pytestmark = pytest.mark.integration
RENEW_S, MAX_S, ROTATE_S = 2.0, 4.0, 0.5
TOKENS_TOML = f"""
[tokens]
renew_interval_s = {RENEW_S}
max_lifetime_s = {MAX_S}
key_rotation_s = {ROTATE_S}
"""
POLICY = RetryPolicy(deadline_s=20, attempt_timeout_s=2)


def start(directory: Path, extra_toml: str = "") -> om_cluster.Cluster:
    return om_cluster.up(directory, 3, om_cluster.free_port_base(), "leader",
                         harness.FAST_RAFT + extra_toml, timeout_s=60, remember_it=False,
                         tls=True)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    cluster = start(tmp_path_factory.mktemp("tokens") / "cluster", TOKENS_TOML)
    yield cluster
    om_cluster.down(cluster)


@pytest.fixture(scope="module")
def longlived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    """A secure cluster with Ozone's lifetimes (a day, a week), for the slower tests."""
    cluster = start(tmp_path_factory.mktemp("longlived") / "cluster")
    yield cluster
    om_cluster.down(cluster)


def tls_dir(cluster: om_cluster.Cluster) -> Path:
    return cluster.directory / om_cluster.TLS_DIR


def user_tls(cluster: om_cluster.Cluster, user: str) -> ClientTls:
    """A certificate for ``user`` from the cluster's own CA (made once per user)."""
    directory = tls_dir(cluster)
    cert, key = directory / f"user-{user}.pem", directory / f"user-{user}.key"
    if not cert.exists():
        CertificateAuthority.load(directory).issue_client(user)
    return ClientTls(cert, key, directory / "ca.pem")


def as_user(cluster: om_cluster.Cluster, user: str) -> OMClient:
    return OMClient(cluster.addresses, policy=POLICY, tls=user_tls(cluster, user))


def with_token(cluster: om_cluster.Cluster, token: om_pb2.TokenProto | None,
               user: str = "") -> OMClient:
    """A client with no certificate: TLS trusting the CA, and the token (if any)."""
    return OMClient(cluster.addresses, user=user, policy=POLICY,
                    tls=ServerTrust(tls_dir(cluster) / "ca.pem"), token=token)


def get_token(cluster: om_cluster.Cluster, user: str = "alice",
              renewer: str = "") -> om_pb2.TokenProto:
    with as_user(cluster, user) as client:
        return client.get_delegation_token(renewer).token


def ident(token: om_pb2.TokenProto) -> om_pb2.OMTokenProto:
    return om_pb2.OMTokenProto.FromString(token.identifier)


def sleep_until(ms: int) -> None:
    """Sleeps until the wall clock reads ``ms`` (bounded: the dates are seconds away)."""
    delay = ms / 1000 - time.time()
    assert delay < 3 * MAX_S, "a wait longer than any token lifetime here"
    if delay > 0:
        time.sleep(delay)


def info_volume(client: OMClient, volume: str) -> om_pb2.OMResponse:
    return client.call_raw(om_pb2.OMRequest(cmd_type=om_pb2.InfoVolume,
                                            info_volume=om_pb2.InfoVolumeRequest(volume=volume)))


def audit_text(cluster: om_cluster.Cluster) -> str:
    time.sleep(3 * cluster.config.audit.flush_interval_s)
    return "".join((cluster.config.data_dir / node.id / "audit.log").read_text()
                   for node in cluster.nodes)


def test_a_token_stands_in_for_the_certificate(secure: om_cluster.Cluster) -> None:
    token = get_token(secure, "alice")
    assert ident(token).owner == "alice"
    assert token.service == ",".join(secure.addresses)
    with with_token(secure, token) as client:
        volume = client.create_volume("alicevol")
        assert volume.owner_name == "alice"                 # the token's owner acts
        assert client.info_volume("alicevol").owner_name == "alice"
        again = client.call_raw(om_pb2.OMRequest(cmd_type=om_pb2.GetDelegationToken,
                                                 get_delegation_token=om_pb2.
                                                 GetDelegationTokenRequest()))
        assert om_pb2.Status.Name(again.status) == "INVALID_AUTH_METHOD", again.message
    with with_token(secure, token, user="admin") as client:
        claimed = info_volume(client, "alicevol")
        assert claimed.status == om_pb2.PERMISSION_DENIED
        assert "not the owner 'alice' of the delegation token" in claimed.message
    with with_token(secure, None) as client:
        bare = info_volume(client, "alicevol")
        assert bare.status == om_pb2.PERMISSION_DENIED
        assert "no client certificate and no delegation token" in bare.message
    audit = audit_text(secure)
    assert re.search(r"user=alice \| ip=127\.0\.0\.1 \| op=CREATE_VOLUME \{volume=alicevol", audit)


def test_the_secret_keys_are_not_for_users_to_read(secure: om_cluster.Cluster) -> None:
    get_token(secure, "alice")
    with as_user(secure, "alice") as alice:
        raw = alice.call_raw(om_pb2.OMRequest(
            cmd_type=om_pb2.ReadVerifyLeaves,
            read_verify_leaves=om_pb2.ReadVerifyLeavesRequest(table="secretKeyTable",
                                                              leaves=[0], values=True)))
    assert raw.status == om_pb2.PERMISSION_DENIED
    assert "hold the keys that sign delegation tokens" in raw.message
    assert not raw.read_verify_leaves.rows


def test_a_retried_get_answers_the_same_token(secure: om_cluster.Cluster) -> None:
    with as_user(secure, "alice") as client:
        request = om_pb2.OMRequest(cmd_type=om_pb2.GetDelegationToken,
                                   get_delegation_token=om_pb2.GetDelegationTokenRequest())
        first = client.call_raw(request)
        retry = om_pb2.OMRequest()
        retry.CopyFrom(request)                            # same client id and call id
        second = client.call_raw(retry)
    assert first.status == second.status == om_pb2.OK
    assert second.get_delegation_token.token == first.get_delegation_token.token


def test_renew_extends_expiry_until_the_max_date(secure: om_cluster.Cluster) -> None:
    renewed, unrenewed = get_token(secure, "alice"), get_token(secure, "alice")
    issued = ident(renewed)
    sleep_until(issued.issue_date + int(RENEW_S * 400))
    with as_user(secure, "alice") as alice:
        expiry = alice.renew_delegation_token(renewed)
        assert expiry > issued.issue_date + RENEW_S * 1000
        sleep_until(issued.issue_date + int(RENEW_S * 1150))   # past the first expiry
        with with_token(secure, renewed) as client:
            assert info_volume(client, "nothing").status == om_pb2.VOLUME_NOT_FOUND
        with with_token(secure, unrenewed) as client:
            expired = info_volume(client, "nothing")
            assert om_pb2.Status.Name(expired.status) == "TOKEN_EXPIRED"
            assert "is expired" in expired.message
        late = alice.call_raw(om_pb2.OMRequest(
            cmd_type=om_pb2.RenewDelegationToken,
            renew_delegation_token=om_pb2.RenewDelegationTokenRequest(token=unrenewed)))
        assert om_pb2.Status.Name(late.status) == "TOKEN_EXPIRED"
        assert alice.renew_delegation_token(renewed) == issued.max_date   # capped
    sleep_until(issued.max_date + 300)
    with with_token(secure, renewed) as client:
        ended = info_volume(client, "nothing")
    assert om_pb2.Status.Name(ended.status) == "TOKEN_EXPIRED"
    assert "passed its max date" in ended.message


def test_only_the_renewer_renews(secure: om_cluster.Cluster) -> None:
    token = get_token(secure, "alice", renewer="bob")
    with as_user(secure, "alice") as alice:
        denied = alice.call_raw(om_pb2.OMRequest(
            cmd_type=om_pb2.RenewDelegationToken,
            renew_delegation_token=om_pb2.RenewDelegationTokenRequest(token=token)))
    assert denied.status == om_pb2.PERMISSION_DENIED
    assert "with non-matching renewer bob" in denied.message
    with as_user(secure, "bob") as bob:
        assert bob.renew_delegation_token(token) > ident(token).issue_date
    with with_token(secure, token) as client:     # a token may not renew itself
        itself = client.call_raw(om_pb2.OMRequest(
            cmd_type=om_pb2.RenewDelegationToken,
            renew_delegation_token=om_pb2.RenewDelegationTokenRequest(token=token)))
    assert om_pb2.Status.Name(itself.status) == "INVALID_AUTH_METHOD"
    # audited like every operation, with Ozone's OMAction names
    audit = audit_text(secure)
    assert re.search(r"user=alice \| .* \| op=GET_DELEGATION_TOKEN "
                     r"\{renewer=bob\} \| ret=SUCCESS", audit)
    assert re.search(r"user=alice \| .* \| op=RENEW_DELEGATION_TOKEN "
                     r"\{kind=OzoneToken, service=[^}]*\} \| ret=FAILURE \| PERMISSION_DENIED",
                     audit)


def test_a_cancelled_token_is_refused(secure: om_cluster.Cluster) -> None:
    token = get_token(secure, "alice")
    with as_user(secure, "mallory") as mallory:
        denied = mallory.call_raw(om_pb2.OMRequest(
            cmd_type=om_pb2.CancelDelegationToken,
            cancel_delegation_token=om_pb2.CancelDelegationTokenRequest(token=token)))
    assert denied.status == om_pb2.PERMISSION_DENIED
    with as_user(secure, "alice") as alice:
        alice.cancel_delegation_token(token)
    with with_token(secure, token) as client:
        refused = info_volume(client, "nothing")
    assert om_pb2.Status.Name(refused.status) == "INVALID_TOKEN"
    assert "was cancelled" in refused.message
    assert re.search(r"op=READ_VOLUME \{volume=nothing\} \| ret=FAILURE \| INVALID_TOKEN: "
                     r"token .*was cancelled", audit_text(secure))


def test_a_tampered_token_is_refused(secure: om_cluster.Cluster) -> None:
    token = get_token(secure, "alice")
    forged_ident = ident(token)
    forged_ident.owner = "admin"
    forged = om_pb2.TokenProto()
    forged.CopyFrom(token)
    forged.identifier = forged_ident.SerializeToString()
    flipped = om_pb2.TokenProto()
    flipped.CopyFrom(token)
    flipped.password = bytes([token.password[0] ^ 0x80]) + token.password[1:]
    for bad in (forged, flipped):
        with with_token(secure, bad) as client:
            refused = info_volume(client, "alicevol")
        assert om_pb2.Status.Name(refused.status) == "INVALID_TOKEN"
        assert "Tampered/Invalid token" in refused.message


def test_keys_rotate_and_a_rotated_out_key_is_refused(secure: om_cluster.Cluster) -> None:
    old = get_token(secure, "alice")
    sleep_until(ident(old).issue_date + int(ROTATE_S * 1000) + 100)
    newer = get_token(secure, "alice")
    assert ident(newer).master_key_id > ident(old).master_key_id
    with with_token(secure, old) as client:           # the old key still validates
        assert info_volume(client, "nothing").status == om_pb2.VOLUME_NOT_FOUND
    # the old key is dropped once every token it signed passed its max date
    sleep_until(ident(old).issue_date + int((ROTATE_S + MAX_S) * 1000) + 300)
    get_token(secure, "alice")                        # an issue drops retired keys
    with with_token(secure, old) as client:
        refused = info_volume(client, "nothing")
    assert om_pb2.Status.Name(refused.status) == "INVALID_TOKEN"
    assert f"secret key {ident(old).master_key_id}, which this OM does not hold" in \
        refused.message


def test_the_shell(longlived: om_cluster.Cluster, tmp_path: Path) -> None:
    secure = longlived
    token_file = tmp_path / "alice.token"
    tls = tls_dir(secure)
    om = ["--om", ",".join(secure.addresses)]

    def shell(*args: str, user: str = "", env: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess[str]:
        credentials = ["--cert", str(tls / f"user-{user}.pem"), "--key",
                       str(tls / f"user-{user}.key"), "--ca", str(tls / "ca.pem")] if user else []
        return subprocess.run(om_command("sh", *om, *credentials, *args), capture_output=True,
                              text=True, cwd=REPO, timeout=60, env={**os.environ, **(env or {})})

    user_tls(secure, "alice")
    user_tls(secure, "bob")
    got = shell("token", "get", "-r", "bob", "-t", str(token_file), user="alice")
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0] == f"Successfully get token for service {','.join(secure.addresses)}"
    assert lines[1].startswith("Kind: OzoneToken, Service: ")
    assert "owner=alice, renewer=bob, realUser=" in lines[1]
    assert lines[2] == f"Token persisted to {token_file} successfully!"
    assert token_file.stat().st_mode & 0o777 == 0o600
    printed = shell("token", "print", "-t", str(token_file))
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == token_format.token_string(read_token_file(token_file))

    created = shell("--token", str(token_file), "--ca", str(tls / "ca.pem"),
                    "volume", "create", "/shellvol")
    assert created.returncode == 0, created.stderr
    info = shell("volume", "info", "/shellvol",        # no --ca, no cluster to find it in
                 env={"OM_TOKEN_FILE": str(token_file), "XDG_CACHE_HOME": str(tmp_path)})
    assert info.returncode == 2, info.stderr
    assert "a delegation token travels over TLS only" in info.stderr
    info = shell("--ca", str(tls / "ca.pem"), "volume", "info", "/shellvol",
                 env={"OM_TOKEN_FILE": str(token_file)})
    assert info.returncode == 0, info.stderr
    assert '"owner" : "alice"' in info.stdout

    renewed = shell("token", "renew", "-t", str(token_file), user="bob")
    assert renewed.returncode == 0, renewed.stderr
    assert re.fullmatch(r"Token renewed successfully, expiry time: \S+Z\.\n", renewed.stdout)
    not_renewer = shell("token", "renew", "-t", str(token_file), user="alice")
    assert not_renewer.returncode == 255
    assert not_renewer.stderr.startswith("PERMISSION_DENIED alice tries to renew a token")
    cancelled = shell("token", "cancel", "-t", str(token_file), user="alice")
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == "Token canceled successfully.\n"
    after = shell("--token", str(token_file), "--ca", str(tls / "ca.pem"), "volume", "info",
                  "/shellvol")
    assert after.returncode == 255
    assert after.stderr.startswith("INVALID_TOKEN token (OzoneToken owner=alice")
    missing = shell("token", "print", "-t", str(tmp_path / "none"))
    assert missing.returncode == 255
    assert "containing encoded token doesn't exist" in missing.stderr


def test_the_next_leader_validates_tokens_issued_before(longlived: om_cluster.Cluster) -> None:
    cluster = longlived
    token = get_token(cluster, "alice")
    old = cluster.wait_for_leader().node_id
    assert main(["admin", "om", "transfer", "--config", str(cluster.config_path), "-r"]) == 0
    deadline = time.monotonic() + 30
    while cluster.wait_for_leader().node_id == old:
        assert time.monotonic() < deadline, "the leadership did not move"
        time.sleep(0.1)
    with with_token(cluster, token) as client:
        assert client.create_volume("aftertransfer").owner_name == "alice"
    cluster.kill_node(cluster.wait_for_leader().node_id)
    with with_token(cluster, token) as client:   # the third leader, on the last two nodes
        assert client.info_volume("aftertransfer").owner_name == "alice"
    with as_user(cluster, "alice") as alice:
        assert alice.renew_delegation_token(token) > ident(token).issue_date
        assert alice.get_delegation_token().token.identifier != token.identifier
