"""``om admin roles`` and ``om admin metrics``: each node's role, term and positions, and
its metrics. (The other ``om admin`` commands: ``verify.py``, ``audit.py``,
``admin_transfer.py`` and ``admin_membership.py``; ``om/cli/__init__.py`` registers them
all.)"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from google.protobuf.json_format import MessageToDict

from om.cli.common import add_target, render_table, ring_infos, target_infos
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError
from om.protocol import om_pb2


def register(actions: Any) -> None:
    """Adds ``admin roles`` and ``admin metrics``."""
    roles = actions.add_parser("roles", help="each node's role, term and positions")
    add_target(roles)
    roles.add_argument("--json", action="store_true", help="print JSON instead of a table")
    roles.add_argument("--timeout", type=float, default=3.0)
    roles.set_defaults(run=run_roles)
    metrics = actions.add_parser("metrics", help="each node's metrics (JSON; the samples "
                                 "its /prom endpoint serves, histogram buckets left out)")
    add_target(metrics)
    metrics.add_argument("--timeout", type=float, default=3.0)
    metrics.set_defaults(run=run_metrics)


def _ring(args: argparse.Namespace) -> om_cluster.Cluster | None:
    """The cluster directory the target names (--dir, --config DIR/cluster.toml, or the
    last cluster when nothing else is named), whose ring ``cluster.toml`` records."""
    if args.dir or (args.config and args.config.name == "cluster.toml"):
        return om_cluster.Cluster(args.dir or args.config.parent)
    if args.om or args.config or "OM_ADDRESS" in os.environ:
        return None
    try:
        last = om_cluster.last()
    except om_cluster.ClusterError:
        return None
    return last if last.config_path.exists() else None


def run_roles(args: argparse.Namespace) -> int:
    """Prints the roles; exit status 1 when no node answered."""
    cluster = _ring(args)
    if cluster is not None:
        try:
            infos: list[om_pb2.NodeInfo] | None = ring_infos(cluster, args.timeout)
        except ConfigError as error:
            print(f"om admin roles: {error}", file=sys.stderr)
            return 2
    else:
        infos = target_infos(args, "roles")
    if infos is None:
        return 2
    if args.json:
        print(json.dumps([MessageToDict(i, preserving_proto_field_name=True) for i in infos],
                         indent=2))
    else:
        print(render_table(infos))
    if all(info.role == "UNREACHABLE" for info in infos):
        print("om admin roles: no OM answered", file=sys.stderr)
        return 1
    return 0


def run_metrics(args: argparse.Namespace) -> int:
    """Prints each node's flow and metrics as JSON."""
    infos = target_infos(args, "metrics")
    if infos is None:
        return 2
    print(json.dumps([{"node_id": i.node_id, "address": i.address, "role": i.role,
                       "execution": i.execution, "http_address": i.http_address,
                       "metrics": dict(sorted(i.metrics.items()))}
                      for i in infos], indent=2))
    return 0 if any(i.role != "UNREACHABLE" for i in infos) else 1
