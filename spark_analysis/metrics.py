"""The DataFrame computations behind every table of the report.

Conventions shared by all functions:

* A client request *succeeded* when its `status` is `OK`; it is a *write* when its
  optional `write` field is true (absent counts as not a write).
* A client request *completes* at `t_ns + latency_ns`; throughput counts requests by
  the second of wall clock in which they completed.
* A flow's *window* runs from its first client request's `t_ns` to its last
  completion, over all its client requests, failed ones included.
* Percentiles are exact (Spark's `percentile`), with linear interpolation between the
  two closest ranks: for n sorted values x[0..n-1], the p-quantile is at position
  p * (n - 1) (numpy's default `linear` method).
* Durations are reported in milliseconds (`*_ms`), throughput in requests per second.
* Every grouping is by `run` and `flow` first, so flows of different runs never mix.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_analysis.schema import PHASES

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000.0
OK = "OK"

# (column suffix, fraction) of the latency percentiles, in report order.
LATENCY_PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.5),
    ("p90", 0.9),
    ("p99", 0.99),
    ("p99_9", 0.999),
)

# The percentiles of the headline write latency and of the batch sizes.
MEDIAN_AND_P99: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p99", 0.99))

# The per-second table covers at most this much of a window, so that a wild timestamp
# cannot make it (and the job's memory) explode; the flow summary still shows the window.
MAX_WINDOW_SECONDS = 7 * 24 * 3600

# (numerator flow, denominator flow) of the write-throughput ratios in the summary.
RATIO_FLOWS: tuple[tuple[str, str], ...] = (
    ("leader", "replicated"),
    ("leader", "ceiling"),
    ("leader", "leader-nobatch"),
    ("leader", "etcd"),
)

_FLOW_KEY = ("run", "flow")


def ratio_name(numerator: str, denominator: str) -> str:
    """The column / JSON key of a ratio, e.g. `leader_over_leader_nobatch`."""
    return f"{numerator}_over_{denominator}".replace("-", "_")


def _whole_seconds(column: str) -> Column:
    """Integer seconds of a nanosecond column, by exact integer division."""
    return F.expr(f"{column} div {NS_PER_S}")


def _ms(column: Column) -> Column:
    return column / F.lit(NS_PER_MS)


def _percentiles(
    column: str, prefix: str, wanted: tuple[tuple[str, float], ...], scale: float = 1.0
) -> list[Column]:
    """Exact percentiles of `column` divided by `scale`, named `{prefix}_{suffix}`."""
    values = F.percentile(F.col(column), [fraction for _, fraction in wanted])
    return [
        (values[index] / F.lit(scale)).alias(f"{prefix}_{suffix}")
        for index, (suffix, _) in enumerate(wanted)
    ]


def completed(clients: DataFrame) -> DataFrame:
    """Client requests with `done_ns`, `ok` and `is_write` columns added."""
    return clients.select(
        "*",
        (F.col("t_ns") + F.col("latency_ns")).alias("done_ns"),
        (F.col("status") == OK).alias("ok"),
        F.coalesce(F.col("write"), F.lit(False)).alias("is_write"),
    )


def _origin_s() -> Column:
    """The second a flow's window starts in: the zero of its relative time axis (`t_s`)."""
    return _whole_seconds("start_ns")


def throughput_per_second(clients: DataFrame, summary: DataFrame) -> DataFrame:
    """Successful requests and successful writes completed in each second of each window.

    `summary` is `flow_summary`'s result (for the windows). Columns: run, flow, second
    (Unix seconds), t_s (seconds since the window's first second), ok_requests,
    ok_writes. Every second of the window has a row, zeros included, so gaps show;
    seconds past the first MAX_WINDOW_SECONDS of a window are left out.
    """
    last_s = F.least(_whole_seconds("end_ns"), _origin_s() + F.lit(MAX_WINDOW_SECONDS - 1))
    seconds = summary.select(
        *_FLOW_KEY,
        _origin_s().alias("origin_s"),
        F.explode(F.sequence(_origin_s(), last_s)).alias("second"),
    )
    counts = (
        completed(clients)
        .where(F.col("ok"))
        .groupBy(*_FLOW_KEY, _whole_seconds("done_ns").alias("second"))
        .agg(
            F.count(F.lit(1)).alias("ok_requests"),
            F.count(F.when(F.col("is_write"), 1)).alias("ok_writes"),
        )
    )
    return (
        seconds.join(counts, [*_FLOW_KEY, "second"], "left")
        .select(
            *_FLOW_KEY,
            "second",
            (F.col("second") - F.col("origin_s")).alias("t_s"),
            F.coalesce(F.col("ok_requests"), F.lit(0)).alias("ok_requests"),
            F.coalesce(F.col("ok_writes"), F.lit(0)).alias("ok_writes"),
        )
        .orderBy(*_FLOW_KEY, "second")
    )


