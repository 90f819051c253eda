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

from om import cluster as om_cluster
from om import config as om_config
from om.cli import admin_transfer, audit, verify
from om.cli.credentials import add_tls_flags, client_tls
from om.client.identity import DEFAULT_ADDRESS, split_addresses
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


def run_roles(args: argparse.Namespace) -> int:
    """Prints the roles; exit status 1 when no node answered."""
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
