"""What a chaos run's nodes hold: resident memory and open descriptors, sampled, bounded.

A soak must show that a node leaks neither memory nor descriptors under faults.
``Sampler`` reads, every ``interval_s``, each node's process tree (the server,
its Raft process and its front workers, through psutil) and records the
tree's total RSS and open descriptors. A process killed
and restarted by the nemesis starts a new *segment* (a new pid); memory growth
is judged per segment, over segments long enough to mean something, on the
later half of each (caches and memtables fill first), as a least-squares slope
in bytes per hour, *net of the memory the node says its bounded caches hold*: the
sampler also reads the node's Prometheus gauges of its RocksDB memtables and block
cache, its retry caches' replies, the checkpoints it reads (OM snapshots) and its digests'
leaf cache (``ACCOUNTED``), and judges the slope of RSS
minus their sum. A cache filling to its bound is then not read as a leak (a
fault-free soak: the leader's RSS rose from 81 to 216-232 MiB in 11 minutes as its
block cache and retry cache filled, then stayed there: docs/RELIABILITY.md),
while anything else that keeps growing still is. A sample whose gauges could not
be read is left out of the judgment. ``check`` turns the bounds into violations for the run's result
(checker ``resources``): a descriptor count or an RSS above its ceiling at any
sample, or a long segment growing faster than the bound.

Samples are bounded (``SAMPLES_MAX``): a run longer than that at the interval
keeps sampling every other time (the series halves), never growing without end.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from om.chaos.checkers import Violation

RESOURCES = "resources"
SAMPLES_MAX = 20_000
MIB = 1 << 20
# The gauges of the memory a node's bounded caches hold (om/observe/metrics.py).
ACCOUNTED = ("om_store_memtable_bytes", "om_store_block_cache_bytes", "om_retry_cache_bytes",
             "om_checkpoint_cache_bytes", "om_digest_leaf_cache_bytes")
SCRAPE_TIMEOUT_S = 2.0
SCRAPE_BYTES_MAX = 1 << 20


@dataclass(frozen=True)
class Sample:
    """One node's process tree at one moment."""

    t_s: float        # seconds since the sampler started
    node: str
    pid: int          # the node's server process: a new one after each restart
    rss_bytes: int
    fds: int
    accounted_bytes: int | None = None   # the bounded caches' (ACCOUNTED); None: unread


@dataclass(frozen=True)
class Bounds:
    """What a healthy node stays within (a node tree: server, Raft process, fronts)."""

    fds_max: int = 1024
    rss_max_bytes: int = 2048 * MIB
    growth_max_bytes_per_h: int = 256 * MIB
    segment_min_s: float = 240.0     # shorter lifetimes are reported, not judged
    warmup_s: float = 30.0


def measure(pid: int) -> tuple[int, int] | None:
    """(RSS bytes, open descriptors) of ``pid`` and every process below it (psutil);
    None when ``pid`` is gone. A child that exits meanwhile is left out."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    rss = fds = 0
    for member in tree:
        try:
            with member.oneshot():
                rss += member.memory_info().rss
                fds += member.num_fds()
        except psutil.Error:
            if member is root:
                return None
    return rss, fds


def accounted(metrics_url: str) -> int | None:
    """The sum of the ``ACCOUNTED`` gauges a node's metrics page shows; None when the page
    cannot be read or lacks one of them."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=SCRAPE_TIMEOUT_S) as page:
            text = page.read(SCRAPE_BYTES_MAX).decode()
    except (OSError, urllib.error.URLError, UnicodeDecodeError):
        return None
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ACCOUNTED:
            found[name] = float(value)
    return int(sum(found.values())) if len(found) == len(ACCOUNTED) else None


class Sampler:
    """Samples every node of a cluster until stopped (a thread's ``run``): each node's
    (id, server pid or None, metrics URL or "")."""

    def __init__(self, nodes: Callable[[], Iterable[tuple[str, int | None, str]]],
                 interval_s: float = 5.0) -> None:
        assert interval_s > 0
        self._nodes = nodes
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        started = time.monotonic()
        while not stop.wait(self.interval_s):
            self.sample_once(time.monotonic() - started)

    def sample_once(self, t_s: float) -> None:
        for node, pid, metrics_url in self._nodes():
            if pid is None:
                continue
            found = measure(pid)
            if found is not None:
                held = accounted(metrics_url) if metrics_url else None
                self._add(Sample(round(t_s, 2), node, pid, found[0], found[1], held))

    def _add(self, sample: Sample) -> None:
        with self._lock:
            self.samples.append(sample)
            if len(self.samples) >= SAMPLES_MAX:
                self.samples = self.samples[::2]
                self.interval_s *= 2

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)