def latency_percentiles(clients: DataFrame) -> DataFrame:
    """Latency of successful client requests per run, flow and op.

    Columns: run, flow, op, count, latency_ms_p50, _p90, _p99, _p99_9, latency_ms_max,
    latency_ms_mean.
    """
    return (
        clients.where(F.col("status") == OK)
        .groupBy(*_FLOW_KEY, "op")
        .agg(
            F.count(F.lit(1)).alias("count"),
            *_percentiles("latency_ns", "latency_ms", LATENCY_PERCENTILES, NS_PER_MS),
            _ms(F.max("latency_ns")).alias("latency_ms_max"),
            _ms(F.avg("latency_ns")).alias("latency_ms_mean"),
        )
        .orderBy(*_FLOW_KEY, "op")
    )


def _phase_total(phases: list[Column]) -> Column:
    """The sum of the phase columns: a request's time on the server."""
    total = phases[0]
    for phase in phases[1:]:
        total = total + phase
    return total


def phase_breakdown(servers: DataFrame) -> DataFrame:
    """Mean time per phase of successful server requests, per run, flow and op.

    Columns: run, flow, op, count, then `<phase>_ms_mean` for each phase in request order
    (lock_wait, execute, batch_wait, replicate, apply, reply), then total_ms_mean, the
    mean of the phases' sum.
    """
    total = _phase_total([F.col(column) for column, _ in PHASES])
    return (
        servers.where(F.col("status") == OK)
        .groupBy(*_FLOW_KEY, "op")
        .agg(
            F.count(F.lit(1)).alias("count"),
            *(
                _ms(F.avg(column)).alias(column.removesuffix("_ns") + "_ms_mean")
                for column, _ in PHASES
            ),
            _ms(F.avg(total)).alias("total_ms_mean"),
        )
        .orderBy(*_FLOW_KEY, "op")
    )


def phase_tail(servers: DataFrame) -> DataFrame:
    """Each flow's mean phases over all its successful server requests and over its tail.

    The tail is the requests whose server time (the sum of their phases) is at or above
    the flow's p99 of it: where the time of the slowest 1 % goes. Per run and flow, over
    every op. Columns: run, flow, count, tail_count, total_ms_p99, then `<phase>_ms_mean`
    for each phase in request order and total_ms_mean, then `<phase>_ms_tail_mean` for
    each phase and total_ms_tail_mean.
    """
    ok = servers.where(F.col("status") == OK).select(
        *_FLOW_KEY,
        *(F.col(column) for column, _ in PHASES),
        _phase_total([F.col(column) for column, _ in PHASES]).alias("total_ns"),
    )
    thresholds = ok.groupBy(*_FLOW_KEY).agg(
        F.percentile(F.col("total_ns"), 0.99).alias("p99_ns")
    )
    tail = F.col("total_ns") >= F.col("p99_ns")
    columns = [column for column, _ in PHASES] + ["total_ns"]
    return (
        ok.join(thresholds, list(_FLOW_KEY))
        .groupBy(*_FLOW_KEY)
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.count(F.when(tail, 1)).alias("tail_count"),
            _ms(F.max("p99_ns")).alias("total_ms_p99"),
            *(
                _ms(F.avg(column)).alias(column.removesuffix("_ns") + "_ms_mean")
                for column in columns
            ),
            *(
                _ms(F.avg(F.when(tail, F.col(column)))).alias(
                    column.removesuffix("_ns") + "_ms_tail_mean"
                )
                for column in columns
            ),
        )
        .orderBy(*_FLOW_KEY)
    )


def batch_sizes(batches: DataFrame) -> DataFrame:
    """Requests and bytes per replicated batch, per run and flow.

    Columns: run, flow, batches, requests_total, then requests_ and bytes_ each with
    mean, p50, p99, max.
    """
    stats = []
    for column in ("requests", "bytes"):
        stats += [
            F.avg(column).alias(f"{column}_mean"),
            *_percentiles(column, column, MEDIAN_AND_P99),
            F.max(column).alias(f"{column}_max"),
        ]
    return (
        batches.groupBy(*_FLOW_KEY)
        .agg(
            F.count(F.lit(1)).alias("batches"),
            F.sum("requests").alias("requests_total"),
            *stats,
        )
        .orderBy(*_FLOW_KEY)
    )


def batch_size_histogram(batches: DataFrame) -> DataFrame:
    """How many batches carried each number of requests, per run and flow.

    Columns: run, flow, requests, batches, fraction (of the flow's batches) and
    cumulative_fraction (of its batches carrying at most `requests`), by requests.
    """
    per_size = batches.groupBy(*_FLOW_KEY, "requests").agg(F.count(F.lit(1)).alias("batches"))
    flow = Window.partitionBy(*_FLOW_KEY)
    up_to_size = flow.orderBy("requests")
    total = F.sum("batches").over(flow)
    return per_size.select(
        *_FLOW_KEY,
        "requests",
        "batches",
        (F.col("batches") / total).alias("fraction"),
        (F.sum("batches").over(up_to_size) / total).alias("cumulative_fraction"),
    ).orderBy(*_FLOW_KEY, "requests")


