"""The headline numbers of a bench run (``summary.json``) and their table.

For each flow: successful write requests per second over the measured
window, write-request latency percentiles (successful writes only, as the
Spark analysis computes them), mean requests per replicated batch (from the
window's ``server_batch`` records; 1.0 when there are none, i.e. one request
per entry), the OM processes' resident memory at the end, and each process's
CPU use and its threads' demand for a CPU over the window
(``bench.machine.CpuMeter``; a demand near 100% marks a CPU-bound process,
even when other load on the machine keeps its CPU use lower), and, when the
profile has one, the half-load phase (omkg paced at half the measured
operation rate) with each request type's latency. Ratios divide
write throughputs; a ratio is ``None`` when either flow is missing or the
denominator is zero.

Each flow also says what bound its measured run, CPU, cycle or stalls, with the
evidence (``bound``: ``bench/bound.py`` holds the rules), and how busy the whole
machine was and how much of it other processes took (``machine_load``:
``bench/machine_load.py``); where others took more than 10 % of the machine, the
flow's warning is in ``machine_load.warning``, in the top-level ``warnings``, and
in the table's last lines, so no figure taken beside other work passes unflagged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from bench import shard_scaling, sweep
from bench.bound import LABELS, MOVES, BoundInputs, Stalls, busiest, classify
from bench.failover import FailoverResult
from bench.freon import FreonResult
from bench.fso import FsoResults, fso_ratios, fso_summary, render_fso
from bench.machine_load import MachineLoad
from bench.roles import (
    ALL_SERVERS,
    ETCD_FOLLOWER,
    ETCD_LEADER,
    FOLLOWER_RAFT,
    FOLLOWER_SERVER,
    LEADER_RAFT,
    LEADER_SERVER,
    LEADER_SHARDS,
    LEADER_SIDE,
    LEADER_WORKERS,
    LOAD_GENERATOR,
    TARGET_CORES,
    TARGET_SHARDS,
    per_role,
    project,
    projections,
)

# (numerator, denominator) flows of the ratios, keyed "<num>_over_<den>" with '-' -> '_'.
RATIO_FLOWS: tuple[tuple[str, str], ...] = (
    ("leader", "replicated"),
    ("leader", "ceiling"),
    ("leader", "leader-nobatch"),
    ("leader", "etcd"),
)
# The label of the bench process (the load generator; in-process, the node too).
CLIENT_PROCESS = "bench"
IN_PROCESS = "in-process"    # the leader of the ceiling flow: the bench process itself
_TABLE_COLUMNS = ("flow", "durable", "write req/s", "p50 ms", "p99 ms", "max ms", "req/batch",
                  "CommitKey p99 ms at half load", "OM RSS MB", "OM CPU%", "bench CPU%",
                  "busiest thread", "bound", "failures")


@dataclass
class FlowMeasurement:
    """What one flow produced; ``measure`` is None when the flow failed before measuring."""

    name: str
    measure: FreonResult | None
    mixed: FreonResult | None = None
    batch_sizes: list[int] | None = field(default_factory=list)  # None: traces were off
    rss_mb: dict[str, float] = field(default_factory=dict)
    preloaded_keys: int = 0
    leader: str = ""
    error: str | None = None
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    half_load: FreonResult | None = None
    durable: bool | None = None
    skipped: str | None = None
    failover: FailoverResult | None = None
    elections: int | None = None
    fso: FsoResults | None = None
    machine: MachineLoad | None = None          # the whole machine over the measured window
    phases_ms: dict[str, float] = field(default_factory=dict)  # server phases of a write
    stalls: Stalls | None = None                # gaps in the client's completions
    shards: int = 1                             # shard processes per node
    buckets_per_shard: list[int] = field(default_factory=list)  # the load's spread
    redirects: Redirects | None = None          # WRONG_SHARD answers to its clients


@dataclass(frozen=True)
class Redirects:
    """The WRONG_SHARD answers a flow's clients got, over all its phases: about one per
    client at S > 1 (each learns S once, then routes), none at S = 1."""

    clients: int
    redirects: int

    def __post_init__(self) -> None:
        assert self.clients >= 0
        assert self.redirects >= 0

    def as_dict(self) -> dict[str, Any]:
        per_client = self.redirects / self.clients if self.clients else None
        return {"clients": self.clients, "redirects": self.redirects,
                "per_client": per_client}


def ratio_name(numerator: str, denominator: str) -> str:
    """e.g. ``leader_over_leader_nobatch``."""
    return f"{numerator}_over_{denominator}".replace("-", "_")


def _latency(result: FreonResult) -> dict[str, float]:
    writes = result.write_latency.summary()
    return {"p50": writes.p50, "p99": writes.p99, "max": writes.max, "mean": writes.mean}


def _phase(result: FreonResult) -> dict[str, Any]:
    return {
        "generator": result.generator,
        "write_requests_per_s": result.write_requests_per_s,
        "operations_per_s": result.rate,
        "latency_ms": _latency(result),
        "operation_latency_ms": result.latency.summary().as_dict(),
        "ok_writes": result.ok_writes,
        "operations": result.operations,
        "failures": result.failures,
        "failure_statuses": dict(result.failure_statuses),
        "duration_s": result.duration_s,
        "threads": result.threads,
        "window_ns": [result.start_ns, result.end_ns],
    }


def flow_summary(flow: FlowMeasurement) -> dict[str, Any]:
    """The summary of one flow (see the module docstring)."""
    summary: dict[str, Any] = {"error": flow.error} if flow.error else {}
    if flow.skipped:
        return {"skipped": flow.skipped}
    summary["durable"] = flow.durable
    summary["shards"] = flow.shards
    if flow.buckets_per_shard:
        summary["buckets_per_shard"] = list(flow.buckets_per_shard)
    if flow.redirects is not None:
        summary["redirects"] = flow.redirects.as_dict()
    if flow.measure is not None:
        summary.update(_phase(flow.measure))
    sizes = flow.batch_sizes
    if sizes is None:       # no traces: the batch sizes are unknown, not 1
        summary["requests_per_batch"] = summary["batches"] = None
    else:
        summary["requests_per_batch"] = sum(sizes) / len(sizes) if sizes else 1.0
        summary["batches"] = len(sizes)
    summary["om_rss_mb"] = sum(flow.rss_mb.values()) if flow.rss_mb else None
    summary["om_rss_mb_by_process"] = dict(flow.rss_mb)
    summary["cpu_percent"] = {label: use["cpu"] for label, use in flow.cpu.items()}
    summary["loop_demand_percent"] = {label: use["loop_demand"]
                                      for label, use in flow.cpu.items()}
    summary["thread_demand_percent"] = {label: use["thread_demand"]
                                        for label, use in flow.cpu.items()}
    summary.update(_per_write(flow))
    summary["machine_load"] = None if flow.machine is None else flow.machine.as_dict()
    if flow.measure is not None:
        summary["bound"] = classify(bound_inputs(flow)).as_dict()
    summary["preloaded_keys"] = flow.preloaded_keys
    summary["elections_during_load"] = flow.elections
    summary["leader"] = flow.leader
    if flow.mixed is not None:
        summary["mixed"] = _phase(flow.mixed)
    if flow.half_load is not None:
        summary["half_load"] = _half_load(flow.half_load)
    if flow.failover is not None:
        summary["failover"] = flow.failover.summary()
    if flow.fso is not None:
        summary["fso"] = fso_summary(flow.measure, flow.fso, _phase,
                                     None if flow.leader == IN_PROCESS else flow.leader,
                                     summary.get("cpu_us_per_write", {}).get(LEADER_SERVER))
    return summary


def bound_inputs(flow: FlowMeasurement) -> BoundInputs:
    """What ``bench.bound.classify`` reads, from one measured flow."""
    assert flow.measure is not None
    mean = flow.measure.write_latency.summary().mean if flow.measure.ok_writes else None
    return BoundInputs(flow.machine, busiest(flow.cpu), mean, dict(flow.phases_ms),
                       flow.stalls)


def _per_write(flow: FlowMeasurement) -> dict[str, Any]:
    """CPU µs per acknowledged write by role and, for a leader, where one leader would
    stop on more cores (``bench.roles``)."""
    measure = flow.measure
    if measure is None or not flow.cpu or flow.leader == IN_PROCESS:
        return {}   # in-process, node and load generator share one process
    cpu = {label: use["cpu"] for label, use in flow.cpu.items()}
    roles = per_role(cpu, flow.leader, measure.duration_s, measure.ok_writes)
    found: dict[str, Any] = {"cpu_us_per_write": roles}
    if roles and LEADER_SERVER in roles:
        found["projection"] = [asdict(p) for p in projections(roles, shards=flow.shards)]
        if flow.shards > 1:   # what more shards would buy, from this run's costs
            found["projection_target"] = asdict(project(roles, TARGET_CORES, TARGET_SHARDS))
    return found


def _half_load(result: FreonResult) -> dict[str, Any]:
    """The paced phase: its target and achieved rates and each request type's latency."""
    return {
        **_phase(result),
        "target_operations_per_s": result.target_rate,
        "op_latency_ms": {op: recorder.summary().as_dict()
                          for op, recorder in sorted(result.op_latency.items())},
    }


