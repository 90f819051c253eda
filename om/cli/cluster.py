"""``om cluster up|status|down``: a local cluster of real OM processes on 127.0.0.1.

``up`` checks every port first and starts nothing when one is taken (naming the
port and its holder); it returns only once every node answers and a leader is
ready, else it stops what it started and exits 1 with the failed node's log
tail. ``status`` exits 1 when the cluster has no ready leader.

``up`` is secure by default: a Raft secret, TLS with client certificates on the
client port (a CA and certificates in ``DIR/tls``, which ``om sh``, ``om admin``,
``om freon``, ``om bench`` and ``om chaos`` find through ``--dir`` or from the
addresses of a cluster started here), and native ACLs with the user who ran it as
administrator (its certificate is recorded, so ``om admin user list`` shows it and
``revoke`` can refuse it; ``om admin user add`` issues one per user).
``--insecure`` turns all three off, ``--no-tls`` TLS and the ACLs, ``--no-acls``
the ACLs; each is printed."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from om.cli.common import render_table
from om.client import OMClientError
from om.cluster import lifecycle as om_cluster
from om.cluster import users
from om.config import DEFAULT_PORT, EXECUTIONS, SHARDS_MAX, ConfigError, NodeAddress
from om.protocol import om_pb2

REGISTER_TIMEOUT_S = 30.0


def register(commands: Any) -> None:
    """Adds the ``cluster`` subcommand."""
    p = commands.add_parser("cluster", help="start or stop a local cluster")
    actions = p.add_subparsers(dest="action", required=True)
    up = actions.add_parser("up", help="start a cluster (default: 3 nodes in ./om-cluster)")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--dir", type=Path, default=om_cluster.DEFAULT_DIR)
    up.add_argument("--execution", choices=EXECUTIONS, default="leader")
    up.add_argument("--port-base", type=int, default=DEFAULT_PORT,
                    help="client ports from here; Raft ports from here + 10, "
                         "HTTP (/prom) from here + 20, shard k's client ports from here + "
                         "20 + 10 k")
    up.add_argument("--insecure", action="store_true",
                    help="no Raft secret and no TLS: any process that reaches a Raft port "
                         "can take part in Raft, and any client that reaches a client port "
                         "acts as whichever user it claims (for experiments only)")
    up.add_argument("--no-tls", dest="tls", action="store_false",
                    help="keep the Raft secret but serve clients in plain TCP, "
                         "unauthenticated (default: TLS with client certificates, a CA and "
                         "certificates in DIR/tls that the tools find through DIR or as the "
                         "last cluster started)")
    up.add_argument("--no-acls", dest="acls", action="store_false",
                    help="ACLs off: every user with a certificate may do anything "
                         "(default with TLS: native ACLs, the user running this their "
                         "administrator)")
    up.add_argument("--workers", type=int, default=0,
                    help="processes serving client connections on each node (TLS, framing);"
                         " 1: the node's own process; default 0: from the cores")
    up.add_argument("--shards", type=int, default=1,
                    help=f"processes executing writes on each node, each for its share of "
                         f"the buckets (1 to {SHARDS_MAX}; default 1; above 1 experimental: "
                         "docs/SHARDS.md)")
    up.set_defaults(run=run_up)
    status = actions.add_parser("status", help="which nodes are up; exit 1 without a "
                                "ready leader")
    status.add_argument("--dir", type=Path, help="cluster directory (default: the last one)")
    status.add_argument("--timeout", type=float, default=2.0)
    status.set_defaults(run=run_status)
    down = actions.add_parser("down", help="stop a cluster (default: the last one started)")
    down.add_argument("--dir", type=Path)
    down.set_defaults(run=run_down)


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.nodes <= 9:
        print("om cluster up: --nodes must be 1 to 9", file=sys.stderr)
        return 2
    workers = f"workers = {args.workers}" if args.workers else ""
    tls = args.tls and not args.insecure
    try:
        cluster = om_cluster.up(args.dir, args.nodes, args.port_base, args.execution,
                                top_level_toml=workers, secure=not args.insecure, tls=tls,
                                acls=tls and args.acls, shards=args.shards)
    except (om_cluster.ClusterError, ConfigError) as error:
        print(f"om cluster up: {error}", file=sys.stderr)
        return 1
    operator = cluster.client_tls()
    if operator is not None:
        try:
            users.register(operator.cert_file, cluster.addresses, operator, REGISTER_TIMEOUT_S)
        except OMClientError as error:   # the cluster runs: say so, and go on
            print(f"om cluster up: could not record {operator.cert_file} (om admin user "
                  f"revoke cannot refuse it): {error}", file=sys.stderr)
    print(render_table(cluster.node_infos()))
    print(f"\nconfig:  {cluster.config_path}\nlogs:    {cluster.directory}/om*.log")
    print("metrics: " + " ".join(f"http://{n.http_address}/prom" for n in cluster.nodes
                                 if n.http_address))
    shard_lines = shard_ports(cluster.nodes, args.shards)
    if shard_lines:
        print(shard_lines)
    if args.insecure and args.nodes > 1:
        print("INSECURE: Raft is unauthenticated (--insecure)")
    if operator is None:
        flag = "--insecure" if args.insecure else "--no-tls"
        print(f"INSECURE: clients are unauthenticated, in plain TCP ({flag})")
    else:
        print(f"clients: TLS with client certificates; the tools present {operator.cert_file} "
              f"(found through --dir {cluster.directory} or from the cluster's addresses)")
        if args.acls:
            print(f"ACLs:    native ACLs on; administrator: {getpass.getuser()} (admins); "
                  "om admin user add NAME issues a certificate for another user")
        else:
            print("INSECURE: ACLs are off: every user with a certificate may do anything "
                  "(--no-acls)")
    print(f"try:    om sh --om {','.join(cluster.addresses)} volume create /vol1")
    return 0


def shard_ports(nodes: tuple[NodeAddress, ...], shards: int) -> str:
    """The lines naming each shard's client addresses, with shards (none with one)."""
    if shards == 1:
        return ""
    return "\n".join([f"shards:  {shards} per node (experimental, docs/SHARDS.md); a "
                      "bucket's requests go to its shard's port"] +
                     [f"shard {k}: " + " ".join(n.shard_address(k) for n in nodes)
                      for k in range(shards)])


