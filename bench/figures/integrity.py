"""Verify's and audit's time, and write throughput before and while each runs.

    python -m bench.figures integrity [--keys 100000] [--threads 32] [--dir DIR]
        [--verify-rows-per-s N[,N...]] [--audit-rows-per-s N] [--seed-db DB]
        [--rounds R] [--no-audit]

Waits until no other benchmark runs, seeds a fresh 3-node leader-flow cluster
(secure, as ``om cluster up``) with ``--keys`` keys (``om freon generate``,
byte-identical copies), starts it, drives ``om freon omkg`` writes through it
for the whole run, and in the middle runs ``om admin verify`` then ``om admin
audit``. Write throughput (CreateKey + CommitKey requests answered OK per
second, from the load's client trace) is reported for a quiet window before,
and for the time each command ran, with each node's peak resident memory (its
processes together, the tree computation included) against its own before.
``--seed-db`` seeds by copying a database ``om freon generate`` wrote (10M keys
take 25 minutes to generate); ``--rounds`` verifies R times per rate given, the
rates alternating, each after its own quiet window. Prints JSON.
docs/OPERATIONS.md, "What verify and audit cost".
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from bench.figures import runner
from bench.figures.figure import Figure, database_dir, non_negative_int, positive_int
from om.cluster import lifecycle as om_cluster

QUIET_S = 8.0      # the window measured before any command
WARM_UP_S = 2.0    # the load's start, left out of that window
GAP_S = 4.0        # between verify and audit
LOAD_S = 3600      # longer than the run: the load is stopped when the commands end
RSS_EVERY_S = 0.5
VOLUME, BUCKET = "vol", "bkt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=positive_int, default=100_000,
                        help="keys in the seeded namespace (default 100000)")
    parser.add_argument("--threads", type=positive_int, default=32,
                        help="the load's operations in flight (default 32)")
    parser.add_argument("--dir", type=Path,
                        help="the cluster's directory (default: a new temporary one)")
    parser.add_argument("--verify-rows-per-s", type=_rates, default=[0],
                        help="om admin verify --rows-per-s (0: its default); several, "
                             "comma-separated, alternate")
    parser.add_argument("--audit-rows-per-s", type=non_negative_int, default=0,
                        help="om admin audit --rows-per-s (0: its default)")
    parser.add_argument("--seed-db", type=database_dir,
                        help="seed by copying this database instead of generating --keys")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="verifications per rate (default 1)")
    parser.add_argument("--no-audit", action="store_true", help="verify only")


def _rates(text: str) -> list[int]:
    return [non_negative_int(part) for part in text.split(",")]


def run(args: argparse.Namespace) -> int:
    runner.wait_for_quiet()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="om-integrity-figures-"))
    cluster = runner.new_cluster(directory)
    if args.seed_db is not None:
        runner.seed_by_copying(cluster, args.seed_db)
    else:
        runner.seed_by_generating(cluster, args.keys, VOLUME, BUCKET)
    with runner.started(cluster, 600):
        print(json.dumps(_measure(cluster, args), indent=2))
    return 0


def _measure(cluster: om_cluster.Cluster, args: argparse.Namespace) -> dict[str, Any]:
    cluster_dir = cluster.directory
    trace = cluster_dir / "load.jsonl"
    load = runner.freon_omkg_command(args.threads, LOAD_S, cluster_dir=cluster_dir,
                                     volume=VOLUME, bucket=BUCKET, prefix="load", trace=trace)
    rounds: list[tuple[int, tuple[float, float], runner.Timed, dict[str, tuple[int, int]]]] = []
    with runner.load_running(load):
        time.sleep(WARM_UP_S)
        for rate in [r for _ in range(args.rounds) for r in args.verify_rows_per_s]:
            time.sleep(QUIET_S)
            quiet = (time.time() - QUIET_S, time.time())
            with _peak_resident(cluster) as memory:
                verify = runner.timed_om_json("admin", "verify", "--dir", str(cluster_dir),
                                              "--json", "--rows-per-s", str(rate))
            rounds.append((rate, quiet, verify, memory))
            time.sleep(GAP_S)
        audit = None if args.no_audit else runner.timed_om_json(
            "admin", "audit", "--dir", str(cluster_dir), "--json",
            "--rows-per-s", str(args.audit_rows_per_s))
        time.sleep(1.0)
    ends = runner.ok_completion_times(trace.read_text().splitlines())
    result: dict[str, Any] = {
        "keys": args.keys if args.seed_db is None else f"seeded from {args.seed_db}",
        "threads": args.threads, "load_average_1m": os.getloadavg()[0],
        "verify": [_verify_round(rate, quiet, verify, memory, ends)
                   for rate, quiet, verify, memory in rounds]}
    if audit is not None:
        result["audit"] = {
            "wall_s": audit.wall_s, "clean": audit.out["clean"],
            "audit_rows_per_s": args.audit_rows_per_s or "default",
            "writes_per_s": runner.rate_between(ends, *audit.window),
            "per_node_s": {n["node_id"]: n["duration_s"] for n in audit.out["nodes"]},
            "rows": {n["node_id"]: n["rows_checked"] for n in audit.out["nodes"]}}
    return result


def _verify_round(rate: int, quiet: tuple[float, float], verify: runner.Timed,
                  memory: dict[str, tuple[int, int]], ends: list[float]) -> dict[str, Any]:
    before = runner.rate_between(ends, *quiet)
    during = runner.rate_between(ends, *verify.window)
    return {"rows_per_s": rate or "default", "wall_s": verify.wall_s,
            "result": verify.out["result"],
            "writes_per_s": {"quiet": before, "during": during,
                             "ratio": round(during / before, 2) if before else None},
            "trees_s": {n["node_id"]: n["compute_s"] for n in verify.out["nodes"]},
            "rows": {n["node_id"]: n["rows"] for n in verify.out["nodes"]},
            "resident_mb": {node: {"before": first, "peak": peak, "growth": peak - first}
                            for node, (first, peak) in memory.items()}}


@contextmanager
def _peak_resident(cluster: om_cluster.Cluster) -> Iterator[dict[str, tuple[int, int]]]:
    """Samples each node's resident memory (its process tree) while the block runs;
    fills ``{node: (MiB at the start, peak MiB)}`` on the way out."""
    pids = {n.id: cluster.pid(n.id) for n in cluster.nodes}
    first = {node: _resident(pid) for node, pid in pids.items()}
    peak = dict(first)
    found: dict[str, tuple[int, int]] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(RSS_EVERY_S):
            for node, pid in pids.items():
                peak[node] = max(peak[node], _resident(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield found
    finally:
        stop.set()
        sampler.join()
        found.update({node: (first[node], peak[node]) for node in pids})


def _resident(pid: int | None) -> int:
    """MiB resident in ``pid`` and its descendants (0: gone)."""
    if pid is None:
        return 0
    try:
        return runner.resident_mb(pid)
    except psutil.Error:
        return 0


FIGURE = Figure("integrity", "verify's and audit's time, and writes/s while they run",
                __doc__ or "", add_arguments, run)
