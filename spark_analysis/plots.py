"""PNG plots of the analysis results (matplotlib, Agg canvas, no pyplot global state).

Every `plot_*` function draws one figure from `Results` into `out_dir` and returns the
PNG's path, or None when the data it needs is absent (then no file is written).
A flow keeps the same colour in every plot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spark_analysis.metrics import LATENCY_PERCENTILES
from spark_analysis.results import Results, Row
from spark_analysis.schema import PHASES

_DPI = 100
_PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
_PERCENTILE_LABELS = {"p50": "p50", "p90": "p90", "p99": "p99", "p99_9": "p99.9"}


def _by_series(results: Results, rows: Iterable[Row]) -> dict[str, list[Row]]:
    """Rows grouped by series label, labels sorted, row order kept within a series."""
    grouped: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        grouped[results.series_label(row)].append(row)
    return dict(sorted(grouped.items()))


def _colours(results: Results) -> Callable[[str], str]:
    """A colour per series label, stable across all plots of one analysis."""
    labels = sorted(
        {
            results.series_label(row)
            for table in (
                results.flow_summary,
                results.throughput_per_second,
                results.latency_percentiles,
                results.phase_breakdown,
                results.batch_size_histogram,
            )
            for row in table
        }
    )
    assigned = {label: _PALETTE[index % len(_PALETTE)] for index, label in enumerate(labels)}
    return lambda label: assigned.get(label, _PALETTE[-1])


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=_DPI)
    return path


def _per_second(axes: Axes, rows: list[Row], column: str, colour: str, label: str) -> None:
    """Draw a per-second count as stairs: each second's value spans [t_s, t_s + 1)."""
    if rows:
        edges = [row["t_s"] for row in rows] + [rows[-1]["t_s"] + 1]
        axes.stairs([row[column] for row in rows], edges, color=colour, label=label)
    axes.set_ylim(bottom=0)


def plot_throughput(results: Results, out_dir: Path) -> Path | None:
    """Successful requests/s and successful writes/s over each flow's time axis."""
    series = _by_series(results, results.throughput_per_second)
    if not series:
        return None
    colour = _colours(results)
    figure = Figure(figsize=(10, 6), layout="constrained")
    requests_axes, writes_axes = figure.subplots(2, 1, sharex=True)
    for label, rows in series.items():
        for axes, column in ((requests_axes, "ok_requests"), (writes_axes, "ok_writes")):
            _per_second(axes, rows, column, colour(label), label)
    requests_axes.set_ylabel("successful requests/s")
    writes_axes.set_ylabel("successful writes/s")
    writes_axes.set_xlabel("seconds since the flow's first request")
    requests_axes.legend(loc="best", fontsize="small")
    figure.suptitle("Throughput over time")
    return _save(figure, out_dir / "throughput.png")


def plot_latency(results: Results, out_dir: Path) -> Path | None:
    """Latency percentiles of successful requests, grouped by op, one bar per flow."""
    series = _by_series(results, results.latency_percentiles)
    if not series:
        return None
    colour = _colours(results)
    ops = sorted({row["op"] for row in results.latency_percentiles})
    width = 0.8 / len(series)
    figure = Figure(figsize=(13, 4.5), layout="constrained")
    all_axes = figure.subplots(1, len(LATENCY_PERCENTILES), sharey=True)
    for axes, (suffix, _) in zip(all_axes, LATENCY_PERCENTILES, strict=True):
        for index, (label, rows) in enumerate(series.items()):
            by_op = {row["op"]: row[f"latency_ms_{suffix}"] for row in rows}
            positions = [op_index + index * width for op_index, op in enumerate(ops) if op in by_op]
            values = [by_op[op] for op in ops if op in by_op]
            axes.bar(positions, values, width=width, color=colour(label), label=label)
        axes.set_title(_PERCENTILE_LABELS[suffix])
        ticks = [op_index + 0.4 - width / 2 for op_index in range(len(ops))]
        axes.set_xticks(ticks, ops, rotation=30, ha="right")
        axes.set_yscale("log")
    all_axes[0].set_ylabel("latency (ms, log scale)")
    all_axes[0].legend(loc="best", fontsize="small")
    figure.suptitle("Latency percentiles of successful requests")
    return _save(figure, out_dir / "latency.png")


