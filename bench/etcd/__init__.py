"""The etcd flow of ``om bench``: the peer our durable write throughput is held against.

``run_etcd`` starts a 3-member etcd (Debian's ``etcd-server``, always durable:
it fsyncs its WAL before acknowledging) on free 127.0.0.1 ports, drives it with
``etcdbench`` (``main.go`` here: a Go client on etcd's ``clientv3``, built at
run time against Debian's packaged sources) under the same load shape as the OM
flows (the same number of requests in flight, the same warm-up and measured
seconds, closed loop, unique keys), and reads back the client_request trace
the client wrote (op ``Put``) into a ``FreonResult``, so the summary, the
ratios and the Spark report treat it like any other flow. One etcd put is one
write request, as one CreateKey or CommitKey is.

Where etcd or Go cannot be had, ``EtcdUnavailable`` says why and the driver
records the flow as skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.freon import FreonResult
from bench.machine import CpuMeter, rss_mb
from bench.machine_load import MachineLoad
from bench.summary import CLIENT_PROCESS
from bench.traces import CLIENT_ERROR

SOURCE = Path(__file__).with_name("main.go")
GOPATH = Path("/usr/share/gocode")  # Debian's golang-etcd-server-dev
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "om-bench"
MEMBERS = 3
START_TIMEOUT_S = 30.0
INSTALL_HINT = "apt-get install etcd-server golang-go golang-etcd-server-dev"


class EtcdUnavailable(Exception):
    """etcd or its Go client cannot be had on this machine; the message says why."""


@dataclass(frozen=True)
class EtcdRun:
    """What one etcd run measured."""

    result: FreonResult
    cpu: dict[str, dict[str, float]]
    rss_mb: dict[str, float]
    leader: str                  # the member that led (e1, e2, e3), "" if unknown
    machine: MachineLoad | None  # the whole machine over the measured window


def client_binary() -> Path:
    """The etcdbench binary, built once per version of ``main.go``."""
    if shutil.which("etcd") is None:
        raise EtcdUnavailable(f"etcd is not installed ({INSTALL_HINT})")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    binary = CACHE / f"etcdbench-{digest}"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise EtcdUnavailable(f"go is not installed ({INSTALL_HINT})")
    if not (GOPATH / "src/go.etcd.io/etcd/clientv3").is_dir():
        raise EtcdUnavailable(f"etcd's Go sources are not installed ({INSTALL_HINT})")
    CACHE.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(
        ["go", "build", "-o", str(binary), "."], cwd=SOURCE.parent, capture_output=True,
        text=True, timeout=600, check=False,
        env={**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH)})
    if built.returncode != 0:
        raise EtcdUnavailable(f"building etcdbench failed: {built.stderr.strip()[-400:]}")
    return binary


def client_port(port_base: int, member: int) -> int:
    """Member ``member``'s (1-based) client port: the OM layout's client ports."""
    return port_base + member - 1


def peer_port(port_base: int, member: int) -> int:
    """Member ``member``'s peer port: the OM layout's Raft ports."""
    return port_base + 10 + member - 1


@contextmanager
def etcd_cluster(directory: Path, port_base: int) -> Iterator[dict[str, int]]:
    """Three etcd members on 127.0.0.1 (ports as ``om.cluster.lifecycle.free_port_base`` checks
    them); yields {member: pid}; always stops them."""
    peers = ",".join(f"e{i}=http://127.0.0.1:{peer_port(port_base, i)}"
                     for i in range(1, MEMBERS + 1))
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for i in range(1, MEMBERS + 1):
            client = f"http://127.0.0.1:{client_port(port_base, i)}"
            peer = f"http://127.0.0.1:{peer_port(port_base, i)}"
            with (directory / f"e{i}.log").open("wb") as log:
                processes[f"e{i}"] = subprocess.Popen(
                    ["etcd", "--name", f"e{i}", "--data-dir", str(directory / f"e{i}"),
                     "--listen-client-urls", client, "--advertise-client-urls", client,
                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                     "--initial-cluster", peers, "--initial-cluster-state", "new",
                     "--log-level", "error"], stdout=log, stderr=subprocess.STDOUT)
        _wait_healthy(port_base, processes)
        yield {name: process.pid for name, process in processes.items()}
    finally:
        for process in processes.values():
            process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)


def _wait_healthy(port_base: int, processes: dict[str, subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        dead = [name for name, process in processes.items() if process.poll() is not None]
        if dead:
            raise RuntimeError(f"etcd members {dead} exited at start; see their logs")
        if all(_healthy(client_port(port_base, i)) for i in range(1, MEMBERS + 1)):
            return
        time.sleep(0.2)
    raise RuntimeError(f"etcd was not healthy within {START_TIMEOUT_S} s")


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
            return bool(json.loads(answer.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def leader(port_base: int) -> str:
    """The member that leads now ("" when no member says): etcd's maintenance status
    (``/v3/maintenance/status`` on its gRPC gateway) names each member and its leader."""
    ids: dict[int, str] = {}
    leader_id = 0
    for i in range(1, MEMBERS + 1):
        request = urllib.request.Request(
            f"http://127.0.0.1:{client_port(port_base, i)}/v3/maintenance/status", data=b"{}",
            method="POST")
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                status = json.loads(answer.read())
        except (OSError, ValueError):
            continue
        ids[int(status["header"]["member_id"])] = f"e{i}"
        leader_id = int(status.get("leader", 0)) or leader_id
    return ids.get(leader_id, "")


def run_etcd(directory: Path, trace: Path, threads: int, warmup_s: float, measure_s: float,
             port_base: int) -> EtcdRun:
    """Starts etcd in ``directory``, loads it, and returns what the client measured."""
    binary = client_binary()
    directory.mkdir(parents=True, exist_ok=True)
    with etcd_cluster(directory, port_base) as pids:
        endpoints = ",".join(f"127.0.0.1:{client_port(port_base, i)}"
                             for i in range(1, MEMBERS + 1))
        client = subprocess.Popen(
            [str(binary), "-endpoints", endpoints, "-c", str(threads),
             "-warmup", f"{warmup_s}s", "-d", f"{measure_s}s", "-trace", str(trace)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        meter = CpuMeter({**pids, CLIENT_PROCESS: client.pid})
        time.sleep(warmup_s)
        meter.start()
        time.sleep(measure_s)
        window = meter.stop()
        led = leader(port_base)
        rss = {name: value for name, pid in pids.items() if (value := rss_mb(pid)) is not None}
        try:
            _, err = client.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            client.kill()
            client.communicate()
            raise RuntimeError("etcdbench did not finish in time") from None
    if client.returncode != 0:
        raise RuntimeError(f"etcdbench failed: {err.decode().strip()[-400:]}")
    return EtcdRun(read_result(trace, threads, measure_s), window.processes, rss, led,
                   window.machine)


def read_result(trace: Path, threads: int, measure_s: float) -> FreonResult:
    """A FreonResult from etcdbench's client_request records."""
    result = FreonResult("etcd-put", "etcd-put", "etcd", "", threads)
    starts: list[int] = []
    ends: list[int] = []
    for line in trace.read_text().splitlines():
        record = json.loads(line)
        latency = int(record["latency_ns"])
        status = str(record["status"])
        result.operations += 1
        result.requests["Put", status] += 1
        result.latency.add(latency)
        if status == "OK":
            result.write_latency.add(latency)
            result.op_latency.setdefault("Put", type(result.latency)()).add(latency)
        else:
            result.failures += 1
            result.failure_statuses[status if status else CLIENT_ERROR] += 1
        starts.append(int(record["t_ns"]))
        ends.append(int(record["t_ns"]) + latency)
    result.duration_s = measure_s
    result.start_ns = min(starts, default=0)
    result.end_ns = max(ends, default=0)
    return result
