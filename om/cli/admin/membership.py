"""``om admin om add | decommission | maintenance start|end``: the ring's membership, for a
cluster that ``om cluster up`` started (``om/cluster/membership.py`` does the work and
says what each refuses).

Exit status: 0 done, 1 refused or failed (nothing changed, except a learner that did
not catch up, which is stopped and dropped), or a change whose outcome stayed unknown
(said, never silently), 2 a usage or configuration error.

``add`` given only ``--om`` (a ring it cannot start nodes for) starts nothing: it
prints what the operator must start, and how, and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from om.cli.common import add_target, render_table, ring_infos
from om.cluster import lifecycle as om_cluster
from om.cluster import membership
from om.cluster.membership import Refused
from om.config import ConfigError, NodeAddress


def register(commands: Any) -> None:
    """Adds ``add``, ``decommission`` and ``maintenance`` under ``om admin om``."""
    add = commands.add_parser("add", help="add a node: a learner first, then a voter")
    add_target(add)
    add.add_argument("--node-id", required=True)
    add.add_argument("--address", required=True, help="HOST:PORT of its client port")
    add.add_argument("--raft-address", required=True, help="HOST:PORT of its Raft port")
    add.add_argument("--http-port", type=int, default=0, help="its metrics port (0: none)")
    add.add_argument("--catch-up-timeout", type=float, default=120.0)
    _answer_timeout(add)
    add.set_defaults(run=_runner(_add))
    gone = commands.add_parser("decommission", help="remove a node for good")
    add_target(gone)
    gone.add_argument("--node-id", required=True)
    gone.add_argument("--catch-up-timeout", type=float, default=120.0)
    _answer_timeout(gone)
    gone.set_defaults(run=_runner(
        lambda c, a: membership.decommission(c, a.node_id, a.answer_timeout)))
    service = commands.add_parser("maintenance", help="stop a voter for servicing, or end it")
    add_target(service)
    service.add_argument("phase", choices=("start", "end"))
    service.add_argument("--node-id", required=True)
    service.add_argument("--for", dest="duration", type=_duration, default=0.0,
                         help="how long (e.g. 90s, 30m, 2h); the next membership command "
                              "after it ends the maintenance")
    service.add_argument("--catch-up-timeout", type=float, default=120.0)
    service.set_defaults(run=_runner(_maintenance))


def _answer_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--answer-timeout", type=float, default=membership.ANSWER_S,
                        help="seconds to wait for the leader's answer before asking again "
                             "with the same request id (default %(default)s)")


def _add(cluster: om_cluster.Cluster, args: argparse.Namespace) -> None:
    membership.add(cluster, _new_node(args), args.catch_up_timeout, args.answer_timeout)


def _new_node(args: argparse.Namespace) -> NodeAddress:
    host, port = _host_port(args.address, "--address")
    raft_host, raft_port = _host_port(args.raft_address, "--raft-address")
    if raft_host != host:
        raise ConfigError("--address and --raft-address must be on the same host")
    return NodeAddress(args.node_id, host, port, raft_port, args.http_port)


def _what_to_start(args: argparse.Namespace) -> str:
    """``add`` on a ring given only by addresses: the steps the operator must take."""
    node = _new_node(args)
    return "\n".join([
        f"om admin om add: {args.om} is a ring this tool did not start (no cluster "
        "directory), so it cannot start OM:" + node.id + "; nothing was changed. To add it:",
        f"  1. in the ring's configuration (the TOML every node runs with), add the node "
        f"[[nodes]] id = \"{node.id}\", host = \"{node.host}\", port = {node.port}, "
        f"raft_port = {node.raft_port}, http_port = {node.http_port}, learner = true; "
        "ids are never reused",
        "  2. give it the same raft_secret_file and [tls] material: a server certificate "
        f"for {node.host} issued by the ring's CA (as `om cluster up` does for its nodes)",
        f"  3. on {node.host}, start it: om serve --config CONFIG --node-id {node.id} "
        "(it joins as a learner and catches up)",
        "  4. once `om admin roles` shows it caught up: stop it, have the leader commit its "
        "addition (ChangeMembership ADD), set learner = false and start it again. This tool "
        "does steps 1-4 itself only for a ring of `om cluster up` (--dir DIR), whose "
        "processes it starts and stops",
    ])


def _maintenance(cluster: om_cluster.Cluster, args: argparse.Namespace) -> None:
    if args.phase == "start":
        membership.maintenance_start(cluster, args.node_id, args.duration)
    else:
        membership.maintenance_end(cluster, args.node_id, args.catch_up_timeout)


def _runner(command: Callable[[om_cluster.Cluster, argparse.Namespace], None]
            ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        name = f"om admin om {args.om_action}"
        if args.om_action == "add" and args.om and not args.dir and not args.config:
            try:
                print(_what_to_start(args), file=sys.stderr)
            except ConfigError as error:
                print(f"{name}: {error}", file=sys.stderr)
                return 2
            return 1
        try:
            cluster = _cluster(args)
            membership.end_expired(cluster, args.catch_up_timeout)
            command(cluster, args)
            print(render_table(ring_infos(cluster)))
        except (ConfigError, om_cluster.ClusterError) as error:
            print(f"{name}: {error}", file=sys.stderr)
            return 2
        except Refused as refusal:
            print(f"{name}: {refusal}", file=sys.stderr)
            return 1
        return 0
    return run


def _cluster(args: argparse.Namespace) -> om_cluster.Cluster:
    if args.dir:
        return om_cluster.Cluster(args.dir)
    if args.config and args.config.name == "cluster.toml":
        return om_cluster.Cluster(args.config.parent)
    if args.om or args.config:
        raise ConfigError("needs the cluster directory (--dir or --config DIR/cluster.toml): "
                          "it starts and stops the node's processes and keeps cluster.toml "
                          "true")
    return om_cluster.last()


def _host_port(text: str, flag: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{flag} must be HOST:PORT, not {text!r}")
    return host, int(port)


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (e.g. 90s, 30m, 2h)") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return seconds
