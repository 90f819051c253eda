"""What an OM snapshot costs: its create's latency, and the write latency of the
bucket it is taken of while snapshots are taken every 2 s under a paced load.

    python -m bench.figures snapshot-latency [--rounds 3] [--rate 500]

Per round, two fresh secure 3-node clusters (in /tmp/snapshot-figures, emptied
first), one after the other: ``om freon omkg -t 32 --rate RATE`` for 20 s into one
bucket, alone ("plain"), then with a CreateSnapshot of that bucket every 2 s
("snapshots"). The create holds the bucket's write lock until every batch before
it has applied and it has applied itself, and each node checkpoints its store
there (memtable flush, hard links, fsync): writes of that bucket wait meanwhile.
Prints JSON: per run the achieved rate, CreateKey and CommitKey p50/p99/max, the
creates' median and max; the median p99 of each mode and their ratio.
docs/PERFORMANCE.md, "OM snapshots".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.figures import runner
from bench.figures.figure import Figure, positive_int
from om.client import OMClient
from om.client.retry_policy import RetryPolicy

DIRECTORY = Path("/tmp/snapshot-figures")
THREADS, LOAD_S, SNAPSHOT_EVERY_S = 32, 20, 2.0
VOLUME, BUCKET = "vol", "bkt"
MODES = ("plain", "snapshots")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=positive_int, default=3,
                        help="pairs of runs, alternating (default 3)")
    parser.add_argument("--rate", type=positive_int, default=500,
                        help="operations a second the load starts (default 500: about "
                             "half of what two cores sustain)")


def _one_run(directory: Path, mode: str, rate: int) -> dict[str, Any]:
    cluster = runner.new_cluster(directory)
    load = runner.freon_omkg_command(THREADS, LOAD_S, cluster_dir=directory, volume=VOLUME,
                                     bucket=BUCKET, rate=rate,
                                     json_path=directory / "freon.json")
    creates_ms: list[float] = []
    with runner.started(cluster, 120), OMClient(
            cluster.addresses, policy=RetryPolicy(deadline_s=30.0),
            tls=cluster.client_tls()) as om:
        om.create_volume(VOLUME)
        om.create_bucket(VOLUME, BUCKET)
        with runner.load_running(load) as loading:
            while loading.poll() is None and mode == "snapshots":
                time.sleep(SNAPSHOT_EVERY_S)
                began = time.perf_counter()
                om.create_snapshot(VOLUME, BUCKET, f"snap{len(creates_ms):04d}")
                creates_ms.append((time.perf_counter() - began) * 1000)
            loading.wait()
    return summarize(mode, json.loads((directory / "freon.json").read_text()), creates_ms)


def summarize(mode: str, freon: dict[str, Any], creates_ms: list[float]) -> dict[str, Any]:
    """One run's figures from ``om freon --json`` and the creates' latencies."""
    ops = freon["op_latency_ms"]
    row: dict[str, Any] = {"mode": mode, "operations_per_s": round(freon["operations_per_s"]),
                           "failures": freon["failures"]}
    for op in ("CreateKey", "CommitKey"):
        row[op] = {q: round(ops[op][q], 1) for q in ("p50", "p99", "max")}
    if creates_ms:
        row["create_snapshot_ms"] = {"count": len(creates_ms),
                                     "median": round(statistics.median(creates_ms), 1),
                                     "max": round(max(creates_ms), 1)}
    return row


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median p99 of each mode per operation, and snapshots over plain."""
    found: dict[str, Any] = {}
    for op in ("CreateKey", "CommitKey"):
        medians = {mode: statistics.median(r[op]["p99"] for r in runs if r["mode"] == mode)
                   for mode in MODES}
        found[op] = {"p99_median_ms": medians,
                     "snapshots_over_plain": round(medians["snapshots"] / medians["plain"], 2)}
    return found


def run(args: argparse.Namespace) -> int:
    runs = []
    for round_ in range(args.rounds):
        for mode in MODES:
            runner.wait_for_quiet()
            directory = runner.fresh_directory(DIRECTORY / f"{mode}-{round_}")
            runs.append({"round": round_, **_one_run(directory, mode, args.rate)})
    print(json.dumps({"rate": args.rate, "runs": runs, "p99": compare(runs)}))
    return 0


FIGURE = Figure("snapshot-latency", "an OM snapshot's create latency and its cost to writes",
                __doc__ or "", add_arguments, run)
