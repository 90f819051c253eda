"""The rules of the "why" section on hand-made figures: which sentence the data selects.

No Spark and no bench: `FlowFacts` are built directly, so each branch (CPU-bound, bound
by one thread, latency-bound) and each fallback is exercised whatever this machine does.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from spark_analysis.facts import (
    OUTSIDE,
    FlowFacts,
    ProcessUse,
    bound,
    busy_warning,
    cores,
    mean_split,
    processes,
    roles,
    split,
)
from spark_analysis.schema import PHASES
from spark_analysis.why import (
    batching_bought,
    compare_sentence,
    flow_paragraph,
    latency_sentence,
    ratio_sentence,
    resources_sentence,
    warning_paragraph,
)

PHASE_NAMES = [name for _, name in PHASES]


def facts(flow: str, *, write_rps: float = 1000.0, latency_ms: float = 10.0,
          parts: dict[str, float] | None = None, cpu: tuple[float, ...] = (50.0,),
          demand: float = 50.0) -> FlowFacts:
    """A flow with 64 in flight on 2 cores; `cpu` per process (om1, om2, ...)."""
    uses = tuple(ProcessUse(f"om{index + 1}", value, demand if index == 0 else 10.0, 100.0)
                 for index, value in enumerate(cpu))
    return FlowFacts(
        run="r", flow=flow, label=flow, write_rps=write_rps, latency_ms_mean=latency_ms,
        write_latency_ms_p99=2 * latency_ms,
        mean_split=split(parts) if parts else None, tail_split=split(parts) if parts else None,
        tail_threshold_ms=2 * latency_ms, requests_per_batch=None, batches_per_s=None,
        processes=uses, in_flight=64, bench_write_rps=write_rps, cores=2)


def test_split_orders_parts_and_shares_them() -> None:
    found = split({"a": 1.0, "b": 3.0, "c": 0.0})
    assert found is not None
    assert [part.name for part in found.parts] == ["b", "a", "c"]
    assert found.dominant.share == pytest.approx(0.75)
    assert found.ms_of("missing") == 0.0
    assert split({"a": 0.0}) is None


def test_outside_the_server_is_the_client_latency_the_phases_do_not_cover() -> None:
    row = {column.removesuffix("_ns") + "_ms_mean": 1.0 for column, _ in PHASES}
    found = mean_split(row, client_ms=10.0)
    assert found is not None
    assert found.dominant.name == OUTSIDE
    assert found.dominant.ms == pytest.approx(4.0)
    assert found.total_ms == pytest.approx(10.0)
    without = mean_split(row, client_ms=5.0)  # the client saw less than the server: no outside
    assert without is not None
    assert OUTSIDE not in [part.name for part in without.parts]
    assert mean_split({}, client_ms=10.0) is None


def test_a_saturated_machine_makes_the_ratio_cpu_bound() -> None:
    top = facts("leader", cpu=(120.0, 60.0))          # 90% of 2 cores
    bottom = facts("replicated", write_rps=500.0, cpu=(50.0,))
    sentence = ratio_sentence("leader_over_replicated", 2.0, top, bottom)
    assert sentence.startswith("leader_over_replicated = 2.00 (leader 1,000 writes/s, "
                               "replicated 500): leader is CPU-bound: its processes kept 90%")
    assert "at 1,800 µs of CPU per write against 1,000 µs for replicated." in sentence


def test_one_saturated_thread_bounds_the_ratio() -> None:
    top = facts("leader", cpu=(95.0,), demand=97.0)
    sentence = ratio_sentence("leader_over_etcd", 0.8, top, facts("etcd", write_rps=1250.0))
    assert "leader is bound by one thread: the busiest thread of om1 was running or waiting " \
           "for a CPU 97% of the window" in sentence


def test_with_spare_cpu_the_ratio_follows_latency_and_names_the_largest_difference() -> None:
    mine = dict.fromkeys(PHASE_NAMES, 0.5) | {"batch wait": 4.0, OUTSIDE: 3.0}
    theirs = dict.fromkeys(PHASE_NAMES, 0.1) | {"replicate": 12.0, OUTSIDE: 2.0}
    top = facts("leader", latency_ms=10.0, parts=mine)
    bottom = facts("replicated", write_rps=800.0, latency_ms=12.5, parts=theirs)
    sentence = ratio_sentence("leader_over_replicated", 1.25, top, bottom)
    assert "leader is latency-bound (its processes used 25% of the machine's 2 cores, " \
           "busiest thread om1 at 50%)" in sentence
    assert "with 64 requests in flight throughput follows mean latency, 10.0 ms against " \
           "12.5 ms, and the largest difference is replicate, 0.50 ms against 12.0 ms." in sentence
    compared = compare_sentence(top, bottom)
    assert compared is not None
    assert "its largest saving is replicate" in compared
    assert "its largest added cost is batch wait" in compared


def test_a_peer_without_phases_is_compared_by_latency_only() -> None:
    top = facts("leader", parts=dict.fromkeys(PHASE_NAMES, 1.0) | {OUTSIDE: 4.0})
    sentence = ratio_sentence("leader_over_etcd", 0.7, top, facts("etcd", latency_ms=7.0))
    assert "leader's largest part is outside the server 4.00 ms (40%), and etcd traces no " \
           "server phases to compare." in sentence
    assert compare_sentence(top, facts("etcd")) is None
    assert latency_sentence(facts("etcd", latency_ms=7.0)).startswith(
        "etcd: no successful server_request records, so its latency (mean 7.00 ms)")


def test_batching_bought_says_raised_or_lowered_from_the_throughputs() -> None:
    batched = replace(facts("leader", write_rps=1500.0), requests_per_batch=30.0,
                      batches_per_s=50.0)
    unbatched = replace(facts("leader-nobatch"), requests_per_batch=1.0, batches_per_s=1000.0)
    assert "raised write throughput 1.50x" in (batching_bought(batched, unbatched) or "")
    slower = replace(batched, write_rps=500.0)
    assert "lowered write throughput 0.50x" in (batching_bought(slower, unbatched) or "")
    assert batching_bought(replace(batched, requests_per_batch=None), unbatched) is None


def test_bench_records_are_read_defensively() -> None:
    found = processes({"cpu_percent": {"om1": 10, "bench": 5, "bad": "x"},
                       "thread_demand_percent": {"om1": 20.0},
                       "om_rss_mb_by_process": {"om1": 64.0, "om1-raft": True}})
    assert [use.name for use in found] == ["bad", "om1", "om1-raft", "bench"]
    assert found[1] == ProcessUse("om1", 10.0, 20.0, 64.0)
    assert found[0].cpu_percent is None
    assert found[2].rss_mb is None
    assert processes({"cpu_percent": [1, 2]}) == ()
    assert cores({"machine": {"cpu_affinity": 2, "cpu_count": 8}}) == 2
    assert cores({"machine": {"cpu_affinity": None, "cpu_count": 8}}) == 8
    assert cores(None) is None
    assert resources_sentence(replace(facts("x"), processes=())) == (
        "summary.json records no CPU for it.")


def test_cpu_per_write_by_role_is_read_defensively() -> None:
    found = roles({"cpu_us_per_write": {"leader server": 376.4, "leader Raft": 62,
                                        "bad": "x", "flag": True}})
    assert found == (("leader server", 376.4), ("leader Raft", 62.0))
    assert roles({"cpu_us_per_write": [1, 2]}) == ()
    assert roles({}) == ()


def test_the_bench_label_and_its_busy_machine_warning_reach_the_report() -> None:
    bench_flow = {"bound": {"label": "cycle-bound", "reason": "the machine 60% busy"},
                  "machine_load": {"warning": "other processes used 30% of the machine"}}
    found = replace(facts("leader"), bound=bound(bench_flow),
                    busy_warning=busy_warning(bench_flow))
    assert flow_paragraph(found).text.endswith(
        "om bench labelled its measured run cycle-bound: the machine 60% busy.")
    warning = warning_paragraph(found)
    assert warning is not None
    assert warning.text == "WARNING: leader: other processes used 30% of the machine."
    quiet = {"bound": {"label": 3}, "machine_load": {"warning": None}}
    assert (bound(quiet), busy_warning(quiet), bound({}), busy_warning({})) == (
        None, None, None, None)
    assert warning_paragraph(facts("leader")) is None
    assert "om bench labelled" not in flow_paragraph(facts("leader")).text
