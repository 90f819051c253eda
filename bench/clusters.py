"""Fresh local clusters for benchmarks, each node writing its own server trace.

``traced_cluster`` writes the cluster's TOML with ``om.cluster.write_config``,
starts every node with ``om serve --trace <dir>/server-<id>.jsonl
--trace-flow <flow>`` (so each OM process has its own trace file), waits for a
ready leader, and always stops every node on the way out, whatever happened.
Ports are on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from om import cluster as om_cluster
from om.cluster import Cluster


def server_trace_path(trace_dir: Path, node_id: str) -> Path:
    """Where node ``node_id`` writes its trace."""
    return trace_dir / f"server-{node_id}.jsonl"


@contextmanager
def traced_cluster(directory: Path, nodes: int, execution: str, extra_toml: str,
                   trace_dir: Path, flow: str, timeout_s: float = 60.0) -> Iterator[Cluster]:
    """A fresh cluster in ``directory`` with a ready leader; stopped on exit."""
    om_cluster.write_config(directory, nodes, om_cluster.free_port_base(nodes), execution,
                            extra_toml)
    cluster = Cluster(directory)
    try:
        for node in cluster.nodes:
            cluster.start_node(node.id, "--trace", str(server_trace_path(trace_dir, node.id)),
                               "--trace-flow", flow)
        cluster.wait_for_leader(timeout_s)
        yield cluster
    finally:
        om_cluster.down(cluster)
