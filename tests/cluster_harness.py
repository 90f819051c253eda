"""Real 3-node clusters on 127.0.0.1 for HA tests: start, load, inspect, compare."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from om import cluster as om_cluster
from om.client import OMClient, OMClientError
from om.client.retry_policy import RetryPolicy
from om.protocol import om_pb2

FAST_RAFT = """
[raft]
election_timeout_min_s = 0.4
election_timeout_max_s = 0.8
leader_fallback_timeout_s = 1.5
"""


def start(directory: Path, extra_toml: str = "", execution: str = "leader") -> om_cluster.Cluster:
    """A fresh 3-node cluster with a ready leader; ``extra_toml`` lands in [raft]."""
    return om_cluster.up(directory, 3, om_cluster.free_port_base(), execution,
                         FAST_RAFT + extra_toml, timeout_s=60, remember_it=False)


def client(cluster: om_cluster.Cluster, deadline_s: float = 30.0, **kwargs: Any) -> OMClient:
    """A client knowing every node (with the cluster's certificate when it has TLS), with an
    overall retry deadline."""
    return OMClient(cluster.addresses, policy=RetryPolicy(deadline_s=deadline_s,
                                                          attempt_timeout_s=2.0),
                    tls=cluster.client_tls(), **kwargs)


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
