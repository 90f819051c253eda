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

import pytest

from om.chaos import resources
from om.chaos.nemesis import RESTARTS, Nemesis
from om.chaos.resources import MIB, Bounds, Sample

LEAKER = """
import os, sys, time
hoard, files = [], []
sys.stdout.write("ready\\n"); sys.stdout.flush()
for _ in range(400):
    hoard.append(bytearray(2 << 20))              # 2 MiB a step
    files.append(os.open(os.devnull, os.O_RDONLY))
    time.sleep(0.02)
time.sleep(30)
"""


def _series(node: str, pid: int, rss_mib: Sequence[float], step_s: float = 10.0,
            fds: int = 40) -> list[Sample]:
    return [Sample(i * step_s, node, pid, int(r * MIB), fds) for i, r in enumerate(rss_mib)]


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


def test_a_real_leaking_process_is_seen_by_the_sampler() -> None:
    leaker = subprocess.Popen([sys.executable, "-c", LEAKER], stdout=subprocess.PIPE, text=True)
    try:
        assert leaker.stdout is not None
        assert leaker.stdout.readline() == "ready\n"
        sampler = resources.Sampler(lambda: [("leaky", leaker.pid)], interval_s=0.2)
        stop = threading.Event()
        thread = threading.Thread(target=sampler.run, args=(stop,))
        thread.start()
        time.sleep(4.0)
        stop.set()
        thread.join(timeout=10)
    finally:
        leaker.kill()
        leaker.wait()
        assert leaker.stdout is not None
        leaker.stdout.close()
    samples = sampler.snapshot()
    assert len(samples) >= 10
    assert samples[-1].rss_bytes > samples[0].rss_bytes + 100 * MIB
    assert samples[-1].fds > samples[0].fds + 50
    tight = Bounds(fds_max=samples[0].fds + 20, segment_min_s=1.0, warmup_s=0.2)
    kinds = {v.kind for v in resources.check(samples, tight)}
    assert {"memory_growth", "descriptors"} <= kinds
    assert resources.measure(leaker.pid) is None, "a process that is gone measures as None"


class _Recording(Nemesis):
    """A nemesis that records what it would inject, against no cluster."""

    injected: list[str]

    def inject(self, action: str, stop: threading.Event) -> None:
        self.injected.append(action)


def test_a_calm_phase_skips_the_faults_that_restart_processes() -> None:
    faults = ("kill_leader", "pause_leader", "restart_all", "member_transfer")
    nemesis = _Recording(cluster=None, faults=faults, interval_s=0.01,  # type: ignore[arg-type]
                         calm_s=3600.0, storm_s=1.0)
    nemesis.injected = []
    nemesis.run(threading.Event(), faults_max=20)
    assert len(nemesis.injected) == 20
    assert not set(nemesis.injected) & RESTARTS
    assert set(nemesis.injected) == {"pause_leader", "member_transfer"}
    assert nemesis.calm(10.0)
    assert not nemesis.calm(3600.5), "the storm follows the calm"
    assert nemesis.calm(3601.5), "and the next cycle starts calm"


def test_without_phases_every_fault_takes_its_turn() -> None:
    faults = ("kill_leader", "pause_leader", "restart_all")
    nemesis = _Recording(cluster=None, faults=faults, interval_s=0.01)  # type: ignore[arg-type]
    nemesis.injected = []
    nemesis.run(threading.Event(), faults_max=6)
    assert nemesis.injected == [*faults, *faults]
