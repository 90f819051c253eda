"""Tools that say what is wrong (issue 28, part 4): a TLS setting that cannot work with
the OM is reported at once, in one line naming the flags that fix it, where the old
clients retried until their deadline (30 s for ``om sh``) and said "no OM answered".

On a secure 3-node cluster and a plain one-node cluster on 127.0.0.1, through ``om``'s
own entry point in this process (each run with ``--timeout 30``, so a run that waits
for the deadline is the red case): plain TCP to a TLS port and the reverse, an OM
certificate the client's CA does not trust, a client certificate from another CA, an
expired one and a revoked one; and a cluster recognised from any of its members'
addresses, without flags.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from om import cli
from om.client import AsyncOMClient, OMTlsError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.security.certificates import CertificateAuthority
from om.security.tls import ClientTls
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
FAILED = 255
PROMPT_S = 5.0     # "at once": the deadline of every run below is 30 s; a probe takes < 1 s
FLAGS = "(--dir DIR of the OM's cluster, or --cert/--key/--ca)"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    cluster = harness.start(tmp_path_factory.mktemp("secure") / "cluster")
    yield cluster
    om_cluster.down(cluster)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    cluster = om_cluster.up(tmp_path_factory.mktemp("plain") / "cluster", 1,
                            om_cluster.free_port_base(1), "leader", timeout_s=60,
                            remember_it=False, tls=False, top_level_toml="workers = 1")
    yield cluster
    om_cluster.down(cluster)


@pytest.fixture(autouse=True)
def no_known_clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster remembered, unless a test remembers one: no certificate is found."""
    monkeypatch.setattr(om_cluster, "LAST_CLUSTER_FILE", tmp_path / "last-cluster")
    for name in ("OM_ADDRESS", "OM_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)


def om(*args: str) -> tuple[int, str, float]:
    """``om ...`` in this process: exit status, stderr, seconds taken."""
    err = io.StringIO()
    started = time.monotonic()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = cli.main(list(args))
    return code, err.getvalue(), time.monotonic() - started


def one_line(code: int, err: str, took_s: float, status: int = FAILED) -> str:
    """The single line a refused command printed, promptly."""
    assert code == status, err
    assert len(err.splitlines()) == 1, err
    assert took_s < PROMPT_S, f"took {took_s:.1f} s: {err}"
    return err.strip()


def flags(tls: ClientTls) -> list[str]:
    return ["--cert", str(tls.cert_file), "--key", str(tls.key_file), "--ca", str(tls.ca_file)]


def sh(addresses: list[str], *args: str) -> tuple[int, str, float]:
    return om("sh", "--om", ",".join(addresses), "--timeout", "30", *args)


def test_plain_tcp_to_a_tls_port_says_so_and_names_the_flags(
        secure: om_cluster.Cluster) -> None:
    line = one_line(*sh(secure.addresses, "volume", "info", "/vol"))
    assert line == (f"om sh: the OM at {secure.addresses[0]} speaks TLS and this client "
                    f"connected in plain TCP: give it a certificate of the OM's cluster {FLAGS}")
    code, err, took = om("admin", "roles", "--om", ",".join(secure.addresses),
                         "--timeout", "30")
    assert one_line(code, err, took, 1).startswith(
        f"om admin: the OM at {secure.addresses[0]} speaks TLS")


def test_the_asyncio_client_says_so_too(secure: om_cluster.Cluster) -> None:
    async def call() -> None:
        client = AsyncOMClient(secure.addresses, policy=RetryPolicy(deadline_s=30))
        try:
            await client.call(build.service_list())
        finally:
            await client.close()

    started = time.monotonic()
    with pytest.raises(OMTlsError, match="speaks TLS and this client connected in plain TCP"):
        asyncio.run(call())
    assert time.monotonic() - started < PROMPT_S


def test_tls_to_a_plain_port_says_so(secure: om_cluster.Cluster,
                                     plain: om_cluster.Cluster) -> None:
    tls = secure.client_tls()
    assert tls is not None
    line = one_line(*sh(plain.addresses, *flags(tls), "volume", "info", "/vol"))
    assert line == (f"om sh: the OM at {plain.addresses[0]} serves plain TCP, not TLS "
                    "(WRONG_VERSION_NUMBER): drop --cert/--key/--ca and --token (and --dir of "
                    "a secure cluster), or give a secure cluster's addresses")


def test_an_untrusted_ca_is_one_line_each_way(secure: om_cluster.Cluster,
                                              tmp_path: Path) -> None:
    tls = secure.client_tls()
    assert tls is not None
    stranger = CertificateAuthority.create(tmp_path / "stranger")
    distrusting = ClientTls(tls.cert_file, tls.key_file, stranger.ca_file)
    line = one_line(*sh(secure.addresses, *flags(distrusting), "volume", "info", "/vol"))
    assert line.startswith(f"om sh: the OM at {secure.addresses[0]} presented a certificate "
                           f"that the CA {stranger.ca_file} does not trust (")
    assert line.endswith(f"): give the CA of the OM's cluster {FLAGS}")
    foreign = stranger.make_client("mallory").write(tmp_path)
    untrusted = ClientTls(foreign.cert_file, foreign.key_file, tls.ca_file)
    line = one_line(*sh(secure.addresses, *flags(untrusted), "volume", "info", "/vol"))
    assert line == (f"om sh: the OM at {secure.addresses[0]} refused the client certificate "
                    f"{foreign.cert_file}: it is not signed by the CA {tls.ca_file}, which "
                    "signed the OM's certificate (it is another cluster's); ask an "
                    f"administrator for a new one (om admin user add), or give another {FLAGS}")


def test_an_expired_certificate_is_one_line(secure: om_cluster.Cluster,
                                            tmp_path: Path) -> None:
    tls = secure.client_tls()
    assert tls is not None
    authority = CertificateAuthority.load(tls.ca_file.parent)
    began = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    old = authority.make_client("eve", (), datetime.timedelta(days=1), began).write(tmp_path)
    expired = ClientTls(old.cert_file, old.key_file, tls.ca_file)
    line = one_line(*sh(secure.addresses, *flags(expired), "volume", "info", "/vol"))
    assert line == (f"om sh: the OM at {secure.addresses[0]} refused the client certificate "
                    f"{old.cert_file}: it expired on 2020-01-02 00:00 UTC; ask an "
                    f"administrator for a new one (om admin user add), or give another {FLAGS}")


def test_a_revoked_certificate_is_one_line(secure: om_cluster.Cluster) -> None:
    directory = str(secure.directory)
    code, err, _ = om("admin", "user", "add", "carol", "--dir", directory)
    assert code == 0, err
    tls_dir = secure.directory / om_cluster.TLS_DIR
    carol = ClientTls(tls_dir / "user-carol.pem", tls_dir / "user-carol.key",
                      tls_dir / "ca.pem")
    code, err, _ = sh(secure.addresses, *flags(carol), "volume", "list", "--all")
    assert code == 0, err
    code, err, _ = om("admin", "user", "revoke", "carol", "--dir", directory)
    assert code == 0, err
    line = one_line(*sh(secure.addresses, *flags(carol), "volume", "list", "--all"))
    assert line.startswith("UNAUTHORIZED the certificate of user carol (serial ")


def test_a_cluster_is_recognised_from_any_current_member(secure: om_cluster.Cluster) -> None:
    om_cluster.remember(secure.directory)
    code, err, _ = sh(["127.0.0.1:9", secure.addresses[2]], "volume", "list", "--all")
    assert code == 0, err
    code, err, _ = om("admin", "roles", "--om", secure.addresses[1], "--timeout", "30")
    assert code == 0, err
