"""Real 3-node clusters on 127.0.0.1 for HA tests: start, load, inspect, compare."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from om.client import OMClient, OMClientError
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.config import NodeAddress
from om.protocol import om_pb2
from om.security.certificates import CertificateAuthority
from om.security.tls import ClientTls

FAST_RAFT = """
[raft]
election_timeout_min_s = 0.4
election_timeout_max_s = 0.8
leader_fallback_timeout_s = 1.5
"""
NO_CONTINUOUS_VERIFY = "\n[verify]\ninterval_s = 0\n"


def start(directory: Path, extra_toml: str = "", execution: str = "leader",
          workers: int = 1, shards: int = 1) -> om_cluster.Cluster:
    """A fresh 3-node cluster with a ready leader, secure as ``om cluster up`` makes it (a
    Raft secret, TLS with client certificates); ``extra_toml`` lands in [raft];
    ``workers`` front workers per node (1: each node serves its clients itself);
    ``shards`` shard processes per node (their ports in the cluster's port range).

    Continuous verification is off unless ``extra_toml`` has a [verify] table: its
    entry, proposed every minute, may commit between two nodes' stops in
    ``digests_after_stop`` and leave them at different applied positions (the tests of
    continuous verification start their clusters with it on)."""
    if "[verify]" not in extra_toml:
        extra_toml += NO_CONTINUOUS_VERIFY
    return om_cluster.up(directory, 3, om_cluster.free_port_base(shards=shards), execution,
                         FAST_RAFT + extra_toml, timeout_s=60, remember_it=False,
                         top_level_toml=f"workers = {workers}", shards=shards)


# The flows a cluster test runs under: each execution, and the leader flow with its
# clients served by two front workers (execution, workers).
FLOWS = {"leader": ("leader", 1), "replicated": ("replicated", 1),
         "leader-2-workers": ("leader", 2)}
# As test parameters: the front workers' run is the slow tier's (front workers are an
# option, not the default; their own tests, tests/test_fronts.py, stay in the suite).
FLOW_PARAMS = [pytest.param(name, marks=[pytest.mark.slow] if FLOWS[name][1] > 1 else [])
               for name in sorted(FLOWS)]


def client(cluster: om_cluster.Cluster, deadline_s: float = 30.0, user: str | None = None,
           **kwargs: Any) -> OMClient:
    """A client knowing every node (with the cluster's certificate when it has TLS, or one
    for ``user`` from its CA), with an overall retry deadline."""
    tls = cluster.client_tls()
    if tls is not None and user is not None:
        tls, user = user_tls(cluster, user), None   # the user is the certificate's
    return OMClient(cluster.addresses, policy=RetryPolicy(deadline_s=deadline_s,
                                                          attempt_timeout_s=2.0),
                    tls=tls, user=user, **kwargs)


def user_tls(cluster: om_cluster.Cluster, user: str) -> ClientTls:
    """A certificate for ``user`` from the cluster's own CA (made once per user), as an
    admin would issue it: a client presenting it acts as ``user``."""
    directory = cluster.directory / om_cluster.TLS_DIR
    cert, key = directory / f"user-{user}.pem", directory / f"user-{user}.key"
    if not cert.exists():
        CertificateAuthority.load(directory).issue_client(user)
    return ClientTls(cert, key, directory / "ca.pem")


def tls_flags(cluster: om_cluster.Cluster) -> list[str]:
    """``--cert/--key/--ca`` of the cluster's certificate for a tool's command line (none
    without TLS)."""
    tls = cluster.client_tls()
    if tls is None:
        return []
    return ["--cert", str(tls.cert_file), "--key", str(tls.key_file), "--ca", str(tls.ca_file)]


def raw_connection(cluster: om_cluster.Cluster, address: NodeAddress,
                   timeout_s: float) -> socket.socket:
    """A connection to ``address``'s client port for hand-made frames: in TLS with the
    cluster's certificate when it has one (the user is then the certificate's: frames
    should claim none)."""
    conn = socket.create_connection((address.host, address.port), timeout=timeout_s)
    tls = cluster.client_tls()
    if tls is None:
        return conn
    return tls.context().wrap_socket(conn, server_hostname=address.host)


def leader_id(cluster: om_cluster.Cluster) -> str:
    return cluster.wait_for_leader().node_id


def wait_converged(cluster: om_cluster.Cluster) -> int:
    """Waits until every node reports one applied position; returns it."""
    return cluster.wait_converged(timeout_s=60)


def digests_after_stop(cluster: om_cluster.Cluster) -> dict[str, dict[str, str]]:
    """Stops every node, then reads each node's tables' digests from disk."""
    om_cluster.down(cluster)
    return cluster.stopped_digests()


@dataclass
class WriteLoad:
    """Writer threads putting unique keys until stopped; records what was acknowledged."""

    cluster: om_cluster.Cluster
    threads: int = 3
    acknowledged: dict[str, int] = field(default_factory=dict)
    acknowledged_at: list[float] = field(default_factory=list)   # time.monotonic()
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for n in range(self.threads):
            worker = threading.Thread(target=self._run, args=(n,), daemon=True)
            worker.start()
            self._workers.append(worker)

    def _run(self, n: int) -> None:
        with client(self.cluster, deadline_s=20.0) as om:
            i = 0
            while not self._stop.is_set() and i < 5_000:
                key = f"w{n}-{i:05d}"
                i += 1
                try:
                    info = om.put_key("vol", "bkt", key, 10)
                except OMClientError:
                    with self._lock:
                        self.failures += 1
                    continue
                with self._lock:
                    self.acknowledged[key] = info.object_id
                    self.acknowledged_at.append(time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=60)
            assert not worker.is_alive(), "a writer did not stop"

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)


def all_keys(om: OMClient) -> dict[str, om_pb2.KeyInfo]:
    """Every committed key of /vol/bkt."""
    keys: dict[str, om_pb2.KeyInfo] = {}
    start_key = ""
    while True:
        page = om.list_keys("vol", "bkt", start_key=start_key, max_keys=1000)
        keys.update((k.key_name, k) for k in page.key_info)
        if not page.truncated:
            return keys
        start_key = page.key_info[-1].key_name
