"""Writes with and without continuous verification and the scrub; verify's time; audit.

    python -m bench.figures integrity [--keys 100000] [--threads 32] [--window 150]
        [--interval 60] [--scrub-rows-per-s 20000] [--seed-db DB] [--no-audit]

Waits until no other benchmark runs. Twice, on a fresh 3-node leader-flow cluster
(secure, as ``om cluster up``) seeded with ``--keys`` keys (``om freon generate``,
byte-identical copies; or copies of ``--seed-db``), drives ``om freon omkg``
writes for ``--window`` seconds after a warm-up:

* ``off``: ``[verify] interval_s = 0`` and ``scrub_rows_per_s = 0`` (no
  verification, no scrub);
* ``on``: verification every ``--interval`` seconds and the scrub at
  ``--scrub-rows-per-s`` (the defaults), and in the middle of the window one
  ``om admin verify`` (timed) and, unless ``--no-audit``, ``om admin audit``.

Write throughput is CreateKey + CommitKey requests answered OK per second over
the window (from the load's client trace). Each node's resident memory (its
processes together) is sampled every 0.5 s. Prints JSON: the two rates and their
ratio, verify's wall time and what it found, each node's verifications checked
and scrub passes in the window, peak memory. docs/operations/verify-and-repair.md,
"What digests, verify and the scrub cost".
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

WARM_UP_S = 10.0   # the load's start, left out of the window
LOAD_S = 3600      # longer than the run: the load is stopped when the window ends
RSS_EVERY_S = 0.5
VOLUME, BUCKET = "vol", "bkt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=positive_int, default=100_000,
                        help="keys in the seeded namespace (default 100000)")
    parser.add_argument("--threads", type=positive_int, default=32,
                        help="the load's operations in flight (default 32)")
    parser.add_argument("--window", type=positive_int, default=150,
                        help="seconds of load measured in each run (default 150)")
    parser.add_argument("--interval", type=positive_int, default=60,
                        help="[verify] interval_s of the 'on' run (default 60)")
    parser.add_argument("--scrub-rows-per-s", type=non_negative_int, default=20_000,
                        help="[verify] scrub_rows_per_s of the 'on' run (default 20000)")
    parser.add_argument("--dir", type=Path,
                        help="where the clusters go (default: a new temporary directory)")
    parser.add_argument("--seed-db", type=database_dir,
                        help="seed by copying this database instead of generating --keys")
    parser.add_argument("--no-audit", action="store_true", help="verify only")


def run(args: argparse.Namespace) -> int:
    runner.wait_for_quiet()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="om-integrity-figures-"))
    result: dict[str, Any] = {
        "keys": args.keys if args.seed_db is None else f"seeded from {args.seed_db}",
        "threads": args.threads, "window_s": args.window}
    for name, toml in (("off", "[verify]\ninterval_s = 0\nscrub_rows_per_s = 0\n"),
                       ("on", f"[verify]\ninterval_s = {args.interval}\n"
                              f"scrub_rows_per_s = {args.scrub_rows_per_s}\n")):
        cluster = runner.new_cluster(runner.fresh_directory(directory / name), extra_toml=toml)
        if args.seed_db is not None:
            runner.seed_by_copying(cluster, args.seed_db)
        else:
            runner.seed_by_generating(cluster, args.keys, VOLUME, BUCKET)
        with runner.started(cluster, 600):
            result[name] = _measure(cluster, args, commands=name == "on")
    off, on = result["off"]["writes_per_s"], result["on"]["writes_per_s"]
    result["ratio"] = round(on / off, 3) if off else None
    result["load_average_1m"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    return 0


def _measure(cluster: om_cluster.Cluster, args: argparse.Namespace,
             commands: bool) -> dict[str, Any]:
    cluster_dir = cluster.directory
    trace = cluster_dir / "load.jsonl"
    load = runner.freon_omkg_command(args.threads, LOAD_S, cluster_dir=cluster_dir,
                                     volume=VOLUME, bucket=BUCKET, prefix="load", trace=trace)
    found: dict[str, Any] = {}
    with runner.load_running(load), _peak_resident(cluster) as memory:
        time.sleep(WARM_UP_S)
        window = (time.time(), time.time() + args.window)
        if commands:
            time.sleep(args.window / 3)
            verify = runner.timed_om_json("admin", "verify", "--dir", str(cluster_dir),
                                          "--json")
            found["verify"] = {"wall_s": verify.wall_s, "result": verify.out.get("result"),
                               "read_s": {n.get("node_id"): n.get("read_s")
                                          for n in verify.out.get("nodes", [])}}
            if not args.no_audit:
                audit = runner.timed_om_json("admin", "audit", "--dir", str(cluster_dir),
                                             "--json")
                found["audit"] = {"wall_s": audit.wall_s, "clean": audit.out.get("clean")}
        time.sleep(max(0.0, window[1] - time.time()))
        found["gauges"] = _gauges(cluster)
    ends = runner.ok_completion_times(trace.read_text().splitlines())
    found["writes_per_s"] = runner.rate_between(ends, *window)
    found["resident_mb"] = {node: {"start": first, "peak": peak}
                            for node, (first, peak) in memory.items()}
    return found


def _gauges(cluster: om_cluster.Cluster) -> dict[str, dict[str, float]]:
    """Each node's verification and scrub counters, from its /prom."""
    wanted = ("om_verify_checks_total", "om_verify_last_check_clean",
              "om_scrub_passes_total", "om_scrub_last_duration_seconds",
              "om_scrub_last_rows", "om_digests_complete")
    found: dict[str, dict[str, float]] = {}
    for node in cluster.nodes:
        text = runner.prom_text(node.http_address)
        found[node.id] = {line.split()[0]: float(line.split()[1])
                          for line in text.splitlines()
                          if line.split(" ", 1)[0] in wanted}
    return found


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


FIGURE = Figure("integrity", "writes with and without continuous verification and the "
                "scrub; verify's time", __doc__ or "", add_arguments, run)
