"""``om serve``: run one OM node until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import uvloop

from om import config as om_config
from om.config import ConfigError, NodeAddress, ServerConfig
from om.integrity.marker import ReplicaHalted
from om.node.node import Node
from om.node.rpc import serve

HALTED_EXIT = 3     # a repair holds this node (its replica marker): it must not start


def register(commands: Any) -> None:
    """Adds the ``serve`` subcommand."""
    p = commands.add_parser("serve", help="run an OM node (default: one node on 127.0.0.1:9862)")
    p.add_argument("--config", type=Path, help="TOML configuration file")
    p.add_argument("--node-id", help="this node's id in the configuration")
    p.add_argument("--data-dir", type=Path, help="data directory (default ./om-data)")
    p.add_argument("--host", help="client address to listen on (single node)")
    p.add_argument("--port", type=int, help="client port to listen on (single node)")
    p.add_argument("--http-port", type=int,
                   help="metrics port, /prom (single node; default 9874; 0: off)")
    p.add_argument("--execution", choices=om_config.EXECUTIONS,
                   help="leader (default) or replicated (Ozone's old flow)")
    p.add_argument("--workers", type=int,
                   help="processes serving client connections (TLS, framing) for this node; "
                        "1: this process; default 0: from the cores (printed at start)")
    p.add_argument("--trace", type=Path, dest="trace_path", help="write server traces here")
    p.add_argument("--trace-flow", help="flow name recorded in traces")
    p.add_argument("--log-level", default="WARNING")
    p.set_defaults(run=run)


def build_config(args: argparse.Namespace) -> ServerConfig:
    """The configuration from the file and flags."""
    overrides: dict[str, Any] = {
        "node_id": args.node_id, "data_dir": args.data_dir, "execution": args.execution,
        "trace_path": args.trace_path, "trace_flow": args.trace_flow, "workers": args.workers,
    }
    if args.host is not None or args.port is not None or args.http_port is not None:
        base = om_config.load(args.config, node_id=args.node_id)
        if len(base.nodes) != 1:
            raise ConfigError("--host/--port/--http-port apply to a single node; edit the "
                              "cluster config")
        node = base.nodes[0]
        http_port = node.http_port if args.http_port is None else args.http_port
        overrides["nodes"] = (NodeAddress(node.id, args.host or node.host,
                                          args.port or node.port, node.raft_port, http_port),)
    config = om_config.load(args.config, **overrides)
    if len(config.nodes) > 1 and not args.node_id:
        raise ConfigError(f"{args.config} has {len(config.nodes)} nodes: say which with --node-id")
    return config


async def _main(config: ServerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(Node(config), stop)


def run(args: argparse.Namespace) -> int:
    """Runs the node; returns the exit status."""
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = build_config(args)
    except ConfigError as error:
        print(f"om serve: {error}", file=sys.stderr)
        return 2
    try:
        uvloop.run(_main(config))
    except ReplicaHalted as error:
        print(f"om serve: not starting: {error}", file=sys.stderr)
        return HALTED_EXIT
    except OSError as error:
        print(f"om serve: cannot start: {error}", file=sys.stderr)
        return 1
    return 0
