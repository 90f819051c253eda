"""``om bench``: the leader flow against the old flow and the in-process ceiling.

    om bench [--profile quick|full|scaling|fso|sweep] [--out DIR] [--keys N]
             [--flows leader,replicated,...] [--insecure]

Starts a fresh local 3-node cluster per flow (127.0.0.1, free ports), drives
the same ``freon omkg`` load through each, and writes traces
(docs/TRACES.md), ``DIR/manifest.json`` and ``DIR/summary.json``; prints a
table at the end, and CPU per acknowledged write by role with one leader's
projection to more cores (``bench/roles.py``). ``quick`` takes under three
minutes on two cores; ``scaling`` runs one node at S = 1 and 2 shards and three
nodes at S = 1, 2 and 4, the load and the preload spread over 64 buckets and 8
connections, each flow three times, and reports each S against S = 1 by the
medians (``bench/shard_scaling.py``); ``fso``
runs file-system buckets (OBS keys, then files, a directory rename/create mix
and rename scaling on one cluster) with the object-id locks and with Ozone
mainline's bucket lock (``[fso] lock_plan``), flows ``fso`` and ``fso-bucket``
(``bench/fso.py``); ``sweep`` runs the leader, the old flow and etcd at 16, 64 and
256 in flight, each point (``leader@64``) on a fresh cluster (``bench/sweep.py``).

Every flow's measured run is labelled CPU-bound, cycle-bound or stall-bound, with
the evidence (``bench/bound.py``), and a flow during which other processes used more
than 10 % of the machine is flagged with a WARNING at the end of the table
(``bench/machine_load.py``). Exits 1 when a flow failed, 2 on a usage error.

The OM clusters run secure, as ``om cluster up`` starts them (Raft secret,
client TLS; the audit log is on in both modes), while the etcd flow runs etcd
plain, as the anchors do; ``--insecure`` runs the OM clusters plain too, for a
like-for-like ratio. The table's last line says which it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from pathlib import Path
from typing import Any

from bench import driver
from bench.progress import StepLog
from bench.summary import render_table

_VISIBLE_PROFILES = ("quick", "full", "scaling", "fso", "sweep")


def register(commands: Any) -> None:
    """Adds the ``bench`` subcommand."""
    p = commands.add_parser("bench", help="benchmark every flow on fresh local clusters",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", default="quick", choices=sorted(driver.PROFILES),
                   metavar="{" + ",".join(_VISIBLE_PROFILES) + "}",
                   help="quick: ~15 s of load per flow; full: longer, more concurrency, "
                        "and a mixed read/list phase; scaling: 1 and 3 nodes at 1, 2 and 4 "
                        "shards over 64 buckets, 3 runs each; fso: file-system buckets, "
                        "object-id locks against the bucket lock; sweep: leader, replicated "
                        "and etcd at 16, 64 and 256 in flight")
    p.add_argument("--out", type=Path, help="run directory (default bench-out/<time>)")
    p.add_argument("--keys", type=int, default=0,
                   help="namespace size: every node starts on a copy of a database with this "
                        "many keys, generated once offline (om freon generate)")
    p.add_argument("--flows", help=f"comma-separated subset of {','.join(driver.FLOW_NAMES)} "
                                   "(default: the profile's)")
    p.add_argument("--duration", type=float, help="override the measured seconds per flow")
    p.add_argument("--threads", type=int, help="override the operations in flight")
    p.add_argument("--insecure", action="store_true",
                   help="OM clusters without the Raft secret and client TLS (as om cluster up "
                        "--insecure), as the etcd flow runs: a like-for-like comparison")
    p.add_argument("--no-traces", action="store_true",
                   help="servers and load generator write no traces, as production runs (the "
                        "phase breakdown and the report's traced sections are then empty)")
    p.set_defaults(run=run)


def config_from(args: argparse.Namespace) -> driver.BenchConfig:
    """The run's configuration; raises ValueError on an invalid option."""
    if args.keys < 0:
        raise ValueError("--keys must be >= 0")
    profile = driver.PROFILES[args.profile]
    if args.duration is not None:
        if args.duration <= 0:
            raise ValueError("--duration must be > 0")
        profile = dataclasses.replace(profile, measure_s=args.duration)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError("--threads must be >= 1")
        if profile.in_flight:
            raise ValueError(f"--threads: the {profile.name} profile sets its own in-flight "
                             f"counts {list(profile.in_flight)}")
        profile = dataclasses.replace(profile, threads=args.threads)
    names = (args.flows.split(",") if args.flows else
             list(profile.flows or driver.DEFAULT_FLOWS))
    flows = driver.select_flows([f.strip() for f in names if f.strip()])
    if profile.in_flight:
        flows = driver.sweep_points(flows, profile.in_flight)
    flows = driver.repeated(flows, profile.runs)
    out = args.out or Path("bench-out") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return driver.BenchConfig(out=out, profile=profile, keys=args.keys, flows=flows,
                              secure=not args.insecure, traces=not args.no_traces)


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark; prints the table; returns the exit status."""
    try:
        config = config_from(args)
    except ValueError as error:
        print(f"om bench: {error}", file=sys.stderr)
        return 2
    summary = driver.run_bench(config, StepLog())
    print(render_table(summary))
    print("OM clusters: " + ("secure (Raft secret, client TLS)" if config.secure else
                             "INSECURE (--insecure: no Raft secret, no TLS)")
          + "; etcd: plain (no TLS); traces " + ("on" if config.traces else "OFF (--no-traces)"))
    print(f"\nrun directory: {config.out}  (summary.json, manifest.json, <flow>/traces/)")
    failed = [name for name, flow in summary["flows"].items() if flow.get("error")]
    return 1 if failed else 0
