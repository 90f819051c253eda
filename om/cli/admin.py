"""``om admin``: roles and metrics here; verify, repair (``verify.py``) and audit
(``audit.py``) of the replicas."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from om import config as om_config
from om.cli import admin_transfer, audit, verify
from om.cli.common import add_tls_flags, client_tls
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.cluster import lifecycle as om_cluster
from om.config import ConfigError
from om.protocol import om_pb2

_COLUMNS = ("node_id", "address", "role", "membership", "term", "commit_index", "match_index",
            "applied_index", "execution", "http_address")


def render_table(infos: list[om_pb2.NodeInfo]) -> str:
    """A fixed-width table of the nodes; MATCH_INDEX is the follower's match index as the
    leader sees it ("-" for the leader, or with no leader answering)."""
    leaders = [i for i in infos if i.role == "LEADER"]
    matches = dict(leaders[0].match_index) if len(leaders) == 1 else {}
    rows = [[_cell(info, c, matches) for c in _COLUMNS] for info in infos]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(_COLUMNS, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _cell(info: om_pb2.NodeInfo, column: str, matches: dict[str, int]) -> str:
    if column == "match_index":
        return str(matches[info.node_id]) if info.node_id in matches else "-"
    return str(getattr(info, column))


def register(commands: Any) -> None:
    """Adds the ``admin`` subcommand."""
    p = commands.add_parser("admin", help="administration (like `ozone admin om`)")
    actions = p.add_subparsers(dest="action", required=True)
    roles = actions.add_parser("roles", help="each node's role, term and positions")
    _add_target(roles)
    roles.add_argument("--json", action="store_true", help="print JSON instead of a table")
    roles.add_argument("--timeout", type=float, default=3.0)
    roles.set_defaults(run=run_roles)
    metrics = actions.add_parser("metrics", help="each node's metrics (JSON; the samples "
                                 "its /prom endpoint serves, histogram buckets left out)")
    _add_target(metrics)
    metrics.add_argument("--timeout", type=float, default=3.0)
    metrics.set_defaults(run=run_metrics)
    verify.register(actions, _add_target)
    audit.register(actions, _add_target)
    admin_transfer.register(actions, _add_target)


def _add_target(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--om", help="comma-separated OM addresses")
    target.add_argument("--config", type=Path, help="a cluster's TOML configuration")
    target.add_argument("--dir", type=Path, help="a cluster directory (om cluster up --dir)")
    add_tls_flags(parser)


def _nodes(args: argparse.Namespace, command: str) -> list[om_pb2.NodeInfo] | None:
    """Every targeted node's view, or None after printing a configuration error."""
    try:
        addresses = _addresses(args)
        tls = client_tls(args, addresses)
    except ConfigError as error:
        print(f"om admin {command}: {error}", file=sys.stderr)
        return None
    return om_cluster.node_infos(addresses, args.timeout, tls)


def _addresses(args: argparse.Namespace) -> list[str]:
    """--om, else --config / --dir, else $OM_ADDRESS, else the last cluster, else the default."""
    if args.om:
        return split_addresses(args.om)
    if args.config or args.dir:
        path = args.config or args.dir / "cluster.toml"
        return [n.address for n in om_config.load(path).nodes]
    if "OM_ADDRESS" in os.environ:
        return split_addresses(os.environ["OM_ADDRESS"])
    try:
        return om_cluster.last().addresses
    except om_cluster.ClusterError:
        return [DEFAULT_ADDRESS]


def ring_infos(cluster: om_cluster.Cluster, timeout_s: float = 3.0) -> list[om_pb2.NodeInfo]:
    """Every node of the ring as ``cluster.toml`` records it: each running node's own
    view; a stopped one in maintenance as MAINTENANCE; each decommissioned id last."""
    config = cluster.config
    infos = om_cluster.node_infos([n.address for n in config.nodes], timeout_s,
                                  cluster.client_tls())
    by_raft = {n.raft_address: n.id for n in config.nodes}
    for node, info in zip(config.nodes, infos, strict=True):
        info.node_id = info.node_id or node.id
        matches = {by_raft.get(key, key): index for key, index in info.match_index.items()}
        info.ClearField("match_index")
        info.match_index.update(matches)   # a node started before a change knows addresses
        if node.maintenance:
            info.membership = "MAINTENANCE"
        elif not info.membership:
            info.membership = "LEARNER" if node.learner else "VOTER"
    infos += [om_pb2.NodeInfo(node_id=gone, role="STOPPED", membership="DECOMMISSIONED")
              for gone in config.decommissioned]
    return infos


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
        infos = _nodes(args, "roles")
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
    infos = _nodes(args, "metrics")
    if infos is None:
        return 2
    print(json.dumps([{"node_id": i.node_id, "address": i.address, "role": i.role,
                       "execution": i.execution, "http_address": i.http_address,
                       "metrics": dict(sorted(i.metrics.items()))}
                      for i in infos], indent=2))
    return 0 if any(i.role != "UNREACHABLE" for i in infos) else 1
