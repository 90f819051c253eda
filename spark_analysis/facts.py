"""The figures the report's "why" section reasons from, one `FlowFacts` per flow.

Pure Python over the collected tables and the run's own records (`om bench`'s
summary.json for CPU, memory and load, manifest.json for the machine's cores); nothing
here touches Spark. Every figure is None when the input that would give it is absent, so
a run without bench records still gets its trace-derived facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_analysis.results import Results, Row
from spark_analysis.schema import PHASES

# The part of a client's latency that no server phase covers: the client, the sockets,
# and the server's queue before it stamps a request as received.
OUTSIDE = "outside the server"
# The label `om bench` gives its own process (the load generator; in-process, the node too).
LOAD_GENERATOR = "bench"


@dataclass(frozen=True)
class Part:
    """One component of a latency: its name, its mean in ms, its share of the whole."""

    name: str
    ms: float
    share: float


@dataclass(frozen=True)
class Split:
    """A latency split into named parts, largest first; `total_ms` is their sum."""

    total_ms: float
    parts: tuple[Part, ...]

    @property
    def dominant(self) -> Part:
        """The largest part."""
        return self.parts[0]

    def ms_of(self, name: str) -> float:
        """The mean of the part called `name`, 0 when the split has no such part."""
        return next((part.ms for part in self.parts if part.name == name), 0.0)


def split(named_ms: Mapping[str, float]) -> Split | None:
    """`named_ms` as a Split (ties keep the given order); None when the parts sum to <= 0."""
    total = sum(named_ms.values())
    if total <= 0:
        return None
    parts = (Part(name, ms, ms / total) for name, ms in named_ms.items())
    return Split(total, tuple(sorted(parts, key=lambda part: part.ms, reverse=True)))


@dataclass(frozen=True)
class ProcessUse:
    """One process of a flow as `om bench` recorded it over the measured window.

    `cpu_percent` is CPU time in percent of one core; `thread_demand_percent` the share of
    the window its busiest thread was running or waiting for a CPU; `rss_mb` its resident
    memory at the end (a node's server and Raft processes are recorded together, under the
    node's name).
    """

    name: str
    cpu_percent: float | None
    thread_demand_percent: float | None
    rss_mb: float | None


@dataclass(frozen=True)
class FlowFacts:
    """What the report knows about one flow of one run.

    From the traces: `write_rps`, `latency_ms_mean` (successful client requests),
    `write_latency_ms_p99`, `mean_split` (the mean client latency split into the server's
    phases and `OUTSIDE`), `tail_split` and `tail_threshold_ms` (the phases of the server
    requests at or above the p99 server time), `requests_per_batch`, `batches_per_s`.
    From `om bench`'s records: `processes`, `in_flight`, `bench_write_rps` (the rate the
    CPU figures were measured at), `cores` (the machine's usable CPUs), `roles` (CPU µs
    per acknowledged write by role: `bench/roles.py`), `bound` (what bound the measured
    run and why: `bench/bound.py`) and `busy_warning` (set when other processes used
    more than 10 % of the machine meanwhile: `bench/machine_load.py`).
    """

    run: str
    flow: str
    label: str
    write_rps: float | None
    latency_ms_mean: float | None
    write_latency_ms_p99: float | None
    mean_split: Split | None
    tail_split: Split | None
    tail_threshold_ms: float | None
    requests_per_batch: float | None
    batches_per_s: float | None
    processes: tuple[ProcessUse, ...]
    in_flight: int | None
    bench_write_rps: float | None
    cores: int | None
    roles: tuple[tuple[str, float], ...] = ()
    bound: tuple[str, str] | None = None     # (label, reason)
    busy_warning: str | None = None

    @property
    def cpu_percent_total(self) -> float | None:
        """CPU of all the flow's processes, load generator included, in percent of a core."""
        known = [use.cpu_percent for use in self.processes if use.cpu_percent is not None]
        return sum(known) if known else None

    @property
    def machine_busy(self) -> float | None:
        """The fraction of the machine's cores the flow's processes kept busy."""
        total = self.cpu_percent_total
        return None if total is None or not self.cores else total / (100.0 * self.cores)

    @property
    def cpu_us_per_write(self) -> float | None:
        """CPU time of all the flow's processes per successful write, in microseconds."""
        total = self.cpu_percent_total
        if total is None or not self.bench_write_rps:
            return None
        return total / 100.0 * 1e6 / self.bench_write_rps

    @property
    def busiest(self) -> ProcessUse | None:
        """The process whose busiest thread wanted a CPU the largest share of the window."""
        known = [use for use in self.processes if use.thread_demand_percent is not None]
        return max(known, key=lambda use: use.thread_demand_percent or 0.0, default=None)

    @property
    def rss_mb_total(self) -> float | None:
        """Resident memory of all the flow's recorded processes, in MiB."""
        known = [use.rss_mb for use in self.processes if use.rss_mb is not None]
        return sum(known) if known else None


