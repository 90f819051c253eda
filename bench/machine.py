"""Facts about this machine and its processes, for manifests and summaries.

Every function answers ``None`` (or leaves a key out) rather than fail when
the fact is not available on this platform.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.machine_load import LoadSample, MachineLoad, cpu_percent, machine_load, take_sample

# Distributions whose versions every manifest records.
PACKAGES = ("om-leader", "protobuf", "pysyncobj", "rocksdict", "uvloop", "locust", "gevent")


def rss_mb(pid: int) -> float | None:
    """The resident set size of process ``pid`` in MiB (``VmRSS``), None if unknown."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return None


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (a node's Raft process), empty if unknown."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def command_line(pid: int) -> str:
    """Process ``pid``'s command line, space-separated ("" if unknown)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass(frozen=True)
class CpuSample:
    """Scheduler times of one process's threads so far, in ns: tid -> (running, waiting
    for a CPU while runnable), from ``/proc/<pid>/task/<tid>/schedstat``."""

    pid: int
    threads: dict[int, tuple[int, int]]


def cpu_sample(pid: int) -> CpuSample | None:
    """The process's scheduler times, None when /proc cannot tell."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    threads: dict[int, tuple[int, int]] = {}
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue
        threads[int(task.name)] = (int(fields[0]), int(fields[1]))
    return CpuSample(pid, threads)


def _demand(before: CpuSample, now: CpuSample, wall_ns: int) -> dict[str, float]:
    """cpu, loop_demand, thread_demand and thread_run in percent (see ``CpuMeter``)."""
    demands: dict[int, tuple[float, float]] = {}
    for tid, (run, wait) in now.threads.items():
        if tid in before.threads:
            run_before, wait_before = before.threads[tid]
            ran = 100.0 * (run - run_before) / wall_ns
            demands[tid] = (ran + 100.0 * (wait - wait_before) / wall_ns, ran)
    busiest = max(demands.values(), default=(0.0, 0.0))
    # a thread born in the window counts whole; one that ended in it is lost (CpuMeter.stop
    # prefers the process's own total, which keeps it)
    ran_ns = sum(max(run - before.threads.get(tid, (0, 0))[0], 0)
                 for tid, (run, _) in now.threads.items())
    return {"cpu": 100.0 * ran_ns / wall_ns,
            "loop_demand": demands.get(now.pid, (0.0, 0.0))[0],
            "thread_demand": busiest[0], "thread_run": busiest[1]}


@dataclass(frozen=True)
class CpuWindow:
    """What ``CpuMeter`` saw over one window: each metered process's use, and the whole
    machine's (None where it cannot be read)."""

    processes: dict[str, dict[str, float]]
    machine: MachineLoad | None


class CpuMeter:
    """CPU use of some processes between ``start`` and ``stop``, in percent of one core,
    and the whole machine's over the same window (``bench.machine_load``).

    For each process: ``cpu`` is the CPU time of all its threads, those that ended
    within the window included (the process's own total, from ``/proc/<pid>/stat``:
    Go's runtime, etcd's load generator, starts and ends threads under load, and a sum
    over the threads alive at each end lost theirs, even below zero);
    ``loop_demand`` is the share of wall time its main thread (the event
    loop's) was running or runnable-but-waiting for a CPU; ``thread_demand``
    the same for its busiest thread (e.g. pysyncobj's), and ``thread_run`` the
    share of it that thread ran. A demand near 100 means that thread always had
    work: the process is CPU-bound there, even when the machine's other load keeps
    its ``cpu`` lower.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self._started: dict[str, CpuSample] = {}
        self._load: LoadSample | None = None
        self._wall_ns = 0

    def _now(self) -> dict[str, CpuSample]:
        found = {label: cpu_sample(pid) for label, pid in self._pids.items()}
        return {label: sample for label, sample in found.items() if sample is not None}

    def start(self) -> None:
        """Takes the first samples."""
        self._load = take_sample()
        self._started = self._now()
        self._wall_ns = time.monotonic_ns()

    def stop(self) -> CpuWindow:
        """Each process's {"cpu", "loop_demand", "thread_demand", "thread_run"} by label,
        and the machine's load, since ``start``."""
        assert self._wall_ns > 0, "stop before start"
        wall_ns = max(time.monotonic_ns() - self._wall_ns, 1)
        processes = {label: _demand(self._started[label], now, wall_ns)
                     for label, now in self._now().items() if label in self._started}
        after = take_sample()
        if self._load is None or after is None:
            return CpuWindow(processes, None)
        for label, use in processes.items():
            total = cpu_percent(self._load, after, self._pids[label])
            if total is not None:
                use["cpu"] = total
        return CpuWindow(processes, machine_load(self._load, after, wall_ns / 1e9))


def memory_total_mb() -> float | None:
    """Physical memory in MiB (``MemTotal``), None if unknown."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024.0
    return None


def machine() -> dict[str, Any]:
    """CPU count, memory, Python and platform."""
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_total_mb": memory_total_mb(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def versions() -> dict[str, str | None]:
    """The installed version of each of ``PACKAGES`` (None when not installed)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def git_revision(directory: Path) -> dict[str, Any]:
    """``git rev-parse HEAD`` and whether the tree has local changes, when git can tell."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=directory, capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"revision": git("rev-parse", "HEAD"),
            "dirty": None if status is None else bool(status)}
