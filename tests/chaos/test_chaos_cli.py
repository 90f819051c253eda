"""The soak's options (om/cli/chaos.py): cycle lengths by run length, and the pacing
that bounds a long run's history, so the load generator does not run out of memory."""

from __future__ import annotations

import threading

import pytest

from om.chaos.workload import Recorder, Worker, WorkloadConfig
from om.cli.chaos import (
    LONG_CALM_S,
    LONG_OP_PAUSE_S,
    LONG_STORM_S,
    PROFILES,
    SOAK_CALM_S,
    SOAK_STORM_S,
    WORKLOADS,
    cycles,
    op_pause,
    ops_budget,
)


def test_a_two_hour_soak_has_twenty_minute_calm_phases() -> None:
    assert cycles(PROFILES["soak2h"], None, None) == (LONG_CALM_S, LONG_STORM_S)
    assert LONG_CALM_S >= 1200
    assert cycles(PROFILES["soak"], None, None) == (SOAK_CALM_S, SOAK_STORM_S)


@pytest.mark.parametrize("profile", ["soak", "soak2h"])
def test_a_soak_ends_at_a_storms_end(profile: str) -> None:
    """A run that ended inside a calm phase would judge the memory of lifetimes the
    end cut short (caches still filling): each soak is a whole number of cycles."""
    calm, storm = cycles(PROFILES[profile], None, None)
    whole = PROFILES[profile] / (calm + storm)
    assert whole == int(whole) >= 3, (profile, calm, storm)


def test_given_cycle_lengths_win_and_must_be_positive() -> None:
    assert cycles(7200, 120, 60) == (120, 60)
    assert cycles(300, 90, None) == (90, SOAK_STORM_S)
    with pytest.raises(ValueError, match="positive"):
        cycles(300, 0, 60)


def test_a_long_run_is_paced_and_a_short_one_is_not() -> None:
    assert op_pause(PROFILES["soak"], None) == 0.0
    assert op_pause(PROFILES["soak2h"], None) == LONG_OP_PAUSE_S
    assert op_pause(7200, 0) == 0.0
    with pytest.raises(ValueError, match="op-pause"):
        op_pause(60, -1)


def test_the_paced_two_hour_history_stays_small() -> None:
    """The workers paced at LONG_OP_PAUSE_S cannot exceed ~0.75 M ops in two hours
    (about a 20-minute unpaced soak's), whatever the cluster's speed."""
    workers = sum(WORKLOADS.values())
    assert workers * PROFILES["soak2h"] / LONG_OP_PAUSE_S <= 750_000
    assert ops_budget(PROFILES["soak2h"]) > PROFILES["soak2h"] / LONG_OP_PAUSE_S


def test_a_worker_pauses_between_operations() -> None:
    """Red case: without the pause, the worker would spend its whole budget at once."""
    stop = threading.Event()
    config = WorkloadConfig(ops_per_worker_max=1_000, op_pause_s=0.05)
    worker = Worker(0, ["127.0.0.1:1"], Recorder(), config, stop)
    steps: list[int] = []
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    worker.run(lambda: steps.append(1))
    timer.join()
    assert 3 <= len(steps) <= 12
