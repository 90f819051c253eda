"""``om freon omkg|ombg|ockrw``: load generators modelled on ``ozone freon``.

    om freon omkg -n 100000 -t 64 --om host:port[,host:port...]
    om freon ockrw --duration 30 -t 64 -p KEYPREFIX --percentage-read 80 --percentage-list 10

Runs many requests in flight per connection (asyncio client on uvloop), prints
freon's report (count, rate, latency percentiles, failures, successful
executions and total time) and exits 1 when every operation failed, 2 on a
usage error or when the volume and bucket could not be prepared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import uvloop

from bench import freon
from bench.progress import ProgressBar
from bench.session import RequestCaller, RequestFailed
from om.client import AsyncOMClient
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.client.retry_policy import RetryPolicy

DEFAULT_COUNT = 1000
_HELP = {
    "omkg": "create keys (CreateKey + CommitKey, no data), like `ozone freon omkg`",
    "ombg": "create buckets, like `ozone freon ombg`",
    "ockrw": "read, write and list keys of one prefix, like `ozone freon ockrw`",
}


def register(commands: Any) -> None:
    """Adds the ``freon`` subcommand."""
    p = commands.add_parser("freon", help="load generators (like `ozone freon`)")
    generators = p.add_subparsers(dest="generator", required=True, metavar="GENERATOR")
    for name, help_text in _HELP.items():
        g = generators.add_parser(name, help=help_text, description=help_text)
        _common_options(g)
        if name == "ockrw":
            g.add_argument("--percentage-read", type=int, default=0, metavar="PCT")
            g.add_argument("--percentage-list", type=int, default=0, metavar="PCT")
            g.add_argument("-r", "--range", type=int, default=0, dest="key_range",
                           help="keys <prefix>/0 .. <prefix>/RANGE-1 are used (default: -n)")
            g.add_argument("--max-list-result", type=int, default=10, dest="max_list")
        g.set_defaults(run=run)


def _common_options(g: argparse.ArgumentParser) -> None:
    g.add_argument("-n", "--number-of-tests", type=int, dest="count",
                   help=f"operations to run (default {DEFAULT_COUNT}, or no limit with "
                        "--duration alone)")
    g.add_argument("-t", "--threads", type=int, default=10,
                   help="operations in flight at once (default 10)")
    g.add_argument("--duration", type=float, help="stop after this many seconds "
                   "(with -n: whichever ends first)")
    g.add_argument("--rate", type=float, help="start operations at this many per second "
                   "(at most -t in flight); latency then counts from when each was due")
    g.add_argument("--om", default=os.environ.get("OM_ADDRESS", DEFAULT_ADDRESS),
                   help="comma-separated OM addresses (default 127.0.0.1:9862 or $OM_ADDRESS)")
    g.add_argument("-v", "--volume", default="vol1")
    g.add_argument("-b", "--bucket", default="bucket1")
    g.add_argument("-p", "--prefix", default="", help="key/bucket name prefix (default random)")
    g.add_argument("--size", type=int, default=0, help="data size recorded per key, in bytes")
    g.add_argument("--trace", type=Path, help="append client_request trace records here")
    g.add_argument("--flow", default="freon", help="flow name of the trace records")
    g.add_argument("--json", type=Path, dest="json_path", help="also write the result as JSON")
    g.add_argument("--timeout", type=float, default=30.0,
                   help="overall deadline of one request, retries included (seconds)")


def config_from(args: argparse.Namespace) -> freon.FreonConfig:
    """The engine's configuration; raises ValueError on an invalid combination."""
    count = args.count
    if count is None:
        count = DEFAULT_COUNT if args.duration is None else freon.UNBOUNDED_COUNT
    if count < 0 or args.threads < 1 or (args.duration is not None and args.duration <= 0):
        raise ValueError("-n must be >= 0, -t >= 1 and --duration > 0")
    if args.rate is not None and args.rate <= 0:
        raise ValueError("--rate must be > 0")
    read, listed = getattr(args, "percentage_read", 0), getattr(args, "percentage_list", 0)
    if read < 0 or listed < 0 or read + listed > 100:
        raise ValueError("--percentage-read and --percentage-list must add up to 0..100")
    key_range = getattr(args, "key_range", 0)
    if key_range < 0:
        raise ValueError("--range must be >= 0")
    if args.generator == "ockrw" and not key_range and count >= freon.UNBOUNDED_COUNT:
        raise ValueError("ockrw with --duration and no -n needs --range")
    return freon.FreonConfig(
        generator=args.generator, count=count, threads=args.threads,
        duration_s=args.duration, volume=args.volume, bucket=args.bucket, prefix=args.prefix,
        size=args.size, percentage_read=read, percentage_list=listed,
        key_range=key_range, max_list=getattr(args, "max_list", 10),
        flow=args.flow, trace_path=args.trace, label=f"freon {args.generator}",
        rate=args.rate)


def run(args: argparse.Namespace) -> int:
    """Runs the generator, prints the report; returns the exit status."""
    try:
        config = config_from(args)
    except ValueError as error:
        print(f"om freon: {error}", file=sys.stderr)
        return 2
    addresses = split_addresses(args.om)
    policy = RetryPolicy(deadline_s=args.timeout, attempt_timeout_s=min(args.timeout, 10.0))

    def connect() -> RequestCaller:
        return AsyncOMClient(addresses, policy=policy)

    total = None if config.count >= freon.UNBOUNDED_COUNT else config.count
    progress = ProgressBar(config.label, total, config.duration_s)
    try:
        result = uvloop.run(freon.run(config, connect, progress))
    except RequestFailed as failure:
        print(f"om freon: cannot prepare {config.volume}/{config.bucket}: {failure}",
              file=sys.stderr)
        return 2
    print(freon.format_report(result))
    if args.json_path is not None:
        args.json_path.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return 1 if result.operations and not result.successes else 0