def ratios(flows: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Write-throughput ratios of ``RATIO_FLOWS``, the FSO flows', the sweep's and each
    S against S = 1 (``bench/shard_scaling.py``)."""
    found: dict[str, float | None] = {}
    for numerator, denominator in RATIO_FLOWS:
        top = flows.get(numerator, {}).get("write_requests_per_s")
        bottom = flows.get(denominator, {}).get("write_requests_per_s")
        found[ratio_name(numerator, denominator)] = (
            top / bottom if top is not None and bottom else None)
    found.update(fso_ratios(flows))
    found.update(sweep.ratios(flows))
    found.update(shard_scaling.ratios(flows))
    return found


def build_summary(measurements: list[FlowMeasurement], run: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``: ``run`` (profile, keys, ...), ``flows`` and ``ratios``."""
    flows = {m.name: flow_summary(m) for m in measurements}
    return {**run, "flows": flows, "ratios": ratios(flows), "warnings": warnings(flows)}


def warnings(flows: dict[str, dict[str, Any]]) -> list[str]:
    """'<flow>: <warning>' for every flow whose machine was busy with other work."""
    return [f"{name}: {flow['machine_load']['warning']}" for name, flow in flows.items()
            if (flow.get("machine_load") or {}).get("warning")]


def _number(value: Any, digits: int) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _cpu_columns(cpu: dict[str, float]) -> tuple[str, str]:
    """("95+31+28", "60"): each OM process's CPU, busiest first, and the bench process's."""
    oms = sorted((v for k, v in cpu.items() if k != CLIENT_PROCESS), reverse=True)
    return "+".join(f"{v:.0f}" for v in oms) or "-", _number(cpu.get(CLIENT_PROCESS), 0)


def _busiest(demand: dict[str, float]) -> str:
    """"om1 98%": the process whose busiest thread wanted a CPU the largest share of time."""
    if not demand:
        return "-"
    label = max(demand, key=lambda k: demand[k])
    return f"{label} {demand[label]:.0f}%"


def _half_load_commit_p99(flow: dict[str, Any]) -> float | None:
    commit = flow.get("half_load", {}).get("op_latency_ms", {}).get("CommitKey")
    return None if commit is None else float(commit["p99"])


def _outcome(flow: dict[str, Any]) -> str:
    if flow.get("error"):
        return "ERROR"
    if flow.get("skipped"):
        return "SKIPPED"
    return str(flow.get("failures", "-"))


def render_table(summary: dict[str, Any]) -> str:
    """A fixed-width table of the flows, then the ratios."""
    rows: list[tuple[str, ...]] = []
    for name, flow in summary["flows"].items():
        latency = flow.get("latency_ms", {})
        durable = flow.get("durable")
        rows.append((
            name, "-" if durable is None else ("yes" if durable else "NO"),
            _number(flow.get("write_requests_per_s"), 0),
            _number(latency.get("p50"), 2), _number(latency.get("p99"), 2),
            _number(latency.get("max"), 2), _number(flow.get("requests_per_batch"), 1),
            _number(_half_load_commit_p99(flow), 2), _number(flow.get("om_rss_mb"), 0),
            *_cpu_columns(flow.get("cpu_percent", {})),
            _busiest(flow.get("thread_demand_percent", {})),
            flow.get("bound", {}).get("label", "-"), _outcome(flow)))
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, c in enumerate(_TABLE_COLUMNS)]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w)
                       for i, (c, w) in enumerate(zip(_TABLE_COLUMNS, widths, strict=True)))]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w)
                        for i, (v, w) in enumerate(zip(row, widths, strict=True)))
              for row in rows]
    lines.append("")
    shown = _shown_ratios(summary)
    width = max((len(name) for name in shown), default=0)
    lines += [f"{name:<{width}} {_number(value, 2)}" + ("x" if value is not None else "")
              for name, value in shown.items()]
    fso_lines = render_fso(summary)
    if fso_lines:
        lines += ["", *fso_lines]
    sweep_lines = sweep.render(summary)
    if sweep_lines:
        lines += ["", *sweep_lines]
    scaling_lines = shard_scaling.render(summary)
    if scaling_lines:
        lines += ["", *scaling_lines]
    lines += ["", *render_roles(summary)]
    for name, flow in summary["flows"].items():
        found = flow.get("failover")
        if found and found["trials"]:
            lines.append(f"{'failover (' + name + ')':<28} median {found['median_s']:.3f} s, "
                         f"max {found['max_s']:.3f} s of write unavailability over "
                         f"{found['trials']} kill -9 trials")
    lines += render_bounds(summary)
    lines += [f"WARNING: {warning}" for warning in summary.get("warnings", [])]
    return "\n".join(lines)


