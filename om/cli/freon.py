"""``om freon omkg|ombg|ockrw``: load generators modelled on ``ozone freon``.

    om freon omkg -n 100000 -t 64 [--om host:port[,host:port...] | --dir CLUSTER_DIR]
    om freon ockrw --duration 30 -t 64 -p KEYPREFIX --percentage-read 80 --percentage-list 10
    om freon omfc --duration 30 -t 64 --dirs 64      # files in a file-system bucket
    om freon omdr --duration 30 -t 64 --dirs 64 --percentage-rename 25
    om freon generate --data-dir DIR [--copy-to DIR ...] --volumes V --buckets B --keys N

Presents the certificate of the cluster it targets (``--dir``, else the last
cluster started when it serves the addresses) or ``--cert/--key/--ca``, as ``om
sh`` and ``om admin`` do. Runs many requests in flight per connection (asyncio
client on uvloop), prints
freon's report (count, rate, latency percentiles, failures, successful
executions and total time) and exits 1 when every operation failed, 2 on a
usage error or when the volume and bucket could not be prepared.

``generate`` is offline, like Ozone's generators that fill an OM DB directly:
no server runs; it writes the namespace into ``DIR/db`` through the handlers
and apply's write (``om/cluster/preload.py``), and byte-identical copies into each
``--copy-to`` data directory (the other nodes of a cluster, before they start).
Exits 2 on a usage error or when the database exists or a request fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import uvloop

from bench import freon
from bench.progress import ProgressBar
from bench.session import RequestCaller, RequestFailed
from om.cli.common import add_dir_flag, add_tls_flags, client_tls, target_addresses
from om.cli.sh.shell import layout_name
from om.client import AsyncOMClient
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.client.retry_policy import RetryPolicy
from om.cluster import preload
from om.config import ConfigError, shard_data_dir

DEFAULT_COUNT = 1000
_HELP = {
    "omkg": "create keys (CreateKey + CommitKey, no data), like `ozone freon omkg`",
    "ombg": "create buckets, like `ozone freon ombg`",
    "ockrw": "read, write and list keys of one prefix, like `ozone freon ockrw`",
    "omfc": "create files (CreateFile + CommitKey, no data) in DIRS directories of a "
            "file-system bucket, like `ozone freon ommg --operation CREATE_FILE`",
    "omdr": "rename and create directories in a file-system bucket (a mix)",
}
FS_BUCKET = "fsobucket"   # the file-system generators' default bucket (created FSO)


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
        if name in ("omfc", "omdr"):
            g.add_argument("--dirs", type=int, default=64,
                           help="directories <prefix>/d<k> the operations are spread over "
                                "(default 64)")
            g.set_defaults(bucket=FS_BUCKET)
        if name == "omdr":
            g.add_argument("--percentage-rename", type=int, default=25, metavar="PCT",
                           help="renames of a directory; the rest create one (default 25)")
        g.set_defaults(run=run)
    _register_generate(generators)


def _register_generate(generators: Any) -> None:
    help_text = ("write volumes, buckets and keys straight into a stopped node's RocksDB "
                 "(offline, like Ozone's freon DB generators)")
    g = generators.add_parser("generate", help=help_text, description=help_text)
    g.add_argument("--data-dir", type=Path, required=True,
                   help="the node's data directory (om serve's --data-dir, or "
                        "<cluster data_dir>/<node id>); the database goes to DIR/db, which "
                        "must not exist")
    g.add_argument("--copy-to", type=Path, nargs="+", default=[], metavar="DIR",
                   help="also seed these data directories with byte-identical copies "
                        "(every other node of the cluster, before it first starts)")
    g.add_argument("--volumes", type=int, default=1, help="volumes (default 1)")
    g.add_argument("--buckets", type=int, default=1, help="buckets per volume (default 1)")
    g.add_argument("--keys", type=int, default=0,
                   help="keys in all, spread evenly over the buckets (default 0)")
    g.add_argument("-v", "--volume", default="vol1",
                   help="the volume's name, or the prefix of <volume>-<i> with --volumes > 1")
    g.add_argument("-b", "--bucket", default="bucket1",
                   help="the bucket's name, or the prefix of <bucket>-<j> with --buckets > 1")
    g.add_argument("-p", "--prefix", default="preload", help="keys are <prefix>/<index>")
    g.add_argument("--layout", type=layout_name,
                   help="the buckets' layout (fso: file-system buckets, the keys files "
                        "<index> in directory <prefix>; default: the server's)")
    g.add_argument("--size", type=int, default=0, help="data size recorded per key, in bytes")
    g.add_argument("--user", default="", help="owner of the volumes and buckets "
                   "(default: the current user)")
    g.add_argument("--batch-keys", type=int, default=preload.DEFAULT_BATCH_KEYS,
                   help=f"keys per RocksDB write batch (default {preload.DEFAULT_BATCH_KEYS})")
    g.add_argument("--shards", type=int, default=1,
                   help="the nodes' shards (their `shards`; default 1): each bucket into its "
                        "shard's store (DIR/shard-K/db for K >= 1), each volume into shard 0 "
                        "and each shard holding one of its buckets")
    g.add_argument("--json", type=Path, dest="json_path", help="also write the result as JSON")
    g.set_defaults(run=run_generate)


def _check_unused(data_dir: Path) -> None:
    """GenerateError unless ``data_dir`` belongs to a node that never started: a
    seed precedes the Raft log, so a node with a journal would replay entries
    its peers applied without the seed (or the seed would hide its own)."""
    for used in (data_dir / "db", data_dir / "raft", *data_dir.glob("shard-*")):
        if used.exists():
            raise preload.GenerateError(f"{used} exists: seed only nodes that never started")


def run_generate(args: argparse.Namespace) -> int:
    """Generates the namespace offline; prints what it wrote; returns the exit status."""
    try:
        namespace = preload.Namespace(
            volumes=args.volumes, buckets=args.buckets, keys=args.keys, volume=args.volume,
            bucket=args.bucket, prefix=args.prefix, size=args.size, user=args.user,
            batch_keys=args.batch_keys, layout=args.layout or "", shards=args.shards)
    except ValueError as error:
        print(f"om freon generate: {error}", file=sys.stderr)
        return 2
    targets = [shard_data_dir(args.data_dir, k) / "db" for k in range(args.shards)]
    copies = [shard_data_dir(directory, k) / "db"
              for directory in args.copy_to for k in range(args.shards)]
    progress = ProgressBar("freon generate", namespace.keys, None)
    try:
        for directory in (args.data_dir, *args.copy_to):
            _check_unused(directory)
        results = preload.generate_shards(args.data_dir, namespace,
                                          progress=lambda done: progress.update(done, 0))
        result = _added(results)
        progress.close(result.keys, 0)
        preload.copy_shards(args.data_dir, args.copy_to, args.shards)
    except preload.GenerateError as error:
        print(f"om freon generate: {error}", file=sys.stderr)
        return 2
    databases = [*targets, *copies]
    print(f"generated {result.volumes} volumes, {result.buckets} buckets, {result.keys} keys "
          f"in {result.seconds:.1f} s ({result.keys_per_s:,.0f} keys/s, {result.batches} "
          f"write batches); managed index {result.managed_index}; databases: "
          + ", ".join(str(p) for p in databases))
    if args.json_path is not None:
        record = {**dataclasses.asdict(result), "keys_per_s": result.keys_per_s,
                  "databases": [str(p) for p in databases]}
        args.json_path.write_text(json.dumps(record, indent=2) + "\n")
    return 0


def _added(results: list[preload.GenerateResult]) -> preload.GenerateResult:
    """The shards' results as one: volumes and buckets counted in shard 0 (every shard
    holds them all), the rest added up."""
    return preload.GenerateResult(
        results[0].volumes, results[0].buckets, sum(r.keys for r in results),
        sum(r.batches for r in results), max(r.managed_index for r in results),
        sum(r.seconds for r in results))


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
    g.add_argument("--om", help="comma-separated OM addresses (default: the cluster of "
                   "--dir, else $OM_ADDRESS, else 127.0.0.1:9862)")
    add_dir_flag(g)
    add_tls_flags(g)
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
    dirs, renames = getattr(args, "dirs", 64), getattr(args, "percentage_rename", 25)
    if dirs < 1 or not 0 <= renames <= 100:
        raise ValueError("--dirs must be >= 1 and --percentage-rename 0..100")
    return freon.FreonConfig(
        generator=args.generator, count=count, threads=args.threads,
        duration_s=args.duration, volume=args.volume, bucket=args.bucket, prefix=args.prefix,
        size=args.size, percentage_read=read, percentage_list=listed,
        key_range=key_range, max_list=getattr(args, "max_list", 10),
        flow=args.flow, trace_path=args.trace, label=f"freon {args.generator}",
        rate=args.rate, dirs=dirs, percentage_rename=renames)


def run(args: argparse.Namespace) -> int:
    """Runs the generator, prints the report; returns the exit status."""
    try:
        config = config_from(args)
    except ValueError as error:
        print(f"om freon: {error}", file=sys.stderr)
        return 2
    try:
        addresses = target_addresses(
            args, split_addresses(os.environ.get("OM_ADDRESS", DEFAULT_ADDRESS)))
        tls = client_tls(args, addresses)
    except ConfigError as error:
        print(f"om freon: {error}", file=sys.stderr)
        return 2
    policy = RetryPolicy(deadline_s=args.timeout, attempt_timeout_s=min(args.timeout, 10.0))

    def connect() -> RequestCaller:
        return AsyncOMClient(addresses, policy=policy, tls=tls)

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
