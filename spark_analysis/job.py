"""The Spark job: load the traces, compute every table, write it as Parquet, collect it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark_analysis import metrics
from spark_analysis.load import load_traces
from spark_analysis.results import Results, Row
from spark_analysis.runs import RunInput


def analyse(spark: SparkSession, runs: Sequence[RunInput], out_dir: Path) -> Results:
    """Compute every table of the report from the trace files of `runs`.

    Writes each table to `out_dir/tables/<name>.parquet` (a Spark Parquet directory with
    one part file, replacing any earlier one) and returns the same rows in memory.
    Raises ValueError when the runs hold no trace file.
    """
    traces = load_traces(spark, runs)
    tables_dir = out_dir / "tables"

    def table(name: str, frame: DataFrame) -> list[Row]:
        return _write_and_collect(frame, tables_dir / f"{name}.parquet")

    summary = metrics.flow_summary(traces.clients, traces.batches).cache()
    try:
        return Results(
            runs=tuple(runs),
            records=traces.records,
            malformed=traces.malformed,
            flow_summary=table("flow_summary", summary),
            throughput_ratios=table("throughput_ratios", metrics.throughput_ratios(summary)),
            throughput_per_second=table(
                "throughput_per_second", metrics.throughput_per_second(traces.clients, summary)
            ),
            latency_percentiles=table(
                "latency_percentiles", metrics.latency_percentiles(traces.clients)
            ),
            phase_breakdown=table("phase_breakdown", metrics.phase_breakdown(traces.servers)),
            phase_tail=table("phase_tail", metrics.phase_tail(traces.servers)),
            batch_sizes=table("batch_sizes", metrics.batch_sizes(traces.batches)),
            batch_size_histogram=table(
                "batch_size_histogram", metrics.batch_size_histogram(traces.batches)
            ),
            failover_gaps=table(
                "failover_gaps", metrics.failover_gaps(traces.clients, traces.faults, summary)
            ),
        )
    finally:
        summary.unpersist()
        traces.unpersist()


def _write_and_collect(frame: DataFrame, path: Path) -> list[Row]:
    """Write `frame` to `path` as Parquet and return its rows, computing it once.

    A frame cached by the caller stays cached; one cached here is released.
    """
    cached_here = not frame.is_cached
    if cached_here:
        frame = frame.cache()
    try:
        frame.coalesce(1).write.mode("overwrite").parquet(str(path))
        return [row.asDict() for row in frame.collect()]
    finally:
        if cached_here:
            frame.unpersist()