def plot_phases(results: Results, out_dir: Path) -> Path | None:
    """Mean time per phase of successful server requests, one stacked bar per flow and op."""
    rows = sorted(
        results.phase_breakdown, key=lambda row: (results.series_label(row), str(row["op"]))
    )
    if not rows:
        return None
    labels = [f"{results.series_label(row)} · {row['op']}" for row in rows]
    figure = Figure(figsize=(10, 1.5 + 0.4 * len(rows)), layout="constrained")
    axes = figure.subplots()
    left = [0.0] * len(rows)
    for column, name in PHASES:
        widths = [row[column.removesuffix("_ns") + "_ms_mean"] for row in rows]
        axes.barh(labels, widths, left=left, label=name)
        left = [start + width for start, width in zip(left, widths, strict=True)]
    axes.invert_yaxis()
    axes.set_xlabel("mean time (ms)")
    axes.legend(loc="best", fontsize="small")
    figure.suptitle("Where a request's time goes")
    return _save(figure, out_dir / "phases.png")


def plot_batch_sizes(results: Results, out_dir: Path) -> Path | None:
    """The cumulative distribution of requests per batch of each flow."""
    series = _by_series(results, results.batch_size_histogram)
    if not series:
        return None
    colour = _colours(results)
    figure = Figure(figsize=(10, 4.5), layout="constrained")
    axes = figure.subplots()
    for label, rows in series.items():
        axes.step(
            [0] + [row["requests"] for row in rows],
            [0.0] + [row["cumulative_fraction"] for row in rows],
            where="post",
            color=colour(label),
            label=label,
        )
    axes.set_xlabel("requests per batch")
    axes.set_ylabel("fraction of batches with at most that many")
    axes.set_ylim(0, 1.02)
    axes.legend(loc="best", fontsize="small")
    figure.suptitle("Batch-size distribution")
    return _save(figure, out_dir / "batch_sizes.png")


def plot_throughput_vs_batching(results: Results, out_dir: Path) -> Path | None:
    """Each flow's write throughput against its mean requests per batch.

    Flows without server_batch records (their batching is not traced: the old flow, an
    external peer) are dashed horizontal lines at their write throughput, so every flow
    with writes is on the plot. None when no flow has batches to compare.
    """
    with_writes = [row for row in results.flow_summary if row["write_throughput_rps"]]
    rows = [row for row in with_writes if row["requests_per_batch_mean"] is not None]
    if not rows:
        return None
    colour = _colours(results)
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.subplots()
    for row in rows:
        label = results.series_label(row)
        x, y = row["requests_per_batch_mean"], row["write_throughput_rps"]
        axes.scatter([x], [y], s=60, color=colour(label))
        axes.annotate(label, (x, y), textcoords="offset points", xytext=(6, 6))
    for row in with_writes:
        if row["requests_per_batch_mean"] is None:
            label = results.series_label(row)
            axes.axhline(row["write_throughput_rps"], color=colour(label), linestyle="--",
                         linewidth=1, label=f"{label} (batching not traced)")
    axes.margins(0.15)
    axes.set_xlabel("mean requests per batch")
    axes.set_ylabel("successful writes/s")
    axes.set_ylim(bottom=0)
    if len(with_writes) > len(rows):
        axes.legend(loc="best", fontsize="small")
    figure.suptitle("Throughput vs batching")
    return _save(figure, out_dir / "throughput_vs_batching.png")


def plot_failover(results: Results, out_dir: Path) -> Path | None:
    """Successful writes/s of each flow with faults, a marker line at each fault."""
    faults = _by_series(results, results.failover_gaps)
    if not faults:
        return None
    throughput = _by_series(results, results.throughput_per_second)
    colour = _colours(results)
    figure = Figure(figsize=(10, 1 + 3 * len(faults)), layout="constrained")
    all_axes: list[Axes] = list(figure.subplots(len(faults), 1, squeeze=False)[:, 0])
    for axes, (label, fault_rows) in zip(all_axes, faults.items(), strict=True):
        _per_second(axes, throughput.get(label, []), "ok_writes", colour(label), label)
        for fault in fault_rows:
            if fault["t_s"] is not None:
                axes.axvline(fault["t_s"], color="black", linestyle="--", linewidth=1)
                axes.annotate(
                    fault["action"],
                    (fault["t_s"], 1),
                    xycoords=("data", "axes fraction"),
                    rotation=90,
                    va="top",
                    ha="right",
                    fontsize="small",
                )
        axes.set_title(label)
        axes.set_ylabel("successful writes/s")
    all_axes[-1].set_xlabel("seconds since the flow's first request")
    figure.suptitle("Failover gaps")
    return _save(figure, out_dir / "failover.png")
