"""Fresh local clusters for benchmarks, each node writing its own server trace.

``traced_cluster`` starts one with ``om.cluster.lifecycle.up``, every node with
``om serve --trace <dir>/server-<id>.jsonl --trace-flow <flow>`` (so each OM
process has its own trace file), and always stops every node on the way out,
whatever happened.
Ports are on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from om.cluster import lifecycle as om_cluster
from om.cluster.lifecycle import Cluster


def server_trace_path(trace_dir: Path, node_id: str) -> Path:
    """Where node ``node_id`` writes its trace."""
    return trace_dir / f"server-{node_id}.jsonl"


@contextmanager
def traced_cluster(directory: Path, nodes: int, execution: str, extra_toml: str,
                   trace_dir: Path | None, flow: str, timeout_s: float = 60.0,
                   secure: bool = True, shards: int = 1) -> Iterator[Cluster]:
    """A fresh cluster in ``directory`` with a ready leader; stopped on exit. Secure
    (Raft secret, client TLS) unless ``secure`` is False, as ``om.cluster.lifecycle.up``;
    ``shards`` shard processes per node (``shards = N``, docs/SHARDS.md); ``trace_dir``
    None: the nodes trace nothing (as in production). Front workers are the product's
    default (one per eight cores)."""
    def trace_args(node_id: str) -> tuple[str, ...]:
        if trace_dir is None:
            return ()
        return ("--trace", str(server_trace_path(trace_dir, node_id)), "--trace-flow", flow)

    cluster = om_cluster.up(
        directory, nodes, om_cluster.free_port_base(nodes, shards=shards), execution,
        extra_toml, timeout_s, remember_it=False, secure=secure, node_args=trace_args,
        shards=shards)
    try:
        yield cluster
    finally:
        om_cluster.down(cluster)
