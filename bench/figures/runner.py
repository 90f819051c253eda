"""What the figures share: a seeded 3-node cluster, ``om freon`` load, and the numbers.

The command builders and the arithmetic (``om_command``, ``freon_omkg_command``,
``generate_command``, ``ok_completion_times``, ``rate_between``,
``percentile_ms``, ``replicas_equal``) are pure; the rest starts and stops
processes. Every cluster is a leader-flow cluster of ``NODES`` nodes on free
ports of 127.0.0.1, always stopped on the way out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from om.cluster import lifecycle as om_cluster
from om.cluster import preload
from om.protocol import om_pb2

NODES = 3
# Another benchmark on the same two cores would move every figure.
OTHER_BENCHMARKS = "om bench|om freon|-m om freon|-m om bench"
QUIET_POLL_S = 10.0


@dataclass(frozen=True)
class Timed:
    """A command's wall time, its window (wall clock, seconds) and its JSON output."""

    wall_s: float
    window: tuple[float, float]
    out: Any


def om_command(*args: str) -> list[str]:
    """``python -m om ARGS`` with this interpreter (so it runs this checkout's ``om``)."""
    return [sys.executable, "-m", "om", *args]


def freon_omkg_command(threads: int, duration_s: int, *, addresses: Sequence[str] = (),
                       cluster_dir: Path | None = None, volume: str = "", bucket: str = "",
                       prefix: str = "", trace: Path | None = None,
                       json_path: Path | None = None, rate: int = 0) -> list[str]:
    """``om freon omkg`` against one cluster, named by its addresses or its directory
    (the directory also gives the tools' certificate)."""
    assert threads > 0
    assert duration_s > 0
    assert (cluster_dir is None) != (not addresses), "name the cluster one way"
    args = ["freon", "omkg", "-t", str(threads), "--duration", str(duration_s)]
    if cluster_dir is not None:
        args += ["--dir", str(cluster_dir)]
    else:
        args += ["--om", ",".join(addresses)]
    if rate:
        args += ["--rate", str(rate)]
    for flag, value in (("-v", volume), ("-b", bucket), ("-p", prefix)):
        if value:
            args += [flag, value]
    if trace is not None:
        args += ["--trace", str(trace)]
    if json_path is not None:
        args += ["--json", str(json_path)]
    return om_command(*args)


def generate_command(data_dirs: Sequence[Path], keys: int, volume: str,
                     bucket: str) -> list[str]:
    """``om freon generate`` into the first data directory, byte-identical copies in the
    others."""
    assert data_dirs
    assert keys >= 0
    first, *others = data_dirs
    copies = ["--copy-to", *map(str, others)] if others else []
    return om_command("freon", "generate", "--data-dir", str(first), *copies,
                      "--keys", str(keys), "-v", volume, "-b", bucket)


def ok_completion_times(trace_lines: Iterable[str]) -> list[float]:
    """When (wall clock, seconds) each successful request of a client trace ended."""
    ends = []
    for line in trace_lines:
        record = json.loads(line)
        if record.get("kind") == "client_request" and record.get("status") == "OK":
            ends.append((record["t_ns"] + record["latency_ns"]) / 1e9)
    return ends


def rate_between(ends: Sequence[float], start: float, end: float) -> float:
    """Completions per second in [start, end), to a tenth."""
    return round(sum(1 for t in ends if start <= t < end) / max(end - start, 1e-9), 1)


def percentile_ms(seconds: Sequence[float], share: float) -> float:
    """The sample at rank ``len * share`` (1-based, no interpolation), in ms to a tenth."""
    assert seconds
    assert 0 < share <= 1
    return round(sorted(seconds)[int(len(seconds) * share) - 1] * 1000, 1)


def replicas_equal(digests: dict[str, dict[str, str]]) -> bool:
    """Whether every node's per-table digests are the same."""
    return len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1


def write_rate(freon_json: Path) -> float:
    """The write requests per second an ``om freon ... --json`` run recorded."""
    return float(json.loads(freon_json.read_text())["write_requests_per_s"])