def number(value: Any) -> float | None:
    """`value` as a float when it is a JSON number (not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _row(rows: Iterable[Row], run: str, flow: str) -> Row:
    """The row of (`run`, `flow`), an empty one when the table has none."""
    return next((row for row in rows if row["run"] == run and row["flow"] == flow), {})


def client_mean_ms(results: Results, run: str, flow: str) -> float | None:
    """Mean latency of the flow's successful client requests, over every op."""
    rows = [row for row in results.latency_percentiles if (row["run"], row["flow"]) == (run, flow)]
    count = sum(row["count"] for row in rows)
    if not count:
        return None
    return float(sum(row["count"] * row["latency_ms_mean"] for row in rows) / count)


def mean_split(tail_row: Row, client_ms: float | None) -> Split | None:
    """The mean client latency split into server phases and what lies outside them.

    The phases are the means over successful server requests; `OUTSIDE` is the client's
    mean minus their sum, left out when there is no client mean or it is not larger.
    """
    if not tail_row:
        return None
    named = {name: tail_row[column.removesuffix("_ns") + "_ms_mean"] for column, name in PHASES}
    if client_ms is not None and client_ms > sum(named.values()):
        named[OUTSIDE] = client_ms - sum(named.values())
    return split(named)


def tail_split(tail_row: Row) -> Split | None:
    """The server time of the slowest 1 % of successful server requests, split by phase."""
    if not tail_row or not tail_row["tail_count"]:
        return None
    return split(
        {name: tail_row[column.removesuffix("_ns") + "_ms_tail_mean"] for column, name in PHASES}
    )


def processes(bench_flow: Mapping[str, Any]) -> tuple[ProcessUse, ...]:
    """The processes of one flow of `om bench`'s summary.json; the load generator last."""
    cpu = _object(bench_flow.get("cpu_percent"))
    demand = _object(bench_flow.get("thread_demand_percent"))
    rss = _object(bench_flow.get("om_rss_mb_by_process"))
    names = sorted({*cpu, *demand, *rss}, key=lambda name: (name == LOAD_GENERATOR, name))
    return tuple(
        ProcessUse(name, number(cpu.get(name)), number(demand.get(name)), number(rss.get(name)))
        for name in names
    )


def roles(bench_flow: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """CPU µs per acknowledged write by role, as `om bench` recorded them."""
    found = {name: number(raw) for name, raw in
             _object(bench_flow.get("cpu_us_per_write")).items()}
    return tuple((name, value) for name, value in found.items() if value is not None)


def bound(bench_flow: Mapping[str, Any]) -> tuple[str, str] | None:
    """(label, reason) of what bound the flow's measured run, as `om bench` recorded it."""
    found = _object(bench_flow.get("bound"))
    label, reason = found.get("label"), found.get("reason")
    return (label, reason) if isinstance(label, str) and isinstance(reason, str) else None


def busy_warning(bench_flow: Mapping[str, Any]) -> str | None:
    """`om bench`'s warning that other processes used the machine during the flow."""
    warning = _object(bench_flow.get("machine_load")).get("warning")
    return warning if isinstance(warning, str) else None


def cores(manifest: Mapping[str, Any] | None) -> int | None:
    """The CPUs the run could use: the manifest's CPU affinity, else its CPU count."""
    machine = _object(_object(manifest).get("machine"))
    found = number(machine.get("cpu_affinity")) or number(machine.get("cpu_count"))
    return int(found) if found else None


def _batches_per_s(results: Results, run: str, flow: str) -> float | None:
    """Replicated batches per second of the flow's window."""
    batches = _row(results.batch_sizes, run, flow).get("batches")
    duration = _row(results.flow_summary, run, flow).get("duration_s")
    return float(batches / duration) if batches and duration else None


def flow_facts(results: Results) -> list[FlowFacts]:
    """The facts of every flow with client or server records, by run and flow."""
    rows = [*results.flow_summary, *results.phase_tail]
    keys = sorted({(row["run"], row["flow"]) for row in rows})
    runs = {run.label: run for run in results.runs}
    return [_facts_of(results, runs[run].manifest, runs[run].bench_summary, run, flow)
            for run, flow in keys]


def _facts_of(results: Results, manifest: dict[str, Any] | None,
              bench_summary: dict[str, Any] | None, run: str, flow: str) -> FlowFacts:
    """The facts of one flow (see `FlowFacts`)."""
    summary = _row(results.flow_summary, run, flow)
    tail = _row(results.phase_tail, run, flow)
    bench_flow = _object(_object(_object(bench_summary).get("flows")).get(flow))
    in_flight = number(bench_flow.get("threads"))
    client_ms = client_mean_ms(results, run, flow)
    return FlowFacts(
        run=run,
        flow=flow,
        label=results.series_label({"run": run, "flow": flow}),
        write_rps=summary.get("write_throughput_rps"),
        latency_ms_mean=client_ms,
        write_latency_ms_p99=summary.get("write_latency_ms_p99"),
        mean_split=mean_split(tail, client_ms),
        tail_split=tail_split(tail),
        tail_threshold_ms=tail.get("total_ms_p99"),
        requests_per_batch=summary.get("requests_per_batch_mean"),
        batches_per_s=_batches_per_s(results, run, flow),
        processes=processes(bench_flow),
        in_flight=None if in_flight is None else int(in_flight),
        bench_write_rps=number(bench_flow.get("write_requests_per_s")),
        cores=cores(manifest),
        roles=roles(bench_flow),
        bound=bound(bench_flow),
        busy_warning=busy_warning(bench_flow),
    )
