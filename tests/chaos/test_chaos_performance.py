"""The linearizability checker is fast enough for a real chaos run's history."""

from __future__ import annotations

import random
import time

from om.chaos.checkers import check_no_lost_writes
from om.chaos.linearizability import Verdict, check_linearizable

from .chaos_builders import simulate


def test_5000_ops_over_200_keys_from_8_processes_check_quickly() -> None:
    sim = simulate(random.Random(2024), processes=8, ops_per_process=625, keys=200, p_info=0.05)
    assert len(sim.history) == 5000
    started = time.perf_counter()
    result = check_linearizable(sim.history)
    elapsed = time.perf_counter() - started
    assert result.verdict is Verdict.OK
    assert result.keys_checked == 200
    assert elapsed < 5.0, f"took {elapsed:.2f} s"
    assert check_no_lost_writes(sim.history, sim.final_state) == []


def test_hot_keys_with_many_unknown_writes_still_finish() -> None:
    sim = simulate(random.Random(7), processes=10, ops_per_process=200, keys=4, p_info=0.1)
    started = time.perf_counter()
    result = check_linearizable(sim.history)
    elapsed = time.perf_counter() - started
    assert result.verdict is Verdict.OK
    assert elapsed < 5.0, f"took {elapsed:.2f} s"