def wait_for_quiet() -> None:
    """Waits until no other benchmark runs."""
    while True:
        others = subprocess.run(["pgrep", "-f", OTHER_BENCHMARKS],
                                capture_output=True, text=True).stdout.split()
        if not others:
            return
        print(f"waiting: another benchmark runs ({', '.join(others)})", file=sys.stderr)
        time.sleep(QUIET_POLL_S)


def run_om(*args: str, check: bool = True) -> str:
    """Runs ``om ARGS`` to the end; its standard output."""
    return subprocess.run(om_command(*args), capture_output=True, text=True,
                          check=check).stdout


def timed_om_json(*args: str) -> Timed:
    """Runs ``om ARGS`` (which prints JSON; its exit status is not checked), timed."""
    started = time.time()
    out = run_om(*args, check=False)
    ended = time.time()
    return Timed(round(ended - started, 2), (started, ended), json.loads(out))


def new_cluster(directory: Path, *, tls: bool | None = None,
                extra_toml: str = "") -> om_cluster.Cluster:
    """A leader-flow cluster configured in ``directory`` (Raft secret; client TLS
    unless ``tls`` is False), not started."""
    om_cluster.write_config(directory, NODES, om_cluster.free_port_base(), "leader",
                            extra_toml, tls=tls)
    return om_cluster.Cluster(directory)


def fresh_directory(directory: Path) -> Path:
    """``directory``, emptied of what an earlier run left there."""
    shutil.rmtree(directory, ignore_errors=True)
    return directory


def seed_by_generating(cluster: om_cluster.Cluster, keys: int, volume: str,
                       bucket: str) -> None:
    """Every node's database generated offline (``om freon generate``), before it starts."""
    data = cluster.config.data_dir
    subprocess.run(generate_command([data / n.id for n in cluster.nodes], keys, volume,
                                    bucket), capture_output=True, text=True, check=True)


def seed_by_copying(cluster: om_cluster.Cluster, seed_db: Path) -> None:
    """Every node's database a copy of ``seed_db`` (hard-linked SST files)."""
    preload.copy_database(seed_db, [cluster.config.data_dir / n.id / "db"
                                    for n in cluster.nodes])


@contextmanager
def started(cluster: om_cluster.Cluster, timeout_s: float) -> Iterator[float]:
    """Starts every node and waits for a ready leader; yields the seconds that took.
    Stops every node on the way out, whatever happened."""
    began = time.monotonic()
    try:
        for node in cluster.nodes:
            cluster.start_node(node.id)
        cluster.wait_ready(timeout_s)
        yield time.monotonic() - began
    finally:
        om_cluster.down(cluster)


@contextmanager
def load_running(command: Sequence[str], *,
                 keep_stderr: bool = False) -> Iterator[subprocess.Popen[bytes]]:
    """Runs a load generator in the background; stops it on the way out if it still runs."""
    load = subprocess.Popen(list(command), stdout=subprocess.DEVNULL,
                            stderr=None if keep_stderr else subprocess.DEVNULL)
    try:
        yield load
    finally:
        if load.poll() is None:
            load.terminate()
        load.wait(timeout=30)


def run_load(command: Sequence[str]) -> None:
    """Runs a load generator to its end; raises if it failed."""
    subprocess.run(list(command), check=True, capture_output=True)


def resident_mb(pid: int) -> int:
    """Resident memory of a process and all its descendants, in MiB."""
    process = psutil.Process(pid)
    return round(sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])
                 / 2**20)


def node_info(address: str, timeout_s: float = 1.0) -> om_pb2.NodeInfo:
    """One node's own view (role UNREACHABLE when it does not answer); plain TCP."""
    return om_cluster.node_infos([address], timeout_s)[0]


def prom_text(http_address: str, timeout_s: float = 5.0) -> str:
    """A node's metrics page (``/prom``); empty when it has none or does not answer."""
    if not http_address:
        return ""
    try:
        with urllib.request.urlopen(f"http://{http_address}/prom", timeout=timeout_s) as page:
            return str(page.read().decode())
    except OSError:
        return ""
