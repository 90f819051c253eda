"""Fresh local clusters for benchmarks, each node writing its own server trace.

``traced_cluster`` writes the cluster's TOML with ``om.cluster.write_config``,
starts every node with ``om serve --trace <dir>/server-<id>.jsonl
--trace-flow <flow>`` (so each OM process has its own trace file), waits for a
ready leader, and always stops every node on the way out, whatever happened.
Ports are on 127.0.0.1 only.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from om import cluster as om_cluster
from om.cluster import Cluster

PORT_RANGE = (20_000, 40_000)
PORT_TRIES = 100


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_base(nodes: int) -> int:
    """A base port whose client ports and Raft ports (base + 10) are all free now."""
    for _ in range(PORT_TRIES):
        base = random.randrange(PORT_RANGE[0], PORT_RANGE[1], 20)
        ports = [base + i for i in range(nodes)]
        ports += [base + om_cluster.RAFT_PORT_OFFSET + i for i in range(nodes)]
        if all(_free(p) for p in ports):
            return base
    raise om_cluster.ClusterError(f"no free port range in {PORT_TRIES} tries")


def server_trace_path(trace_dir: Path, node_id: str) -> Path:
    """Where node ``node_id`` writes its trace."""
    return trace_dir / f"server-{node_id}.jsonl"


@contextmanager
def traced_cluster(directory: Path, nodes: int, execution: str, extra_toml: str,
                   trace_dir: Path, flow: str, timeout_s: float = 60.0) -> Iterator[Cluster]:
    """A fresh cluster in ``directory`` with a ready leader; stopped on exit."""
    om_cluster.write_config(directory, nodes, free_port_base(nodes), execution, extra_toml)
    cluster = Cluster(directory)
    try:
        for node in cluster.nodes:
            cluster.start_node(node.id, "--trace", str(server_trace_path(trace_dir, node.id)),
                               "--trace-flow", flow)
        cluster.wait_for_leader(timeout_s)
        yield cluster
    finally:
        om_cluster.down(cluster)
