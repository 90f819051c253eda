"""What bound a run (``bench/bound.py``) and the busy-machine warning
(``bench/machine_load.py``), on synthetic inputs: each label, each boundary, each reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bound
from bench.bound import (
    CPU_BOUND,
    CYCLE_BOUND,
    OUTSIDE,
    STALL_BOUND,
    BoundInputs,
    Busiest,
    Stalls,
    busiest,
    classify,
    stalls,
)
from bench.machine_load import (
    OTHERS_NAMED_MAX,
    LoadSample,
    MachineLoad,
    OtherProcess,
    ProcessTimes,
    cpu_percent,
    descendants,
    machine_load,
)
from bench.traces import completion_times, write_phase_means

PHASES = {"lock wait": 0.1, "execute": 0.3, "batch wait": 3.9, "replicate": 5.7,
          "apply": 0.4, "reply": 0.1}


def load(busy: float, own: float = 0.0, steal: float = 0.0,
         others: tuple[OtherProcess, ...] = ()) -> MachineLoad:
    return MachineLoad(cores=2, window_s=15.0, busy_share=busy, own_share=own,
                       steal_share=steal, top_others=others)


def inputs(busy: float = 0.5, demand: float = 50.0, stalled: float = 0.0,
           phases: dict[str, float] | None = None, mean_ms: float = 15.0) -> BoundInputs:
    return BoundInputs(load(busy, own=busy), Busiest("om1", demand, demand * 0.8), mean_ms,
                       dict(PHASES if phases is None else phases),
                       Stalls(50.0, 3 if stalled else 0, stalled, 400.0 if stalled else 9.0))


# ------------------------------------------------------------------------ the labels ---

def test_a_machine_busy_85_percent_is_cpu_bound() -> None:
    found = classify(inputs(busy=0.85))
    assert found.label == CPU_BOUND
    assert "2 cores were 85% busy" in found.reason
    assert "om1's busiest thread" in found.reason          # the thread is evidence too
    assert classify(inputs(busy=0.849)).label == CYCLE_BOUND


def test_one_thread_wanting_a_cpu_90_percent_of_the_window_is_cpu_bound() -> None:
    found = classify(inputs(busy=0.6, demand=90.0))
    assert found.label == CPU_BOUND
    assert found.reason.startswith("one thread: om1's busiest thread ran or waited for a CPU "
                                   "90% of the window (ran 72%)")
    assert classify(inputs(busy=0.6, demand=89.9)).label == CYCLE_BOUND


def test_idle_cpus_and_a_tenth_of_the_window_without_a_completion_is_stall_bound() -> None:
    found = classify(inputs(stalled=0.10))
    assert found.label == STALL_BOUND
    assert "nothing completed for 10% of the window, in 3 gaps of 50 ms or more" in found.reason
    assert "longest 400 ms" in found.reason
    assert classify(inputs(stalled=0.099)).label == CYCLE_BOUND


def test_the_cpu_rule_comes_before_the_stall_rule() -> None:
    """A starved machine stalls too; the CPU is what bound it."""
    assert classify(inputs(busy=0.95, stalled=0.5)).label == CPU_BOUND
    assert classify(inputs(demand=97.0, stalled=0.5)).label == CPU_BOUND


def test_idle_cpus_without_stalls_are_cycle_bound_and_the_phases_say_where() -> None:
    found = classify(inputs(busy=0.6, demand=70.0, mean_ms=16.0))
    assert found.label == CYCLE_BOUND
    split = found.inputs.latency_split_ms()
    assert split[OUTSIDE] == pytest.approx(16.0 - sum(PHASES.values()))
    assert found.inputs.cycle_share() == pytest.approx((3.9 + 5.7 + 0.4) / 16.0)
    assert "the machine 60% busy, om1's busiest thread at 70% (ran 56%)" in found.reason
    assert ("of the 16.0 ms mean write, batch wait + replicate + apply took 62%, the largest "
            "part replicate 5.7 ms") in found.reason
    recorded = found.as_dict()
    assert recorded["label"] == CYCLE_BOUND
    assert recorded["moves_it"] == bound.MOVES[CYCLE_BOUND]
    assert recorded["stalls"]["stalled_share"] == 0.0
    assert json.loads(json.dumps(recorded)) == recorded


def test_a_flow_without_server_phases_is_labelled_and_says_so() -> None:
    """etcd traces its client only; its label follows from its CPU and stalls alone."""
    found = classify(inputs(phases={}, mean_ms=10.0))
    assert found.label == CYCLE_BOUND
    assert "the mean write took 10.0 ms; no server phases traced" in found.reason
    assert found.inputs.cycle_share() is None
    assert found.as_dict()["latency_split_ms"] == {}
    bare = classify(BoundInputs(None, None, None))
    assert bare.label == CYCLE_BOUND
    assert bare.reason == "no CPU figures, stalls not measured; no server phases traced"


def test_the_busiest_thread_is_the_highest_demand_of_any_process() -> None:
    cpu = {"om1": {"cpu": 90.0, "loop_demand": 80.0, "thread_demand": 85.0, "thread_run": 60.0},
           "om1-raft": {"cpu": 40.0, "loop_demand": 10.0, "thread_demand": 93.0,
                        "thread_run": 40.0}}
    assert busiest(cpu) == Busiest("om1-raft", 93.0, 40.0)
    assert busiest({}) is None


# ---------------------------------------------------------------------------- stalls ---

def test_stalls_are_gaps_of_five_p50s_or_50_ms_and_their_share_of_the_window() -> None:
    every_ms = list(range(0, 700_000_000, 1_000_000))            # 0.7 s, one a millisecond
    completions = [*every_ms, 1_000_000_000, *(t + 1_000_000_000 for t in every_ms[1:300])]
    found = stalls(completions, write_p50_ms=2.0, window_s=2.0)
    assert found is not None
    assert found.gap_ms_min == 50.0                               # 5 x 2 ms is below the floor
    assert found.gaps == 1
    assert found.longest_gap_ms == pytest.approx(301.0)
    assert found.stalled_share == pytest.approx(0.301 / 2.0)
    at_p50_80 = stalls(completions, write_p50_ms=80.0, window_s=2.0)
    assert at_p50_80 is not None
    assert (at_p50_80.gap_ms_min, at_p50_80.gaps) == (400.0, 0)  # a 301 ms gap is a cycle here
    assert stalls([5], 1.0, 1.0) is None
    assert stalls([1, 2], 1.0, 0.0) is None
    with pytest.raises(AssertionError, match="sorted"):
        stalls([3, 1], 1.0, 1.0)


# -------------------------------------------------------------------- trace readings ---

def _lines(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")
    return path


def test_phase_means_are_over_successful_writes_only(tmp_path: Path) -> None:
    def server(op: str, status: str, replicate_ms: int) -> dict[str, object]:
        return {"v": 1, "kind": "server_request", "flow": "leader", "t_ns": 1, "node": "om1",
                "op": op, "status": status, "lock_wait_ns": 0, "execute_ns": 1_000_000,
                "batch_wait_ns": 2_000_000, "replicate_ns": replicate_ms * 1_000_000,
                "apply_ns": 0, "reply_ns": 0, "batch_id": 1}

    first = _lines(tmp_path / "server-om1.jsonl",
                   [server("CreateKey", "OK", 4), server("LookupKey", "OK", 100),
                    server("CommitKey", "KEY_NOT_FOUND", 100),
                    {**server("CommitKey", "OK", 100), "apply_ns": "x"}])
    second = _lines(tmp_path / "server-om2.jsonl", [server("CommitKey", "OK", 6)])
    means = write_phase_means([first, second])
    assert means == {"lock wait": 0.0, "execute": 1.0, "batch wait": 2.0, "replicate": 5.0,
                     "apply": 0.0, "reply": 0.0}
    assert write_phase_means([tmp_path / "none.jsonl"]) == {}


def test_completion_times_are_sorted_ends_of_client_requests(tmp_path: Path) -> None:
    def client(t_ns: int, latency_ns: int) -> dict[str, object]:
        return {"v": 1, "kind": "client_request", "flow": "leader", "t_ns": t_ns, "op": "Put",
                "latency_ns": latency_ns, "status": "OK", "retries": 0, "write": True}

    path = _lines(tmp_path / "client.jsonl",
                  [client(100, 50), client(10, 20), {"kind": "server_batch", "t_ns": 1}])
    assert completion_times(path) == [30, 150]


# ------------------------------------------------------------------ the machine's load ---

def sample(busy_s: float, total_s: float, processes: dict[int, tuple[int, float, float]],
           steal_s: float = 0.0) -> LoadSample:
    """``processes``: {pid: (ppid, start time, cpu seconds)}."""
    return LoadSample(busy_s, total_s, steal_s, 2, {
        pid: ProcessTimes(ppid, f"cmd{pid}", started, cpu)
        for pid, (ppid, started, cpu) in processes.items()})


def test_own_processes_are_the_root_and_everything_below_it() -> None:
    table = sample(0, 1, {1: (0, 0, 0), 100: (1, 0, 0), 101: (100, 0, 0), 102: (101, 0, 0),
                          200: (1, 0, 0)}).processes
    assert descendants(100, table) == {100, 101, 102}
    assert descendants(999, table) == {999}


def test_others_are_what_was_busy_that_the_bench_did_not_use() -> None:
    before = sample(10.0, 100.0, {100: (1, 5.0, 1.0), 101: (100, 5.0, 2.0),
                                  200: (1, 5.0, 0.0), 400: (1, 5.0, 9.0)}, steal_s=0.5)
    after = sample(19.12, 120.0, {100: (1, 5.0, 3.0), 101: (100, 5.0, 4.0),
                                 102: (101, 50.0, 1.0),        # started in the window
                                 200: (1, 5.0, 2.0),           # a hog beside the bench
                                 400: (1, 60.0, 0.5)}, steal_s=1.5)   # pid 400 reused
    found = machine_load(before, after, window_s=10.0, root=100)
    assert found.busy_share == pytest.approx(9.12 / 20.0)
    assert found.own_share == pytest.approx((2.0 + 2.0 + 1.0) / 20.0)
    assert found.own_processes == 3
    assert found.steal_share == pytest.approx(1.0 / 20.0)
    # the hog's 2 s, the new pid 400's 0.5 s, the steal's 1 s, and 0.62 s nobody was seen use
    assert found.others_share == pytest.approx(4.12 / 20.0)
    assert [(p.pid, p.command) for p in found.top_others] == [(200, "cmd200"), (400, "cmd400")]
    assert found.top_others[1].share == pytest.approx(0.5 / 20.0)
    warning = found.warning
    assert warning is not None
    assert warning == ("other processes used 21% of the machine (2 cores) during the "
                       "measured window, more than 10%: this flow's figures are not to be "
                       "trusted (largest: 'cmd200' (pid 200) 10%, 'cmd400' (pid 400) 2%; the "
                       "hypervisor's steal 5%; short-lived processes, the kernel or processes "
                       "this PID namespace does not show 3%)")
    recorded = found.as_dict()
    assert recorded["warning"] == warning
    assert recorded["others_share"] == pytest.approx(0.206)
    assert json.loads(json.dumps(recorded)) == recorded


def test_the_warning_starts_above_a_tenth_of_the_machine() -> None:
    assert load(busy=0.60, own=0.50).warning is None               # exactly 10 %
    busy = load(busy=0.61, own=0.50)
    assert busy.warning is not None
    assert "11% of the machine" in busy.warning
    assert ("short-lived processes, the kernel or processes this PID namespace does not show "
            "11%") in busy.warning                                 # nothing named: unseen
    assert load(busy=0.40, own=0.45).others_share == 0.0           # never below zero


def test_a_process_cpu_is_its_own_total_between_samples() -> None:
    before = LoadSample(0.0, 0.0, 0.0, 2, {7: ProcessTimes(1, "x", 5.0, 1.0)}, at_s=10.0)
    after = LoadSample(1.0, 4.0, 0.0, 2, {7: ProcessTimes(1, "x", 5.0, 2.5),
                                          8: ProcessTimes(1, "y", 11.0, 0.1)}, at_s=12.0)
    assert cpu_percent(before, after, 7) == pytest.approx(75.0)   # 1.5 s of CPU in 2 s
    assert cpu_percent(before, after, 8) is None                   # not there at the start
    reused = LoadSample(1.0, 4.0, 0.0, 2, {7: ProcessTimes(1, "x", 11.5, 0.1)}, at_s=12.0)
    assert cpu_percent(before, reused, 7) is None                  # another process, same pid


def test_a_warning_names_at_most_the_largest_few() -> None:
    many = {pid: (1, 0.0, 0.0) for pid in range(200, 210)}
    later = {pid: (1, 0.0, 0.01 * (pid - 199)) for pid in range(200, 210)}
    found = machine_load(sample(0.0, 0.0, many), sample(0.9, 1.0, later), 0.5, root=100)
    assert len(found.top_others) == OTHERS_NAMED_MAX
    assert [p.pid for p in found.top_others] == [209, 208, 207, 206, 205]
