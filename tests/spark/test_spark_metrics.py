"""The numbers the job computes on the bench run of conftest.py, whose answers are known.

Floating-point results are compared with a relative tolerance of 1e-9.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from spark_analysis import metrics
from spark_analysis.results import Row
from spark_analysis.schema import CLIENT_REQUEST_SPEC, SERVER_BATCH_SPEC, KindSpec

from .conftest import Report
from .tracegen import MS, T0, S, client

pytestmark = pytest.mark.spark

REL = 1e-9


def approx(expected: Any) -> Any:
    """`pytest.approx` with the stated tolerance (None stays None)."""
    return None if expected is None else pytest.approx(expected, rel=REL)


def only(rows: list[Row], **match: Any) -> Row:
    """The one row whose columns equal `match`."""
    found = [row for row in rows if all(row[key] == value for key, value in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


def test_records_are_counted_per_kind(bench_report: Report) -> None:
    assert bench_report.summary["records"] == {
        "client_request": 115 + 50 + 100 + 40 + 100,
        "server_request": 7 + 1,
        "server_batch": 5 + 3 + 2,
        "fault": 3,
    }
    assert bench_report.summary["malformed_total"] == 0


def test_flow_headlines(bench_report: Report) -> None:
    flows = bench_report.summary["runs"][bench_report.out_dir.parent.name]["flows"]
    assert set(flows) == {"leader", "replicated", "ceiling", "leader-nobatch", "leader-chaos"}
    leader = flows["leader"]
    assert (leader["requests"], leader["ok_requests"], leader["ok_writes"]) == (115, 110, 100)
    assert leader["duration_s"] == approx(1.09)
    assert leader["write_throughput_rps"] == approx(100 / 1.09)
    assert leader["throughput_rps"] == approx(110 / 1.09)
    assert leader["write_latency_ms_p50"] == approx(50.5)
    assert leader["write_latency_ms_p99"] == approx(99.01)
    assert leader["write_latency_ms_max"] == approx(100.0)
    assert leader["requests_per_batch_mean"] == approx(4.0)
    assert flows["replicated"]["write_throughput_rps"] == approx(50 / 0.984)
    assert flows["replicated"]["requests_per_batch_mean"] == approx(1.0)
    assert flows["ceiling"]["write_throughput_rps"] == approx(100 / 0.496)
    assert flows["ceiling"]["requests_per_batch_mean"] is None
    chaos = flows["leader-chaos"]
    assert (chaos["requests"], chaos["ok_writes"]) == (100, 50)
    assert chaos["write_throughput_rps"] == approx(50 / 2.191)


def test_write_throughput_ratios(bench_report: Report) -> None:
    ratios = bench_report.summary["runs"][bench_report.out_dir.parent.name]["ratios"]
    assert ratios == {
        "leader_over_replicated": approx((100 / 1.09) / (50 / 0.984)),
        "leader_over_ceiling": approx((100 / 1.09) / (100 / 0.496)),
        "leader_over_leader_nobatch": approx((100 / 1.09) / (40 / 0.977)),
    }


def test_throughput_per_second_fills_empty_seconds(bench_report: Report) -> None:
    def series(flow: str) -> list[tuple[int, int, int]]:
        return [
            (row["t_s"], row["ok_requests"], row["ok_writes"])
            for row in bench_report.results.throughput_per_second
            if row["flow"] == flow
        ]

    # leader: writes complete at 11i + 1 ms, so 91 in second 0; reads all in second 0.
    assert series("leader") == [(0, 101, 91), (1, 9, 9)]
    assert series("replicated") == [(0, 50, 50)]
    assert series("leader-chaos") == [(0, 30, 30), (1, 0, 0), (2, 20, 20)]


def test_latency_percentiles_are_exact(bench_report: Report) -> None:
    create = only(bench_report.results.latency_percentiles, flow="leader", op="CreateKey")
    assert create["count"] == 100
    expected = {
        "latency_ms_p50": 50.5,
        "latency_ms_p90": 90.1,
        "latency_ms_p99": 99.01,
        "latency_ms_p99_9": 99.901,
        "latency_ms_max": 100.0,
        "latency_ms_mean": 50.5,
    }
    assert {key: create[key] for key in expected} == {
        key: approx(value) for key, value in expected.items()
    }
    lookup = only(bench_report.results.latency_percentiles, flow="leader", op="LookupKey")
    assert lookup["count"] == 10
    assert lookup["latency_ms_p99_9"] == approx(2.0)


def test_phase_breakdown_means_successful_requests(bench_report: Report) -> None:
    create = only(bench_report.results.phase_breakdown, flow="leader", op="CreateKey")
    assert create["count"] == 4
    means = [
        create[f"{phase}_ms_mean"]
        for phase in ("lock_wait", "execute", "batch_wait", "replicate", "apply", "reply")
    ]
    assert means == [approx(value) for value in (2.5, 2.0, 3.0, 4.0, 5.0, 6.0)]
    assert create["total_ms_mean"] == approx(22.5)
    lookup = only(bench_report.results.phase_breakdown, flow="leader", op="LookupKey")
    assert (lookup["count"], lookup["execute_ms_mean"]) == (2, approx(2.0))


def test_phase_tail_splits_the_slowest_requests_of_a_flow(bench_report: Report) -> None:
    phases = ("lock_wait", "execute", "batch_wait", "replicate", "apply", "reply")
    leader = only(bench_report.results.phase_tail, flow="leader")
    # Server times 1, 3 (LookupKey) and 21..24 ms (CreateKey): p99 at position 4.95.
    assert (leader["count"], leader["tail_count"]) == (6, 1)
    assert leader["total_ms_p99"] == approx(23.95)
    assert [leader[f"{phase}_ms_mean"] for phase in phases] == [
        approx(value / 6) for value in (10.0, 12.0, 12.0, 16.0, 20.0, 24.0)
    ]
    assert leader["total_ms_mean"] == approx(94 / 6)
    assert [leader[f"{phase}_ms_tail_mean"] for phase in phases] == [
        approx(value) for value in (4.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    ]
    assert leader["total_ms_tail_mean"] == approx(24.0)
    replicated = only(bench_report.results.phase_tail, flow="replicated")
    assert (replicated["tail_count"], replicated["total_ms_p99"]) == (1, approx(10.0))


def test_batch_sizes(bench_report: Report) -> None:
    leader = only(bench_report.results.batch_sizes, flow="leader")
    assert (leader["batches"], leader["requests_total"], leader["requests_max"]) == (5, 20, 10)
    # p99 of 5 values sits at position 3.96: x[3] + 0.96 * (x[4] - x[3]).
    assert (leader["requests_mean"], leader["requests_p50"], leader["requests_p99"]) == (
        approx(4.0),
        approx(3.0),
        approx(9.76),
    )
    assert (leader["bytes_mean"], leader["bytes_p50"], leader["bytes_p99"]) == (
        approx(400.0),
        approx(300.0),
        approx(976.0),
    )
    assert leader["bytes_max"] == 1000
    replicated = only(bench_report.results.batch_sizes, flow="replicated")
    assert (replicated["batches"], replicated["requests_p99"]) == (3, approx(1.0))
    histogram = [
        (row["requests"], row["batches"], row["fraction"], row["cumulative_fraction"])
        for row in bench_report.results.batch_size_histogram
        if row["flow"] == "leader"
    ]
    assert histogram == [
        (size, 1, approx(0.2), approx(0.2 * (index + 1)))
        for index, size in enumerate((1, 2, 3, 4, 10))
    ]


def test_failover_gaps_around_each_fault(bench_report: Report) -> None:
    gaps = [
        (row["action"], row["node"], row["t_s"], row["gap_ms"], row["recovery_ms"])
        for row in bench_report.results.failover_gaps
    ]
    assert gaps == [
        # The last write before completes at 291 ms, the first after at 2001 ms.
        ("kill_leader", "om1", approx(0.4), approx(1710.0), approx(1601.0)),
        ("kill_follower", "om2", approx(2.1), approx(10.0), approx(1.0)),
        # No write follows the last fault.
        ("restart_all", "", approx(3.5), None, None),
    ]


def test_parquet_tables_hold_the_collected_rows(bench_report: Report, spark: SparkSession) -> None:
    tables = bench_report.out_dir / "tables"
    for name in (
        "flow_summary",
        "throughput_ratios",
        "throughput_per_second",
        "latency_percentiles",
        "phase_breakdown",
        "phase_tail",
        "batch_sizes",
        "batch_size_histogram",
        "failover_gaps",
    ):
        rows = [
            row.asDict() for row in spark.read.parquet(str(tables / f"{name}.parquet")).collect()
        ]
        expected = getattr(bench_report.results, name)
        assert sorted(map(repr, rows)) == sorted(map(repr, expected)), name


def test_per_second_table_is_bounded(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wild timestamp cannot blow the per-second table up."""
    monkeypatch.setattr(metrics, "MAX_WINDOW_SECONDS", 2)

    def frame(spec: KindSpec, records: list[dict[str, Any]]) -> DataFrame:
        schema = StructType([StructField("run", StringType()), *spec.fields])
        rows = [
            {"run": "r", **{name: record.get(name) for name in spec.names}} for record in records
        ]
        return spark.createDataFrame(rows, schema)

    clients = frame(
        CLIENT_REQUEST_SPEC, [client("leader", T0, MS), client("leader", T0 + 5 * S, MS)]
    )
    summary = metrics.flow_summary(clients, frame(SERVER_BATCH_SPEC, []))
    seconds = [row["t_s"] for row in metrics.throughput_per_second(clients, summary).collect()]
    assert seconds == [0, 1]