def _shown_ratios(summary: dict[str, Any]) -> dict[str, float | None]:
    """The ratios worth a line: all but the missing ones whose numerator flow the run did
    not have (the sweep's and the scaling profile's runs have no flow called ``leader``)."""
    flows = {name.replace("-", "_") for name in summary["flows"]}

    def numerator(ratio: str) -> str:
        top, _, rest = ratio.partition("_over_")
        _, at, count = rest.rpartition("_at_")
        return sweep.point_name(top, int(count)) if at and count.isdigit() else top

    return {name: value for name, value in summary["ratios"].items()
            if value is not None or numerator(name) in flows}


def render_bounds(summary: dict[str, Any]) -> list[str]:
    """What bound each flow's measured run and why, then what would move each kind."""
    found = {name: flow["bound"] for name, flow in summary["flows"].items() if "bound" in flow}
    if not found:
        return []
    width = max(len(name) for name in found)
    lines = ["", "what bound each measured run (bench/bound.py):"]
    lines += [f"  {name:<{width}}  {bound['label']:<11}  {bound['reason']}"
              for name, bound in found.items()]
    lines += [f"  {label} would move with {MOVES[label]}." for label in LABELS]
    return lines


_ROLE_COLUMNS = ((LEADER_SERVER, ETCD_LEADER), (LEADER_SHARDS,), (LEADER_WORKERS,),
                 (LEADER_RAFT,),
                 (FOLLOWER_SERVER, ETCD_FOLLOWER), (FOLLOWER_RAFT,), (LOAD_GENERATOR,),
                 (LEADER_SIDE,), (ALL_SERVERS,))


