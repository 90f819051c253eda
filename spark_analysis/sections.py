"""The content of the report: one section per question, built from the results.

Each section that has a plot draws it through `plots`; a section whose data is absent
is a single line saying so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from spark_analysis import plots
from spark_analysis.metrics import LATENCY_PERCENTILES, RATIO_FLOWS, ratio_name
from spark_analysis.report import Block, Code, Image, Paragraph, Section, Table
from spark_analysis.results import Results, Row
from spark_analysis.schema import PHASES
from spark_analysis.summary import build_summary
from spark_analysis.why import WHY, why_section

SUMMARY = "Summary"
INPUT = "Input"
THROUGHPUT = "Throughput over time"
LATENCY = "Latency percentiles"
PHASE_BREAKDOWN = "Where a request's time goes"
BATCH_SIZES = "Batch sizes"
BATCHING = "Throughput vs batching"
FAILOVER = "Failover gaps"
SECTION_TITLES: tuple[str, ...] = (
    SUMMARY,
    WHY,
    INPUT,
    THROUGHPUT,
    LATENCY,
    PHASE_BREAKDOWN,
    BATCH_SIZES,
    BATCHING,
    FAILOVER,
)


def fmt(value: object) -> str:
    """A table cell: `n/a` for null, thousands separators, 4 significant digits below 1000."""
    if value is None:
        return "n/a"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _table(
    results: Results,
    rows: Sequence[Row],
    columns: Sequence[tuple[str, str]],
    *,
    by_op: bool = False,
) -> Table:
    """A table of `rows`: a flow column, an op column if `by_op`, one per (key, heading)."""
    leading = ("flow", "op") if by_op else ("flow",)
    return Table(
        columns=(*leading, *(heading for _, heading in columns)),
        rows=tuple(
            (
                results.series_label(row),
                *((str(row["op"]),) if by_op else ()),
                *(fmt(row[key]) for key, _ in columns),
            )
            for row in rows
        ),
    )


def _plotted(
    title: str,
    results: Results,
    out_dir: Path,
    plot: Callable[[Results, Path], Path | None],
    absent: str,
    intro: str,
    details: Sequence[Block],
) -> Section:
    """A section of `intro`, its plot, then `details`; only the line `absent` if no plot."""
    image = plot(results, out_dir)
    if image is None:
        return Section(title, (Paragraph(absent),))
    return Section(title, (Paragraph(intro), Image(image, alt=title), *details))


def _summary(results: Results) -> Section:
    if not results.flow_summary:
        return Section(SUMMARY, (Paragraph("No client_request records, so no headline numbers."),))
    flows = _table(
        results,
        results.flow_summary,
        (
            ("requests", "requests"),
            ("ok_writes", "OK writes"),
            ("duration_s", "window (s)"),
            ("write_throughput_rps", "writes/s"),
            ("write_latency_ms_p50", "write p50 (ms)"),
            ("write_latency_ms_p99", "write p99 (ms)"),
            ("write_latency_ms_max", "write max (ms)"),
            ("requests_per_batch_mean", "requests/batch"),
        ),
    )
    ratio_rows = tuple(
        (run, name, fmt(value))
        for run, content in build_summary(results)["runs"].items()
        for name, value in content["ratios"].items()
    )
    ratios: Block = (
        Table(("run", "write-throughput ratio", "value"), ratio_rows)
        if ratio_rows
        else Paragraph(
            "No ratio: a run needs the leader flow and one of "
            + ", ".join(denominator for _, denominator in RATIO_FLOWS)
            + "."
        )
    )
    return Section(
        SUMMARY,
        (
            Paragraph(
                "A request succeeded when its status is OK; a write is a request with "
                "write=true. A flow's window runs from its first request sent to its last "
                "answer; writes/s is its successful writes divided by the window. Write "
                "latency is over successful writes."
            ),
            flows,
            ratios,
        ),
    )


def _input(results: Results) -> Section:
    runs = Table(
        ("run", "path", "trace files", "manifest.json"),
        tuple(
            (run.label, str(run.path), fmt(len(run.files)), "yes" if run.manifest else "no")
            for run in results.runs
        ),
    )
    records = Table(
        ("kind", "valid records"),
        tuple((kind, fmt(count)) for kind, count in results.records.items()),
    )
    skipped = sum(results.malformed.values())
    malformed = Table(
        ("reason", "skipped lines"),
        tuple((reason, fmt(count)) for reason, count in results.malformed.items()),
    )
    manifests: list[Block] = []
    for run in results.runs:
        if run.manifest:
            manifests += [
                Paragraph(f"manifest.json of {run.label}:"),
                Code(json.dumps(run.manifest, indent=2, sort_keys=True)),
            ]
    return Section(
        INPUT,
        (
            runs,
            records,
            Paragraph(f"{skipped:,} malformed lines were skipped."),
            malformed,
            *manifests,
        ),
    )


def _throughput(results: Results, out_dir: Path) -> Section:
    return _plotted(
        THROUGHPUT,
        results,
        out_dir,
        plots.plot_throughput,
        "No client_request records, so no throughput over time.",
        (
            "Successful requests and writes per second of wall clock, counted in the "
            "second they completed (t_ns + latency_ns); every second of the window is "
            "shown, empty ones as 0. Per-second counts: "
            "tables/throughput_per_second.parquet."
        ),
        (),
    )


def _latency(results: Results, out_dir: Path) -> Section:
    columns = [("count", "count")] + [
        (f"latency_ms_{suffix}", f"{suffix.replace('_', '.')} (ms)")
        for suffix, _ in LATENCY_PERCENTILES
    ]
    columns += [("latency_ms_max", "max (ms)"), ("latency_ms_mean", "mean (ms)")]
    return _plotted(
        LATENCY,
        results,
        out_dir,
        plots.plot_latency,
        "No successful client_request records, so no latency percentiles.",
        (
            "Client-side latency of successful requests, retries included. Percentiles "
            "are exact, interpolated linearly between the two closest ranks."
        ),
        (_table(results, results.latency_percentiles, columns, by_op=True),),
    )


def _client_only(results: Results) -> list[Block]:
    """A line naming the flows with client records but no server phases, if any."""
    traced = {(row["run"], row["flow"]) for row in results.phase_breakdown}
    missing = [
        results.series_label(row)
        for row in results.flow_summary
        if (row["run"], row["flow"]) not in traced
    ]
    if not missing:
        return []
    return [
        Paragraph(
            "Flows with client records but no successful server_request records (not "
            "plotted; an external peer such as etcd traces its client only): "
            + ", ".join(missing)
        )
    ]


def _phases(results: Results, out_dir: Path) -> Section:
    columns = [("count", "count")] + [
        (column.removesuffix("_ns") + "_ms_mean", f"{name} (ms)") for column, name in PHASES
    ]
    columns.append(("total_ms_mean", "total (ms)"))
    return _plotted(
        PHASE_BREAKDOWN,
        results,
        out_dir,
        plots.plot_phases,
        "No successful server_request records, so no phase breakdown.",
        (
            "Mean time per phase of successful server_request records, by flow and op. "
            "A phase a request did not go through counts as 0."
        ),
        (
            _table(results, results.phase_breakdown, columns, by_op=True),
            *_client_only(results),
        ),
    )


def _batch_sizes(results: Results, out_dir: Path) -> Section:
    columns = [("batches", "batches")] + [
        (f"{quantity}_{statistic}", f"{quantity} {statistic}")
        for quantity in ("requests", "bytes")
        for statistic in ("mean", "p50", "p99", "max")
    ]
    return _plotted(
        BATCH_SIZES,
        results,
        out_dir,
        plots.plot_batch_sizes,
        "No server_batch records, so no batch sizes.",
        (
            "Requests and bytes per replicated batch (server_batch records). The plot shows, "
            "for each size, the fraction of a flow's batches carrying at most that many."
        ),
        (_table(results, results.batch_sizes, columns),),
    )


def _batching(results: Results, out_dir: Path) -> Section:
    unbatched = [
        results.series_label(row)
        for row in results.flow_summary
        if row["requests_per_batch_mean"] is None
    ]
    notes: list[Block] = []
    if unbatched:
        notes.append(
            Paragraph(
                "Flows without server_batch records, drawn as dashed lines at their write "
                "throughput (their batching is not traced): " + ", ".join(unbatched)
            )
        )
    name = ratio_name("leader", "leader-nobatch")
    for run, content in build_summary(results)["runs"].items():
        if content["ratios"].get(name) is not None:
            notes.append(
                Paragraph(
                    f"{run}: write throughput with batching is {fmt(content['ratios'][name])} "
                    "times that without (leader / leader-nobatch)."
                )
            )
    return _plotted(
        BATCHING,
        results,
        out_dir,
        plots.plot_throughput_vs_batching,
        "No flow has both successful writes and server_batch records, so nothing to compare.",
        (
            "Each flow's write throughput against its mean requests per batch: whether "
            "pre-Raft batching pays off."
        ),
        (
            _table(
                results,
                [row for row in results.flow_summary if row["requests_per_batch_mean"] is not None],
                (
                    ("requests_per_batch_mean", "requests/batch"),
                    ("write_throughput_rps", "writes/s"),
                ),
            ),
            *notes,
        ),
    )


def _failover(results: Results, out_dir: Path) -> Section:
    return _plotted(
        FAILOVER,
        results,
        out_dir,
        plots.plot_failover,
        "No fault records in the input, so no failover gaps.",
        (
            "For each injected fault: the gap between the last successful write before "
            "it and the first after it, and the recovery time from the fault to that "
            "first write (n/a when no write followed)."
        ),
        (
            _table(
                results,
                results.failover_gaps,
                (
                    ("t_s", "at (s)"),
                    ("action", "action"),
                    ("node", "node"),
                    ("gap_ms", "gap (ms)"),
                    ("recovery_ms", "recovery (ms)"),
                ),
            ),
        ),
    )


def build_sections(results: Results, out_dir: Path) -> list[Section]:
    """Every section of the report, titled and ordered as `SECTION_TITLES`.

    Draws the plots into `out_dir` as a side effect.
    """
    return [
        _summary(results),
        why_section(results),
        _input(results),
        _throughput(results, out_dir),
        _latency(results, out_dir),
        _phases(results, out_dir),
        _batch_sizes(results, out_dir),
        _batching(results, out_dir),
        _failover(results, out_dir),
    ]


def report_title(results: Results) -> str:
    """The report's title, naming its runs."""
    return "Trace analysis: " + ", ".join(run.label for run in results.runs)