def segments(samples: Sequence[Sample]) -> dict[tuple[str, int], list[Sample]]:
    """The samples of each process lifetime (node, server pid), in time order."""
    found: dict[tuple[str, int], list[Sample]] = {}
    for sample in sorted(samples, key=lambda s: s.t_s):
        found.setdefault((sample.node, sample.pid), []).append(sample)
    return found


def unaccounted(sample: Sample) -> int:
    """The resident bytes the node's bounded caches do not account for."""
    assert sample.accounted_bytes is not None
    return sample.rss_bytes - sample.accounted_bytes


def growth_per_hour(segment: Sequence[Sample], bounds: Bounds) -> float | None:
    """The slope (bytes/hour, least squares) of RSS net of the bounded caches
    (``unaccounted``) over the later half of a lifetime (and past the warm-up): what
    keeps growing once the caches are accounted for is a leak; None when the lifetime
    is shorter than ``segment_min_s`` or has too few samples with gauges there."""
    if not segment or segment[-1].t_s - segment[0].t_s < bounds.segment_min_s:
        return None
    settled = max(bounds.warmup_s, (segment[-1].t_s - segment[0].t_s) / 2)
    warm = [s for s in segment
            if s.t_s >= segment[0].t_s + settled and s.accounted_bytes is not None]
    if len(warm) < 3:
        return None
    mean_t = sum(s.t_s for s in warm) / len(warm)
    mean_r = sum(unaccounted(s) for s in warm) / len(warm)
    spread = sum((s.t_s - mean_t) ** 2 for s in warm)
    assert spread > 0, "samples of one segment are at distinct times"
    slope = sum((s.t_s - mean_t) * (unaccounted(s) - mean_r) for s in warm) / spread
    return slope * 3600.0


def summarize(samples: Sequence[Sample], bounds: Bounds) -> dict[str, Any]:
    """Per node: lifetimes, RSS and descriptors seen, and the worst judged growth."""
    nodes: dict[str, dict[str, Any]] = {}
    for (node, _), segment in segments(samples).items():
        entry = nodes.setdefault(node, {"lifetimes": 0, "rss_max_mib": 0.0, "fds_max": 0,
                                        "caches_max_mib": 0.0, "judged_lifetimes": 0,
                                        "growth_mib_per_h": None, "longest_lifetime_s": 0.0})
        entry["lifetimes"] += 1
        entry["rss_max_mib"] = max(entry["rss_max_mib"],
                                   round(max(s.rss_bytes for s in segment) / MIB, 1))
        entry["caches_max_mib"] = max(entry["caches_max_mib"], round(max(
            (s.accounted_bytes or 0 for s in segment), default=0) / MIB, 1))
        entry["fds_max"] = max(entry["fds_max"], max(s.fds for s in segment))
        entry["longest_lifetime_s"] = max(entry["longest_lifetime_s"],
                                          round(segment[-1].t_s - segment[0].t_s, 1))
        growth = growth_per_hour(segment, bounds)
        if growth is not None:
            entry["judged_lifetimes"] += 1
            worst = entry["growth_mib_per_h"]
            mib = round(growth / MIB, 1)
            entry["growth_mib_per_h"] = mib if worst is None else max(worst, mib)
    return {"samples": len(samples), "bounds": {
        "fds_max": bounds.fds_max, "rss_max_mib": bounds.rss_max_bytes // MIB,
        "growth_max_mib_per_h": bounds.growth_max_bytes_per_h // MIB,
        "segment_min_s": bounds.segment_min_s}, "nodes": nodes}


def check(samples: Sequence[Sample], bounds: Bounds) -> list[Violation]:
    """A violation per node whose descriptors, RSS or judged growth passed a bound."""
    violations = []
    for (node, pid), segment in segments(samples).items():
        fds = max(s.fds for s in segment)
        if fds > bounds.fds_max:
            violations.append(Violation(RESOURCES, "descriptors", f"{node} (pid {pid}) held "
                                        f"{fds} open descriptors, over {bounds.fds_max}"))
        rss = max(s.rss_bytes for s in segment)
        if rss > bounds.rss_max_bytes:
            violations.append(Violation(RESOURCES, "memory", f"{node} (pid {pid}) reached "
                                        f"{rss // MIB} MiB resident, over "
                                        f"{bounds.rss_max_bytes // MIB} MiB"))
        growth = growth_per_hour(segment, bounds)
        if growth is not None and growth > bounds.growth_max_bytes_per_h:
            violations.append(Violation(RESOURCES, "memory_growth", f"{node} (pid {pid}) grew "
                                        f"{growth / MIB:.0f} MiB/h beyond its caches over "
                                        f"{segment[-1].t_s - segment[0].t_s:.0f} s, over "
                                        f"{bounds.growth_max_bytes_per_h // MIB} MiB/h"))
    return violations
