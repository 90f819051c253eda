"""``om admin roles``: each node's id, address, role, term and positions."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from google.protobuf.json_format import MessageToDict

from om.client import OMClient, OMClientError
from om.client.blocking import DEFAULT_ADDRESS
from om.client.retry_policy import RetryPolicy
from om.protocol import om_pb2

_COLUMNS = ("node_id", "address", "role", "term", "commit_index", "applied_index", "execution")


def node_infos(addresses: list[str], timeout_s: float) -> list[om_pb2.NodeInfo]:
    """Asks every address for its own view; unreachable nodes are reported as such."""
    infos: list[om_pb2.NodeInfo] = []
    for address in addresses:
        policy = RetryPolicy(deadline_s=timeout_s, attempt_timeout_s=timeout_s)
        try:
            with OMClient([address], policy=policy) as client:
                response = client.call_raw(om_pb2.OMRequest(
                    cmd_type=om_pb2.ServiceList, service_list=om_pb2.ServiceListRequest()))
        except OMClientError:
            infos.append(om_pb2.NodeInfo(address=address, role="UNREACHABLE"))
            continue
        if response.status != om_pb2.OK:
            infos.append(om_pb2.NodeInfo(address=address, role=om_pb2.Status.Name(response.status)))
            continue
        infos.extend(n for n in response.service_list.nodes if n.address == address)
    return infos


def render_table(infos: list[om_pb2.NodeInfo]) -> str:
    """A fixed-width table of the nodes."""
    rows = [[str(getattr(info, c)) for c in _COLUMNS] for info in infos]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(_COLUMNS, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def register(commands: Any) -> None:
    """Adds the ``admin`` subcommand."""
    p = commands.add_parser("admin", help="administration (like `ozone admin om`)")
    actions = p.add_subparsers(dest="action", required=True)
    roles = actions.add_parser("roles", help="each node's role, term and positions")
    roles.add_argument("--om", default=os.environ.get("OM_ADDRESS", DEFAULT_ADDRESS),
                       help="comma-separated OM addresses")
    roles.add_argument("--json", action="store_true", help="print JSON instead of a table")
    roles.add_argument("--timeout", type=float, default=3.0)
    roles.set_defaults(run=run_roles)


def run_roles(args: argparse.Namespace) -> int:
    """Prints the roles; exit status 1 when no node answered."""
    addresses = [a.strip() for a in args.om.split(",") if a.strip()]
    infos = node_infos(addresses, args.timeout)
    if args.json:
        print(json.dumps([MessageToDict(i, preserving_proto_field_name=True) for i in infos],
                         indent=2))
    else:
        print(render_table(infos))
    if all(info.role == "UNREACHABLE" for info in infos):
        print("om admin roles: no OM answered", file=sys.stderr)
        return 1
    return 0