def health(info: om_pb2.NodeInfo) -> str:
    """UP when the node answered, else DOWN."""
    return "DOWN" if info.role == "UNREACHABLE" else "UP"


def run_status(args: argparse.Namespace) -> int:
    """Prints each node's health and role; 0 only with a ready leader."""
    try:
        cluster = om_cluster.Cluster(args.dir) if args.dir else om_cluster.last()
        nodes = cluster.nodes
    except (om_cluster.ClusterError, ConfigError) as error:
        print(f"om cluster status: {error}", file=sys.stderr)
        return 2
    infos = om_cluster.node_infos([n.address for n in nodes], args.timeout, cluster.client_tls())
    for node, info in zip(nodes, infos, strict=True):
        info.node_id = info.node_id or node.id
    table = render_table(infos).splitlines()
    marks = ["HEALTH", *(health(i) for i in infos)]
    print("\n".join(f"{mark.ljust(6)}  {line}" for mark, line in zip(marks, table, strict=True)))
    up = sum(info.role != "UNREACHABLE" for info in infos)
    leaders = [i.node_id for i in infos if i.role == "LEADER"]
    if len(leaders) != 1:
        print(f"\nom cluster status: {up} of {len(nodes)} nodes up, no ready leader",
              file=sys.stderr)
        return 1
    print(f"\n{up} of {len(nodes)} nodes up; leader {leaders[0]} ready")
    shard_lines = shard_ports(nodes, cluster.config.shards)
    if shard_lines:
        print(shard_lines)
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
