"""``om cluster up|down``: a local cluster of real OM processes on 127.0.0.1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from om import cluster as om_cluster
from om.cli.admin import render_table
from om.config import DEFAULT_PORT, EXECUTIONS, ConfigError


def register(commands: Any) -> None:
    """Adds the ``cluster`` subcommand."""
    p = commands.add_parser("cluster", help="start or stop a local cluster")
    actions = p.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start a cluster (default: 3 nodes in ./om-cluster)")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--dir", type=Path, default=om_cluster.DEFAULT_DIR)
    up.add_argument("--execution", choices=EXECUTIONS, default="leader")
    up.add_argument("--port-base", type=int, default=DEFAULT_PORT,
                    help="client ports from here; Raft ports from here + 10")
    up.set_defaults(run=run_up)
    down = actions.add_parser("down", help="stop a cluster (default: the last one started)")
    down.add_argument("--dir", type=Path)
    down.set_defaults(run=run_down)


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        print("om cluster up: --nodes must be 1 to 9", file=sys.stderr)
        return 2
    try:
        cluster = om_cluster.up(args.dir, args.nodes, args.port_base, args.execution)
    except (om_cluster.ClusterError, ConfigError) as error:
        print(f"om cluster up: {error}", file=sys.stderr)
        return 1
    print(render_table(cluster.node_infos()))
    print(f"\nconfig: {cluster.config_path}\nlogs:   {cluster.directory}/om*.log")
    print(f"try:    om sh --om {','.join(cluster.addresses)} volume create /vol1")
    return 0


def run_down(args: argparse.Namespace) -> int:
    try:
        cluster = om_cluster.Cluster(args.dir) if args.dir else om_cluster.last()
        om_cluster.down(cluster)
    except (om_cluster.ClusterError, ConfigError) as error:
        print(f"om cluster down: {error}", file=sys.stderr)
        return 1
    print(f"stopped the cluster in {cluster.directory}")
    return 0