def render_roles(summary: dict[str, Any]) -> list[str]:
    """CPU µs per acknowledged write by role, one row a flow; then, for the leader
    flow, where one leader would stop on more cores."""
    header = ("CPU us per write", "leader server", "leader shards 1..S-1", "leader workers",
              "leader Raft",
              "follower server (each)", "follower Raft (each)", "load generator",
              "leader side", "all servers")
    rows = []
    for name, flow in summary["flows"].items():
        roles = flow.get("cpu_us_per_write")
        if not roles:
            continue
        cells = [next((_number(roles[k], 0) for k in keys if k in roles), "-")
                 for keys in _ROLE_COLUMNS]
        rows.append((name, *cells))
    if not rows:
        return []
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w)
                       for i, (c, w) in enumerate(zip(header, widths, strict=True)))]
    lines += ["  ".join(v.rjust(w) if i else v.ljust(w)
                        for i, (v, w) in enumerate(zip(row, widths, strict=True)))
              for row in rows]
    return lines + _projection_lines(summary["flows"])


def _projection_lines(flows: dict[str, dict[str, Any]]) -> list[str]:
    """Where one leader would stop on more cores, from the leader flow's costs and from
    each scaling flow's first run's (at its S: what S buys, on paper)."""
    lines = []
    for name, flow in flows.items():
        scaling = shard_scaling.parse(name)
        if not flow.get("projection") or (name != "leader" and
                                          (scaling is None or scaling.run != 1)):
            continue
        lines.append("")
        lines.append(f"one leader at S = {flow.get('shards', 1)} on more cores (from the "
                     f"{name} flow's costs; bench/roles.py):")
        lines += [f"  {p['cores']:>3} cores: {p['writes_per_s']:>9,.0f} write req/s, bound by "
                  f"{p['bound_by']}" for p in flow["projection"]]
        target = flow.get("projection_target")
        if target:
            lines.append(f"  and at S = {target['shards']} on {target['cores']} cores, each "
                         f"shard costing what it did here: {target['writes_per_s']:,.0f} "
                         f"write req/s, bound by {target['bound_by']}")
    return lines
