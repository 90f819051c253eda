"""The README's verify and audit figures: their time, and write throughput while they run.

    python scripts/integrity_figures.py [--keys 100000] [--threads 32] [--dir DIR]

Seeds a fresh 3-node leader-flow cluster with ``--keys`` keys (``om freon
generate``, byte-identical copies), starts it, drives ``om freon omkg``
writes through it for the whole run, and in the middle runs ``om admin
verify`` then ``om admin audit``. Write throughput (CreateKey + CommitKey
requests answered OK per second, from the load's client trace) is reported
for a quiet window before, and for the time each command ran. Prints JSON.
Run nothing else meanwhile: on two cores, any other load moves the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from om.cluster import lifecycle as om_cluster

QUIET_S = 8.0
GAP_S = 4.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--verify-rows-per-s", type=int, default=0, help="0: the default")
    parser.add_argument("--audit-rows-per-s", type=int, default=0, help="0: the default")
    args = parser.parse_args()
    _wait_for_quiet()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="om-integrity-figures-"))
    cluster = _seeded_cluster(directory, args.keys)
    try:
        print(json.dumps(_measure(cluster, directory, args), indent=2))
    finally:
        om_cluster.down(cluster)
    return 0


def _seeded_cluster(directory: Path, keys: int) -> om_cluster.Cluster:
    om_cluster.write_config(directory, 3, om_cluster.free_port_base(), "leader")
    data = directory / "data"
    _run("om", "freon", "generate", "--data-dir", str(data / "om1"), "--copy-to",
         str(data / "om2"), str(data / "om3"), "--keys", str(keys), "-v", "vol", "-b", "bkt")
    cluster = om_cluster.Cluster(directory)
    for node in cluster.nodes:
        cluster.start_node(node.id)
    cluster.wait_ready(120)
    return cluster


def _wait_for_quiet() -> None:
    """Waits until no other benchmark runs (they would move every figure)."""
    while True:
        others = subprocess.run(["pgrep", "-f", "om bench|om freon|-m om freon|-m om bench"],
                                capture_output=True, text=True).stdout.split()
        if not others:
            return
        print(f"waiting: another benchmark runs ({', '.join(others)})", file=sys.stderr)
        time.sleep(10)


def _measure(cluster: om_cluster.Cluster, directory: Path,
             args: argparse.Namespace) -> dict[str, Any]:
    trace = directory / "load.jsonl"
    load = subprocess.Popen([sys.executable, "-m", "om", "freon", "omkg", "-t", str(args.threads),
                             "--duration", "600", "--dir", str(cluster.directory),
                             "-v", "vol", "-b", "bkt", "-p", "load", "--trace", str(trace)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2.0 + QUIET_S)
        quiet = (time.time() - QUIET_S, time.time())
        verify = _timed("om", "admin", "verify", "--dir", str(cluster.directory), "--json",
                        "--rows-per-s", str(args.verify_rows_per_s))
        time.sleep(GAP_S)
        audit = _timed("om", "admin", "audit", "--dir", str(cluster.directory), "--json",
                       "--rows-per-s", str(args.audit_rows_per_s))
        time.sleep(1.0)
    finally:
        load.terminate()
        load.wait(timeout=30)
    rates = _rates(trace)
    return {
        "keys": args.keys, "threads": args.threads, "load_average_1m": os.getloadavg()[0],
        "verify_rows_per_s": args.verify_rows_per_s or "default",
        "audit_rows_per_s": args.audit_rows_per_s or "default",
        "writes_per_s": {"quiet": _rate(rates, *quiet),
                         "during_verify": _rate(rates, *verify["window"]),
                         "during_audit": _rate(rates, *audit["window"])},
        "verify": {"wall_s": verify["wall_s"], "result": verify["out"]["result"],
                   "trees_s": {n["node_id"]: n["compute_s"] for n in verify["out"]["nodes"]},
                   "rows": {n["node_id"]: n["rows"] for n in verify["out"]["nodes"]}},
        "audit": {"wall_s": audit["wall_s"], "clean": audit["out"]["clean"],
                  "per_node_s": {n["node_id"]: n["duration_s"] for n in audit["out"]["nodes"]},
                  "rows": {n["node_id"]: n["rows_checked"] for n in audit["out"]["nodes"]}},
    }


def _timed(*command: str) -> dict[str, Any]:
    started = time.time()
    out = _run(*command, check=False)
    ended = time.time()
    return {"wall_s": round(ended - started, 2), "window": (started, ended),
            "out": json.loads(out)}


def _run(*command: str, check: bool = True) -> str:
    done = subprocess.run([sys.executable, "-m", *(["om"] if command[0] == "om" else []),
                           *command[1:]], capture_output=True, text=True, check=check)
    return done.stdout


def _rates(trace: Path) -> list[float]:
    """Completion times (s) of the writes that succeeded."""
    ends = []
    for line in trace.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "client_request" and record.get("status") == "OK":
            ends.append((record["t_ns"] + record["latency_ns"]) / 1e9)
    return ends


def _rate(ends: list[float], start: float, end: float) -> float:
    return round(sum(1 for t in ends if start <= t < end) / max(end - start, 1e-9), 1)


if __name__ == "__main__":
    sys.exit(main())
