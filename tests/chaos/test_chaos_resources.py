"""The soak's resource bounds (om/chaos/resources.py) and its calm/storm phases.

The red cases are real: a child process that leaks memory and descriptors is
sampled the way a node is, and the bounds must report it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from om.chaos import resources
from om.chaos.nemesis import RESTARTS, Nemesis
from om.chaos.resources import MIB, Bounds, Sample

LEAKER = """
import http.server, os, sys, threading, time
LEAKS = sys.argv[1] == "leaks"
cache, hoard, files = [], [], []

class Gauges(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        held = sum(len(chunk) for chunk in cache)
        body = (f"om_store_memtable_bytes 0\\nom_store_block_cache_bytes {held}\\n"
                "om_retry_cache_bytes 0\\nom_checkpoint_cache_bytes 0\\n"
                "om_digest_leaf_cache_bytes 0\\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gauges)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdout.write(f"{server.server_address[1]}\\n"); sys.stdout.flush()
for _ in range(300):
    cache.append(bytearray(1 << 20))              # a cache its gauge accounts for
    if LEAKS:
        hoard.append(bytearray(1 << 20))          # memory no gauge accounts for
        files.append(os.open(os.devnull, os.O_RDONLY))
    time.sleep(0.02)
time.sleep(30)
"""


def _series(node: str, pid: int, rss_mib: Sequence[float], step_s: float = 10.0,
            fds: int = 40, caches_mib: Sequence[float] | None = None) -> list[Sample]:
    caches = caches_mib or [0.0] * len(rss_mib)
    return [Sample(i * step_s, node, pid, int(r * MIB), fds, int(c * MIB))
            for i, (r, c) in enumerate(zip(rss_mib, caches, strict=True))]


def test_a_flat_lifetime_has_no_growth_and_no_violation() -> None:
    samples = _series("om1", 11, [100.0] * 30)
    assert resources.growth_per_hour(samples, Bounds()) == pytest.approx(0.0)
    assert resources.check(samples, Bounds()) == []


def test_a_lifetime_that_warms_up_then_settles_is_not_a_leak() -> None:
    warming = [100.0 + 3 * i for i in range(12)] + [136.0] * 18   # caches fill, then stop
    samples = _series("om1", 11, warming)
    growth = resources.growth_per_hour(samples, Bounds())
    assert growth == pytest.approx(0.0)
    assert resources.check(samples, Bounds()) == []


def test_a_steady_leak_is_measured_per_hour_and_reported() -> None:
    samples = _series("om1", 11, [100.0 + i for i in range(30)])    # 1 MiB / 10 s
    growth = resources.growth_per_hour(samples, Bounds())
    assert growth == pytest.approx(360 * MIB)
    kinds = {v.kind for v in resources.check(samples, Bounds())}
    assert kinds == {"memory_growth"}
    assert resources.summarize(samples, Bounds())["nodes"]["om1"]["growth_mib_per_h"] == 360.0


def test_restarts_split_lifetimes_and_short_ones_are_not_judged() -> None:
    # each lifetime climbs 5 MiB in 40 s (a fresh process warming up): far too short
    samples = [s for pid in (11, 12, 13) for s in _series("om1", pid, [80.0 + i for i in
                                                                        range(5)])]
    assert len(resources.segments(samples)) == 3
    assert resources.check(samples, Bounds()) == []
    node = resources.summarize(samples, Bounds())["nodes"]["om1"]
    assert node["lifetimes"] == 3
    assert node["judged_lifetimes"] == 0
    assert node["growth_mib_per_h"] is None


def test_ceilings_on_descriptors_and_memory() -> None:
    samples = _series("om2", 7, [100.0, 3000.0], fds=2000)
    kinds = {v.kind for v in resources.check(samples, Bounds())}
    assert kinds == {"descriptors", "memory"}


def test_caches_filling_to_their_bounds_are_not_growth_but_the_rest_is() -> None:
    rss = [100.0 + 2 * i for i in range(30)]
    filling = resources.check(_series("om1", 11, rss, caches_mib=[2.0 * i for i in range(30)]),
                              Bounds())
    assert filling == []
    half = _series("om1", 11, rss, caches_mib=[1.0 * i for i in range(30)])
    assert resources.growth_per_hour(half, Bounds()) == pytest.approx(360 * MIB)
    assert {v.kind for v in resources.check(half, Bounds())} == {"memory_growth"}


def test_samples_without_gauges_are_not_judged() -> None:
    samples = [Sample(s.t_s, s.node, s.pid, s.rss_bytes, s.fds, None)
               for s in _series("om1", 11, [100.0 + i for i in range(30)])]
    assert resources.growth_per_hour(samples, Bounds()) is None
    assert resources.summarize(samples, Bounds())["nodes"]["om1"]["judged_lifetimes"] == 0


def _sample_until_grown(processes: dict[str, tuple[int, str]], grown_bytes: int,
                        timeout_s: float = 60.0) -> list[Sample]:
    """Samples the processes until each one's gauges grew by ``grown_bytes`` over at least
    ten samples (on a busy machine the children fill more slowly), or ``timeout_s``."""
    sampler = resources.Sampler(
        lambda: [(name, pid, url) for name, (pid, url) in processes.items()], interval_s=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=sampler.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(
            _grown([s for s in sampler.snapshot() if s.node == name], grown_bytes)
            for name in processes):
        time.sleep(0.2)
    stop.set()
    thread.join(timeout=10)
    return sampler.snapshot()


def _grown(samples: list[Sample], grown_bytes: int) -> bool:
    accounted = [s.accounted_bytes for s in samples if s.accounted_bytes is not None]
    return len(samples) >= 10 and len(accounted) >= 2 \
        and accounted[-1] > accounted[0] + grown_bytes


def test_real_processes_a_leak_is_seen_and_a_cache_filling_is_not() -> None:
    """Two real processes, each serving its gauges over HTTP as a node does: both fill
    a cache their gauge reports; one also leaks memory and descriptors."""
    children = {name: subprocess.Popen([sys.executable, "-c", LEAKER, name],
                                       stdout=subprocess.PIPE, text=True)
                for name in ("leaks", "caches")}
    try:
        urls = {}
        for name, child in children.items():
            assert child.stdout is not None
            urls[name] = f"http://127.0.0.1:{int(child.stdout.readline())}/metrics"
        samples = _sample_until_grown({name: (child.pid, urls[name])
                                       for name, child in children.items()}, 110 * MIB)
    finally:
        for child in children.values():
            child.kill()
            child.wait()
            assert child.stdout is not None
            child.stdout.close()
    by_node = {name: [s for s in samples if s.node == name] for name in children}
    assert min(len(found) for found in by_node.values()) >= 10
    for found in by_node.values():
        assert found[-1].rss_bytes > found[0].rss_bytes + 100 * MIB
        assert all(s.accounted_bytes is not None for s in found)
        first, last = found[0].accounted_bytes, found[-1].accounted_bytes
        assert first is not None
        assert last is not None
        assert last > first + 100 * MIB
    leaks = by_node["leaks"]
    assert leaks[-1].fds > leaks[0].fds + 50
    # the leak grows ~50 MiB/s; a gauge read a few ms after RSS is off by a chunk or two
    tight = Bounds(fds_max=leaks[0].fds + 20, segment_min_s=1.0, warmup_s=0.2,
                   growth_max_bytes_per_h=10_000 * MIB)
    assert {v.kind for v in resources.check(leaks, tight)} >= {"memory_growth", "descriptors"}
    assert resources.check(by_node["caches"], tight) == []
    leaked, cached = (resources.growth_per_hour(by_node[name], tight) for name in children)
    assert leaked is not None
    assert cached is not None
    assert abs(cached) < leaked / 20
    assert resources.measure(children["leaks"].pid) is None, "a process gone measures None"


class _Recording(Nemesis):
    """A nemesis that records what it would inject, against no cluster."""

    injected: list[str]

    def inject(self, action: str, stop: threading.Event) -> None:
        self.injected.append(action)


def test_a_calm_phase_skips_the_faults_that_restart_processes() -> None:
    faults = ("kill_leader", "pause_leader", "restart_all", "member_maintenance",
              "member_add_remove", "member_transfer")
    nemesis = _Recording(cluster=None, faults=faults, interval_s=0.01,  # type: ignore[arg-type]
                         calm_s=3600.0, storm_s=1.0)
    nemesis.injected = []
    nemesis.run(threading.Event(), faults_max=20)
    assert len(nemesis.injected) == 20
    assert not set(nemesis.injected) & RESTARTS
    assert set(nemesis.injected) == {"pause_leader", "member_transfer"}, \
        "maintenance stops and restarts its node: a calm phase skips it too"
    assert nemesis.calm(10.0)
    assert not nemesis.calm(3600.5), "the storm follows the calm"
    assert nemesis.calm(3601.5), "and the next cycle starts calm"


def test_without_phases_every_fault_takes_its_turn() -> None:
    faults = ("kill_leader", "pause_leader", "restart_all")
    nemesis = _Recording(cluster=None, faults=faults, interval_s=0.01)  # type: ignore[arg-type]
    nemesis.injected = []
    nemesis.run(threading.Event(), faults_max=6)
    assert nemesis.injected == [*faults, *faults]


class _Raising(_Recording):
    """A nemesis whose every other fault raises, as a nemesis bug would."""

    healed: int

    def inject(self, action: str, stop: threading.Event) -> None:
        self.injected.append(action)
        if len(self.injected) % 2:
            raise KeyError("om1>om1")

    def heal(self) -> None:
        self.healed += 1


def test_a_fault_that_raises_is_recorded_healed_and_the_faults_go_on() -> None:
    """A soak's nemesis thread once died on a KeyError 20 minutes in, and the run went on
    without faults: now the failure is kept (the runner reports it as a violation)."""
    nemesis = _Raising(cluster=None, faults=("pause_leader",),  # type: ignore[arg-type]
                       interval_s=0.01)
    nemesis.injected, nemesis.healed = [], 0
    nemesis.run(threading.Event(), faults_max=6)
    assert len(nemesis.injected) == 6, "the faults went on"
    assert nemesis.healed == 3
    assert nemesis.failed == ["pause_leader: KeyError: 'om1>om1'"] * 3


class _Cluster:
    """Three nodes whose leader moves at every read of it (a transfer under way)."""

    nodes = [type("Node", (), {"id": f"om{i}"})() for i in (1, 2, 3)]

    def __init__(self) -> None:
        self.reads = 0

    def node_infos(self, timeout_s: float) -> list[Any]:
        self.reads += 1
        leader = self.nodes[(self.reads - 1) % 3].id
        return [type("Info", (), {"node_id": n.id, "role": "LEADER" if n.id == leader
                                  else "FOLLOWER"})() for n in self.nodes]


class _Links:
    def __init__(self) -> None:
        self.cuts: list[tuple[str, str]] = []

    def cut_both_ways(self, first: str, second: str) -> None:
        self.cuts.append((first, second))

    def heal(self) -> None:
        pass


def test_a_bridge_cuts_two_distinct_nodes_while_leadership_moves() -> None:
    links = _Links()
    nemesis = Nemesis(cluster=_Cluster(), faults=("bridge",), links=links,  # type: ignore[arg-type]
                      hold_s=0.01)
    for _ in range(3):
        nemesis.inject("bridge", threading.Event())
    assert all(first != second for first, second in links.cuts), links.cuts
