"""Percentiles, the latency recorder, trace records and the progress bar, with known answers."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from bench.machine import CpuMeter, rss_mb
from bench.progress import ProgressBar, render
from bench.stats import LatencyRecorder, percentile
from bench.traces import (
    ClientTrace,
    batch_sizes,
    client_request_problems,
    copy_window,
    read_records,
)


@pytest.mark.parametrize(("values", "fraction", "expected"), [
    ([7], 0.0, 7), ([7], 0.99, 7), ([7], 1.0, 7),
    ([1, 2, 3, 4], 0.0, 1), ([1, 2, 3, 4], 1.0, 4),
    ([1, 2, 3, 4], 0.5, 2.5),                 # position 1.5
    ([1, 2, 3, 4, 5], 0.5, 3),                # position 2: exact rank
    ([10, 20, 30, 40, 50], 0.75, 40),
    ([10, 20, 30, 40, 50], 0.9, 46),          # position 3.6: 40 + 0.6 * 10
    (list(range(1, 101)), 0.99, 99.01),       # position 98.01
    (list(range(1001)), 0.999, 999.0),
])
def test_percentile_interpolates_between_closest_ranks(values: list[int], fraction: float,
                                                        expected: float) -> None:
    assert percentile(values, fraction) == pytest.approx(expected)


def test_percentile_refuses_empty_input() -> None:
    with pytest.raises(AssertionError):
        percentile([], 0.5)


def test_summary_of_known_latencies_in_milliseconds() -> None:
    recorder = LatencyRecorder()
    recorder.extend(ms * 1_000_000 for ms in [4, 1, 3, 2, 5])
    summary = recorder.summary()
    assert summary.count == 5
    assert (summary.min, summary.max, summary.mean) == (1.0, 5.0, 3.0)
    assert summary.stddev == pytest.approx(2 ** 0.5)          # population stddev of 1..5
    assert (summary.p50, summary.p75) == (3.0, 4.0)
    assert summary.p99 == pytest.approx(4.96)
    assert summary.p999 == pytest.approx(4.996)
    assert recorder.exact


def test_empty_summary_is_all_zero() -> None:
    summary = LatencyRecorder().summary()
    assert summary.count == 0
    assert set(summary.as_dict().values()) == {0}


def test_recorder_bounds_memory_but_keeps_exact_totals() -> None:
    recorder = LatencyRecorder(capacity=100, seed=1)
    recorder.extend(range(10_000))
    assert len(recorder.sorted_samples()) == 100
    assert not recorder.exact
    assert recorder.count == 10_000
    assert (recorder.min_ns, recorder.max_ns) == (0, 9_999)
    assert recorder.summary().mean == pytest.approx(4_999.5 / 1e6)
    # A uniform sample of 0..9999: its median is near the true one.
    assert 3_000 < percentile(recorder.sorted_samples(), 0.5) < 7_000


def test_client_trace_writes_valid_schema_v1_records(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "client-x.jsonl"
    trace = ClientTrace.open(path, "leader")
    trace.request(1_700_000_000_000_000_000, "CreateKey", 1_500_000, "OK", 0)
    trace.request(1_700_000_000_000_000_001, "LookupKey", 900, "KEY_NOT_FOUND", 2, node="om1")
    trace.close()
    records = list(read_records(path))
    assert [client_request_problems(r) for r in records] == [[], []]
    assert records[0] == {"v": 1, "kind": "client_request", "flow": "leader",
                          "t_ns": 1_700_000_000_000_000_000, "op": "CreateKey",
                          "latency_ns": 1_500_000, "status": "OK", "retries": 0,
                          "write": True}
    assert records[1]["write"] is False
    assert records[1]["node"] == "om1"


@pytest.mark.parametrize("record", [
    [], {"v": 2, "kind": "client_request", "flow": "f", "t_ns": 1, "op": "x",
         "latency_ns": 1, "status": "OK", "retries": 0},
    {"v": 1, "kind": "client_request", "flow": "f", "t_ns": 1.5, "op": "x",
     "latency_ns": 1, "status": "OK", "retries": 0},
    {"v": 1, "kind": "client_request", "flow": "f", "t_ns": 1, "op": "x",
     "latency_ns": True, "status": "OK", "retries": 0},
    {"v": 1, "kind": "server_request", "flow": "f", "t_ns": 1, "op": "x",
     "latency_ns": 1, "status": "OK", "retries": 0},
])
def test_invalid_client_records_are_named(record: object) -> None:
    assert client_request_problems(record)


def test_copy_window_keeps_only_records_inside(tmp_path: Path) -> None:
    source = tmp_path / "raw.jsonl"
    lines = [json.dumps({"kind": "server_batch", "t_ns": t, "requests": t}) for t in range(10)]
    source.write_text("\n".join([*lines, "not json", '{"t_ns": "x"}']) + "\n")
    target = tmp_path / "traces" / "server-om1.jsonl"
    assert copy_window(source, target, 3, 6) == 4
    assert batch_sizes([target]) == [3, 4, 5, 6]
    assert batch_sizes([tmp_path / "missing.jsonl"]) == []


def test_progress_bar_renders_and_is_quiet_off_a_terminal() -> None:
    text = render("[leader] measure", 500, 2, 0.5, 2.0)
    assert "50.0%" in text
    assert "500 ops" in text
    assert "250 ops/s" in text
    assert "2 failed" in text
    stream = io.StringIO()
    bar = ProgressBar("x", total=10, duration_s=None, stream=stream)
    bar.update(5, 0, force=True)
    bar.close(10, 0)
    assert stream.getvalue() == ""
    assert bar.fraction(5, 0.0) == 0.5
    assert ProgressBar("x", None, 10.0, stream).fraction(0, 2.5) == 0.25


def test_cpu_meter_sees_this_process_busy() -> None:
    meter = CpuMeter({"me": os.getpid(), "gone": 2 ** 22 + 1})
    meter.start()
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        pass
    window = meter.stop()
    usage = window.processes
    assert set(usage) == {"me"}                       # an absent pid is left out
    assert usage["me"]["loop_demand"] > 50.0
    assert usage["me"]["thread_demand"] >= usage["me"]["loop_demand"]
    assert usage["me"]["thread_demand"] >= usage["me"]["thread_run"] > 0.0
    assert usage["me"]["cpu"] > 0.0
    machine = window.machine
    assert machine is not None
    assert machine.window_s == pytest.approx(0.2, abs=0.1)
    # the machine's view of this process (its share of all cores, in ticks) agrees with
    # the meter's (schedstat, in % of one core) within a few ticks
    assert 100 * machine.own_share * machine.cores == pytest.approx(usage["me"]["cpu"], abs=25)
    assert machine.busy_share >= machine.own_share - 0.05


def _spin(cpu_s: float, native_ids: list[int]) -> None:
    """Runs until this thread has used ``cpu_s`` of CPU (bounded: 30 s of wall time)."""
    native_ids.append(threading.get_native_id())
    deadline = time.monotonic() + 30.0
    while time.thread_time() < cpu_s and time.monotonic() < deadline:
        pass


def test_cpu_meter_counts_threads_that_ended_within_the_window() -> None:
    """Go's runtime ends threads under load: a sum over the threads alive at each end
    lost their time (etcd's load generator read -30% of a core)."""
    meter = CpuMeter({"me": os.getpid()})
    started = time.monotonic()
    meter.start()
    native_ids: list[int] = []
    worker = threading.Thread(target=_spin, args=(0.3, native_ids))
    worker.start()
    worker.join()
    deadline = time.monotonic() + 5.0      # join returns before the OS thread is gone
    while Path(f"/proc/self/task/{native_ids[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/self/task/{native_ids[0]}").exists()
    usage = meter.stop().processes["me"]
    window_s = time.monotonic() - started
    assert usage["cpu"] / 100 * window_s >= 0.25     # the worker's 0.3 s, in 10 ms ticks
    assert (rss_mb(os.getpid()) or 0.0) > 1.0