def flow_summary(clients: DataFrame, batches: DataFrame) -> DataFrame:
    """The headline numbers of each flow that has client requests.

    Columns: run, flow, start_ns and end_ns (the window), duration_s (its length),
    requests, ok_requests, ok_writes, throughput_rps and write_throughput_rps (successes
    / duration_s, null when the window is empty), write_latency_ms_p50 / _p99 / _max over
    successful writes (null without any), requests_per_batch_mean (null when the flow has
    no server_batch).
    """
    ok_write = F.col("ok") & F.col("is_write")
    write_latency = F.when(ok_write, F.col("latency_ns"))
    per_flow = (
        completed(clients)
        .select("*", write_latency.alias("write_latency_ns"))
        .groupBy(*_FLOW_KEY)
        .agg(
            F.min("t_ns").alias("start_ns"),
            F.max("done_ns").alias("end_ns"),
            F.count(F.lit(1)).alias("requests"),
            F.count(F.when(F.col("ok"), 1)).alias("ok_requests"),
            F.count(F.when(ok_write, 1)).alias("ok_writes"),
            *_percentiles("write_latency_ns", "write_latency_ms", MEDIAN_AND_P99, NS_PER_MS),
            _ms(F.max("write_latency_ns")).alias("write_latency_ms_max"),
        )
    )
    batch_mean = batches.groupBy(*_FLOW_KEY).agg(F.avg("requests").alias("requests_per_batch_mean"))
    duration_s = (F.col("end_ns") - F.col("start_ns")) / F.lit(float(NS_PER_S))
    return (
        per_flow.join(batch_mean, list(_FLOW_KEY), "left")
        .select(
            *_FLOW_KEY,
            "start_ns",
            "end_ns",
            duration_s.alias("duration_s"),
            "requests",
            "ok_requests",
            "ok_writes",
            F.try_divide(F.col("ok_requests"), duration_s).alias("throughput_rps"),
            F.try_divide(F.col("ok_writes"), duration_s).alias("write_throughput_rps"),
            "write_latency_ms_p50",
            "write_latency_ms_p99",
            "write_latency_ms_max",
            "requests_per_batch_mean",
        )
        .orderBy(*_FLOW_KEY)
    )


def throughput_ratios(summary: DataFrame) -> DataFrame:
    """Write-throughput ratios between flows of the same run, from `flow_summary`.

    Columns: run, then one `ratio_name(numerator, denominator)` per `RATIO_FLOWS` pair;
    a ratio is null when either flow is missing from the run or the denominator is 0.
    """

    def throughput_of(flow: str) -> Column:
        return F.max(F.when(F.col("flow") == flow, F.col("write_throughput_rps")))

    return (
        summary.groupBy("run")
        .agg(
            *(
                F.try_divide(throughput_of(numerator), throughput_of(denominator)).alias(
                    ratio_name(numerator, denominator)
                )
                for numerator, denominator in RATIO_FLOWS
            )
        )
        .orderBy("run")
    )


def failover_gaps(clients: DataFrame, faults: DataFrame, summary: DataFrame) -> DataFrame:
    """The interval without successful writes around each fault, per run and flow.

    For a fault at `t_ns`: last_write_before_ns is the last completion of a successful
    write at or before it, first_write_after_ns the first one after it; gap_ms is the
    time between the two and recovery_ms the time from the fault to the second (null
    when no successful write follows). t_s places the fault on the flow's time axis, taken
    from `summary` (`flow_summary`'s result; null for a flow without client requests).
    Columns: run, flow, t_ns, t_s, action, node, last_write_before_ns,
    first_write_after_ns, gap_ms, recovery_ms; ordered by run, flow, t_ns.
    """
    writes = completed(clients).where(F.col("ok") & F.col("is_write")).select(*_FLOW_KEY, "done_ns")
    fault_key = [*_FLOW_KEY, "t_ns", "action", "node"]
    around = (
        faults.select(*fault_key)
        .join(writes, list(_FLOW_KEY), "left")
        .groupBy(*fault_key)
        .agg(
            F.max(F.when(F.col("done_ns") <= F.col("t_ns"), F.col("done_ns"))).alias(
                "last_write_before_ns"
            ),
            F.min(F.when(F.col("done_ns") > F.col("t_ns"), F.col("done_ns"))).alias(
                "first_write_after_ns"
            ),
        )
    )
    origin_ns = F.col("origin_s") * F.lit(NS_PER_S)
    origins = summary.select(*_FLOW_KEY, _origin_s().alias("origin_s"))
    return (
        around.join(origins, list(_FLOW_KEY), "left")
        .select(
            *_FLOW_KEY,
            "t_ns",
            ((F.col("t_ns") - origin_ns) / F.lit(float(NS_PER_S))).alias("t_s"),
            "action",
            "node",
            "last_write_before_ns",
            "first_write_after_ns",
            _ms(F.col("first_write_after_ns") - F.col("last_write_before_ns")).alias("gap_ms"),
            _ms(F.col("first_write_after_ns") - F.col("t_ns")).alias("recovery_ms"),
        )
        .orderBy(*_FLOW_KEY, "t_ns")
    )
