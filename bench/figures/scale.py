"""Scale: namespaces of two sizes, alternated on fresh seeded 3-node clusters.

    python -m bench.figures scale SMALL_DB SMALL_KEYS LARGE_DB LARGE_KEYS ROUNDS

SMALL_DB and LARGE_DB are databases that ``om freon generate`` wrote (keys
``preload/<i>`` in vol1/bucket1; ``om bench --keys N`` leaves one in
OUT/seed/db). Each round starts a cluster on copies of each (Raft secret, no
client TLS, as ``om bench``; in /tmp/scale-figures/small and .../large, emptied
first), writes with ``om freon omkg -t 64`` for 15 s, then times 300 lookups of
random keys and 60 pages of 1,000 keys from random start keys (one client), and
reads each node's resident memory (server + Raft process). Prints a JSON line
per cluster. docs/PERFORMANCE.md, "Scale".
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from bench.figures import runner
from bench.figures.figure import Figure, database_dir, positive_int
from om.client import OMClient
from om.client.retry_policy import RetryPolicy

BASE_DIR = Path("/tmp/scale-figures")
THREADS, WRITE_S = 64, 15
LOOKUPS, PAGES, PAGE_KEYS = 300, 60, 1000
VOLUME, BUCKET, PREFIX = "vol1", "bucket1", "preload"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("small_db", type=database_dir, metavar="SMALL_DB")
    parser.add_argument("small_keys", type=positive_int, metavar="SMALL_KEYS",
                        help="the keys SMALL_DB holds")
    parser.add_argument("large_db", type=database_dir, metavar="LARGE_DB")
    parser.add_argument("large_keys", type=positive_int, metavar="LARGE_KEYS",
                        help="the keys LARGE_DB holds")
    parser.add_argument("rounds", type=positive_int, metavar="ROUNDS",
                        help="rounds, each one cluster of each size, small first")


def run(args: argparse.Namespace) -> int:
    for _ in range(args.rounds):
        for label, seed, keys in (("small", args.small_db, args.small_keys),
                                  ("large", args.large_db, args.large_keys)):
            print(json.dumps(measure(label, seed, keys)), flush=True)
    return 0


def measure(label: str, seed: Path, keys: int) -> dict[str, Any]:
    """One fresh cluster on copies of ``seed``, holding ``keys`` keys."""
    directory = runner.fresh_directory(BASE_DIR / label)
    cluster = runner.new_cluster(directory, tls=False)
    runner.seed_by_copying(cluster, seed)
    with runner.started(cluster, 600) as up_s:
        out = directory / "f.json"
        runner.run_load(runner.freon_omkg_command(THREADS, WRITE_S, addresses=cluster.addresses,
                                                  json_path=out))
        writes = runner.write_rate(out)
        rss = {}
        for node in cluster.nodes:
            pid = cluster.pid(node.id)
            assert pid is not None, f"{node.id} is not running"
            rss[node.id] = runner.resident_mb(pid)
        lookups, pages = _reads(cluster.addresses, keys)
    q = runner.percentile_ms
    return {
        "label": label,
        "up_s": round(up_s, 1),
        "writes_per_s": round(writes),
        "rss_mb": rss,
        "lookup_p50_ms": q(lookups, 0.5),
        "lookup_p99_ms": q(lookups, 0.99),
        "list1000_p50_ms": q(pages, 0.5),
        "list1000_p99_ms": q(pages, 0.99),
    }


def _reads(addresses: list[str], keys: int) -> tuple[list[float], list[float]]:
    """Seconds each lookup of a random key took, and each page from a random start."""
    lookups, pages = [], []
    with OMClient(addresses, policy=RetryPolicy(deadline_s=30)) as om:
        for _ in range(LOOKUPS):
            key = f"{PREFIX}/{random.randrange(keys)}"
            began = time.perf_counter()
            om.lookup_key(VOLUME, BUCKET, key)
            lookups.append(time.perf_counter() - began)
        for _ in range(PAGES):
            start = f"{PREFIX}/{random.randrange(keys)}"
            began = time.perf_counter()
            page = om.list_keys(VOLUME, BUCKET, start_key=start, max_keys=PAGE_KEYS)
            pages.append(time.perf_counter() - began)
            assert len(page.key_info) == PAGE_KEYS or page.truncated is False
    return lookups, pages


FIGURE = Figure("scale", "two namespace sizes alternated: writes, reads, memory, start-up",
                __doc__ or "", add_arguments, run)
