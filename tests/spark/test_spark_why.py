"""The "why" section of the report of a real smoke ``om bench`` run.

Every expectation is recomputed here from the run's own files (the trace JSON Lines and
om bench's summary.json and manifest.json) with plain Python, independently of Spark and
of `spark_analysis.facts`, so a wrong computation in either shows up as a mismatch.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_analysis.facts import FlowFacts, Split, flow_facts
from spark_analysis.report import MARKDOWN_FILE
from spark_analysis.why import CPU_SATURATED, THREAD_SATURATED, WHY, pct

from .conftest import Report

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]   # the smoke bench

PHASES = {"lock_wait_ns": "lock wait", "execute_ns": "execute", "batch_wait_ns": "batch wait",
          "replicate_ns": "replicate", "apply_ns": "apply", "reply_ns": "reply"}
OUTSIDE = "outside the server"
NS_PER_MS = 1e6


@dataclass(frozen=True)
class Expected:
    """One flow's latency parts, recomputed from its trace records (ms)."""

    mean_parts: dict[str, float]
    tail_parts: dict[str, float]
    tail_threshold_ms: float


def _records(run_dir: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(run_dir.glob("*/traces/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)


def _p99(values: list[float]) -> float:
    """The 0.99 quantile with linear interpolation between the closest ranks."""
    ordered = sorted(values)
    position = 0.99 * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(rows: list[dict[str, Any]], column: str) -> float:
    """The mean of a nanosecond column, in ms."""
    return float(sum(row[column] for row in rows)) / len(rows) / NS_PER_MS


def _expected(run_dir: Path) -> dict[str, Expected]:
    """Each flow's mean parts (phases and outside) and its slowest 1 %'s phases."""
    clients: dict[str, list[int]] = defaultdict(list)
    servers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in _records(run_dir):
        if record["kind"] == "client_request" and record["status"] == "OK":
            clients[record["flow"]].append(record["latency_ns"])
        elif record["kind"] == "server_request" and record["status"] == "OK":
            servers[record["flow"]].append(record)
    found = {}
    for flow, requests in servers.items():
        parts = {name: _mean(requests, column) for column, name in PHASES.items()}
        outside = sum(clients[flow]) / len(clients[flow]) / NS_PER_MS - sum(parts.values())
        if outside > 0:
            parts[OUTSIDE] = outside
        totals = [sum(row[column] for column in PHASES) for row in requests]
        threshold = _p99([float(total) for total in totals])
        tail = [row for row, total in zip(requests, totals, strict=True) if total >= threshold]
        tail_parts = {name: _mean(tail, column) for column, name in PHASES.items()}
        found[flow] = Expected(parts, tail_parts, threshold / NS_PER_MS)
    return found


def _by_name(found: Split) -> dict[str, float]:
    return {part.name: part.ms for part in found.parts}


def _largest(parts: dict[str, float]) -> str:
    return max(parts, key=lambda name: parts[name])


def _why_text(report: Report) -> str:
    markdown = (report.out_dir / MARKDOWN_FILE).read_text(encoding="utf-8")
    return markdown.split(f"## {WHY}\n", 1)[1].split("\n## ", 1)[0]


def _facts(report: Report) -> dict[str, FlowFacts]:
    return {found.flow: found for found in flow_facts(report.results)}


def _bench(run_dir: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return summary


def _paragraph(text: str, start: str) -> str:
    (found,) = [line for line in text.splitlines() if line.startswith(start)]
    return found


def test_dominant_phase_of_mean_and_p99_is_the_largest_in_the_traces(
        smoke_run: Path, smoke_report: Report) -> None:
    expected, facts, text = _expected(smoke_run), _facts(smoke_report), _why_text(smoke_report)
    assert {"leader", "replicated", "leader-nobatch", "ceiling"} <= set(expected)
    for flow, wanted in expected.items():
        found = facts[flow]
        assert found.mean_split is not None
        assert found.tail_split is not None
        assert found.mean_split.dominant.name == _largest(wanted.mean_parts), flow
        assert found.tail_split.dominant.name == _largest(wanted.tail_parts), flow
        assert _by_name(found.mean_split) == pytest.approx(wanted.mean_parts, rel=1e-6)
        assert _by_name(found.tail_split) == pytest.approx(wanted.tail_parts, rel=1e-6)
        assert found.tail_threshold_ms == pytest.approx(wanted.tail_threshold_ms, rel=1e-9)
        sentence = _paragraph(text, f"{flow}: of its mean")
        mean_share = max(wanted.mean_parts.values()) / sum(wanted.mean_parts.values())
        assert f"{_largest(wanted.mean_parts)} " in sentence
        assert f"({pct(mean_share)}) dominates" in sentence
        tail_share = max(wanted.tail_parts.values()) / sum(wanted.tail_parts.values())
        assert f"spend {pct(tail_share)} of their" in sentence
        assert f"in {_largest(wanted.tail_parts)}." in sentence


def test_leader_is_compared_with_the_old_flow_phase_by_phase(
        smoke_run: Path, smoke_report: Report) -> None:
    expected = _expected(smoke_run)
    leader, old = expected["leader"].mean_parts, expected["replicated"].mean_parts
    change = {name: leader.get(name, 0.0) - old.get(name, 0.0) for name in {*leader, *old}}
    sentence = _paragraph(_why_text(smoke_report), "Against replicated, leader's")
    saving = min(change, key=lambda name: change[name])
    cost = max(change, key=lambda name: change[name])
    if change[saving] < 0:
        assert f"its largest saving is {saving}," in sentence
    if change[cost] > 0:
        assert f"its largest added cost is {cost}," in sentence
    assert "| part of the mean latency | leader (ms) | replicated (ms) |" in _why_text(
        smoke_report)


def test_what_batching_bought_is_computed_from_batches_and_throughputs(
        smoke_run: Path, smoke_report: Report) -> None:
    sizes = [record["requests"] for record in _records(smoke_run)
             if record["kind"] == "server_batch" and record["flow"] == "leader"]
    flows = smoke_report.summary["runs"][smoke_run.name]["flows"]
    gain = flows["leader"]["write_throughput_rps"] / flows["leader-nobatch"][
        "write_throughput_rps"]
    sentence = _paragraph(_why_text(smoke_report), "Batching carried")
    assert f"Batching carried {sum(sizes) / len(sizes):.1f} requests per replicated batch" in (
        sentence)
    assert f"{'raised' if gain >= 1 else 'lowered'} write throughput {gain:.2f}x" in sentence


def test_cpu_and_memory_per_process_come_from_the_bench_records(
        smoke_run: Path, smoke_report: Report) -> None:
    bench, text = _bench(smoke_run), _why_text(smoke_report)
    for flow in ("leader", "replicated", "leader-nobatch", "ceiling"):
        recorded = bench["flows"][flow]
        assert recorded["cpu_percent"], flow
        cpu, demand = recorded["cpu_percent"], recorded["thread_demand_percent"]
        rss = recorded["om_rss_mb_by_process"]
        for process in {*cpu, *rss}:
            cells = " | ".join(_cell(figures.get(process)) for figures in (cpu, demand, rss))
            assert f"| {flow} | {process} | {cells} |" in text
        total = sum(recorded["om_rss_mb_by_process"].values())
        assert f"resident memory {total:,.0f} MB in all." in _paragraph(text, f"{flow}: of its")
        per_write = sum(recorded["cpu_percent"].values()) / 100 * 1e6 / recorded[
            "write_requests_per_s"]
        assert f"{per_write:,.0f} µs of CPU per write" in _paragraph(text, f"{flow}: of its")


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _limit(bench: dict[str, Any], cores: int, flow: str) -> str:
    """The phrase the ratio sentence must use for `flow`, from the bench records alone."""
    recorded = bench["flows"][flow]
    if sum(recorded["cpu_percent"].values()) / (100 * cores) >= CPU_SATURATED:
        return "is CPU-bound"
    if max(recorded["thread_demand_percent"].values()) >= THREAD_SATURATED:
        return "is bound by one thread"
    return "is latency-bound"


def test_each_headline_ratio_gets_a_sentence_chosen_by_the_data(
        smoke_run: Path, smoke_report: Report) -> None:
    bench, text = _bench(smoke_run), _why_text(smoke_report)
    manifest = json.loads((smoke_run / "manifest.json").read_text())
    cores = manifest["machine"]["cpu_affinity"] or manifest["machine"]["cpu_count"]
    ratios = smoke_report.summary["runs"][smoke_run.name]["ratios"]
    assert {"leader_over_replicated", "leader_over_ceiling", "leader_over_leader_nobatch"} <= set(
        ratios)
    expected = _expected(smoke_run)
    for name, value in ratios.items():
        sentence = _paragraph(text, f"{name} = {value:.2f} (leader ")
        assert f"leader {_limit(bench, cores, 'leader')}" in sentence
        denominator = name.removeprefix("leader_over_").replace("_", "-")
        if "latency-bound" in sentence and denominator in expected:
            mine, theirs = expected["leader"].mean_parts, expected[denominator].mean_parts
            names = {*mine, *theirs}
            largest = max(names, key=lambda part: abs(mine.get(part, 0) - theirs.get(part, 0)))
            assert f"the largest difference is {largest}," in sentence


def test_etcd_appears_in_the_tables_and_plots_like_any_flow(
        smoke_run: Path, smoke_report: Report) -> None:
    etcd = _bench(smoke_run)["flows"]["etcd"]
    if "skipped" in etcd:
        pytest.skip(f"the smoke run skipped etcd: {etcd['skipped']}")
    run = smoke_report.summary["runs"][smoke_run.name]
    assert run["flows"]["etcd"]["write_throughput_rps"] == pytest.approx(
        etcd["write_requests_per_s"], rel=0.05)
    assert run["ratios"]["leader_over_etcd"] == pytest.approx(
        run["flows"]["leader"]["write_throughput_rps"] / run["flows"]["etcd"][
            "write_throughput_rps"])
    results = smoke_report.results
    assert any(row["flow"] == "etcd" for row in results.latency_percentiles)
    assert any(row["flow"] == "etcd" and row["ok_writes"] for row in
               results.throughput_per_second)
    markdown = (smoke_report.out_dir / MARKDOWN_FILE).read_text(encoding="utf-8")
    assert "| etcd | " in markdown.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    batching = markdown.split("## Throughput vs batching\n", 1)[1].split("\n## ", 1)[0]
    assert "drawn as dashed lines" in batching
    assert "etcd" in batching
    assert "etcd: no successful server_request records, so its latency (mean " in _why_text(
        smoke_report)
