"""Verify's and audit's time, and write throughput before and while each runs.

    python -m bench.figures integrity [--keys 100000] [--threads 32] [--dir DIR]
        [--verify-rows-per-s N] [--audit-rows-per-s N]

Waits until no other benchmark runs, seeds a fresh 3-node leader-flow cluster
(secure, as ``om cluster up``) with ``--keys`` keys (``om freon generate``,
byte-identical copies), starts it, drives ``om freon omkg`` writes through it
for the whole run, and in the middle runs ``om admin verify`` then ``om admin
audit``. Write throughput (CreateKey + CommitKey requests answered OK per
second, from the load's client trace) is reported for a quiet window before,
and for the time each command ran. Prints JSON. docs/OPERATIONS.md, "What
verify and audit cost".
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.figures import runner
from bench.figures.figure import Figure, non_negative_int, positive_int

QUIET_S = 8.0      # the window measured before any command
WARM_UP_S = 2.0    # the load's start, left out of that window
GAP_S = 4.0        # between verify and audit
LOAD_S = 600       # longer than the run: the load is stopped when the commands end
VOLUME, BUCKET = "vol", "bkt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=positive_int, default=100_000,
                        help="keys in the seeded namespace (default 100000)")
    parser.add_argument("--threads", type=positive_int, default=32,
                        help="the load's operations in flight (default 32)")
    parser.add_argument("--dir", type=Path,
                        help="the cluster's directory (default: a new temporary one)")
    parser.add_argument("--verify-rows-per-s", type=non_negative_int, default=0,
                        help="om admin verify --rows-per-s (0: its default)")
    parser.add_argument("--audit-rows-per-s", type=non_negative_int, default=0,
                        help="om admin audit --rows-per-s (0: its default)")


def run(args: argparse.Namespace) -> int:
    runner.wait_for_quiet()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="om-integrity-figures-"))
    cluster = runner.new_cluster(directory)
    runner.seed_by_generating(cluster, args.keys, VOLUME, BUCKET)
    with runner.started(cluster, 120):
        print(json.dumps(_measure(cluster.directory, args), indent=2))
    return 0


def _measure(cluster_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    trace = cluster_dir / "load.jsonl"
    load = runner.freon_omkg_command(args.threads, LOAD_S, cluster_dir=cluster_dir,
                                     volume=VOLUME, bucket=BUCKET, prefix="load", trace=trace)
    with runner.load_running(load):
        time.sleep(WARM_UP_S + QUIET_S)
        quiet = (time.time() - QUIET_S, time.time())
        verify = runner.timed_om_json("admin", "verify", "--dir", str(cluster_dir), "--json",
                                      "--rows-per-s", str(args.verify_rows_per_s))
        time.sleep(GAP_S)
        audit = runner.timed_om_json("admin", "audit", "--dir", str(cluster_dir), "--json",
                                     "--rows-per-s", str(args.audit_rows_per_s))
        time.sleep(1.0)
    ends = runner.ok_completion_times(trace.read_text().splitlines())
    return {
        "keys": args.keys, "threads": args.threads, "load_average_1m": os.getloadavg()[0],
        "verify_rows_per_s": args.verify_rows_per_s or "default",
        "audit_rows_per_s": args.audit_rows_per_s or "default",
        "writes_per_s": {"quiet": runner.rate_between(ends, *quiet),
                         "during_verify": runner.rate_between(ends, *verify.window),
                         "during_audit": runner.rate_between(ends, *audit.window)},
        "verify": {"wall_s": verify.wall_s, "result": verify.out["result"],
                   "trees_s": {n["node_id"]: n["compute_s"] for n in verify.out["nodes"]},
                   "rows": {n["node_id"]: n["rows"] for n in verify.out["nodes"]}},
        "audit": {"wall_s": audit.wall_s, "clean": audit.out["clean"],
                  "per_node_s": {n["node_id"]: n["duration_s"] for n in audit.out["nodes"]},
                  "rows": {n["node_id"]: n["rows_checked"] for n in audit.out["nodes"]}},
    }


FIGURE = Figure("integrity", "verify's and audit's time, and writes/s while they run",
                __doc__ or "", add_arguments, run)
