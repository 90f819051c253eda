"""README's *Today's figures*, regenerated from a main job instead of copied by hand.

    python -m bench.figures docs SUMMARY.json [--soak RESULT.json] [--commit C] [--date D]
    python -m bench.figures docs --check

SUMMARY.json is what ``bash scripts/main.sh`` (``om bench --profile quick``) leaves in
``bench-out/quick-*/summary.json``; its ``manifest.json`` beside it gives the commit and
the date (``--commit``/``--date`` when it is missing). RESULT.json, optional, is an
``om chaos --out DIR`` run's ``result.json`` (the soak), summarized in one line.

The figures a README block states are first cut down to the facts it uses and written
to ``docs/figures/main-job.json`` (committed: the block's source, so a reader can check
it and a test can regenerate it); the block between ``<!-- figures:begin -->`` and
``<!-- figures:end -->`` is then rendered from that file alone. ``--check`` renders the
committed facts and exits 1 when README's block differs: a hand edit, or facts updated
without the README. Nothing else of the README is touched; text outside the markers
(what the figures mean, links) stays the author's.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from bench.figures.figure import Figure

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FACTS = ROOT / "docs" / "figures" / "main-job.json"
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
FLOW_LABELS = {"leader": "leader", "replicated": "replicated (old flow)",
               "leader-nobatch": "leader-nobatch", "ceiling": "ceiling (in-process)",
               "etcd": "etcd, 3 members"}
RATIO_LABELS = (("leader_over_etcd", "leader / etcd"),
                ("leader_over_replicated", "leader / replicated"),
                ("leader_over_ceiling", "leader / ceiling"),
                ("leader_over_leader_nobatch", "leader / leader-nobatch"))
ROLE_COLUMNS = (("leader server", "etcd leader"), ("leader Raft", None),
                ("follower server (each)", "etcd follower (each)"),
                ("follower Raft (each)", None), ("load generator", "load generator"),
                ("all servers", "all servers"))


def _bound(bound: dict[str, Any] | None) -> str:
    """What bound a flow, in a few words, from ``bench/bound.py``'s verdict."""
    if not bound:
        return "-"
    label, busiest = bound.get("label", ""), bound.get("busiest_thread") or {}
    if label == "CPU-bound" and str(bound.get("reason", "")).startswith("one thread"):
        return (f"CPU: {busiest.get('process', '?')}'s busiest thread, "
                f"{busiest.get('demand_percent', 0):.0f} % of the window")
    if label == "CPU-bound":
        return f"CPU: the machine {100 * bound.get('machine_busy_share', 0):.0f} % busy"
    stalls = bound.get("stalls") or {}
    if stalls.get("gaps"):
        return f"{label} (longest stall {stalls.get('longest_gap_ms', 0):.0f} ms)"
    return str(label)


def _flow_facts(flow: dict[str, Any]) -> dict[str, Any]:
    half = (flow.get("half_load") or {}).get("op_latency_ms") or {}
    projection = flow.get("projection") or []
    return {
        "durable": flow.get("durable"),
        "write_requests_per_s": flow.get("write_requests_per_s"),
        "p50_ms": (flow.get("latency_ms") or {}).get("p50"),
        "p99_ms": (flow.get("latency_ms") or {}).get("p99"),
        "requests_per_batch": flow.get("requests_per_batch"),
        "commit_key_p99_half_load_ms": (half.get("CommitKey") or {}).get("p99"),
        "bound": _bound(flow.get("bound")),
        "others_share": (flow.get("machine_load") or {}).get("others_share"),
        "cpu_us_per_write": flow.get("cpu_us_per_write"),
        "projection_writes_per_s": projection[0]["writes_per_s"] if projection else None,
        "failover": flow.get("failover"),
    }


def _soak_facts(result: dict[str, Any]) -> dict[str, Any]:
    ops = result.get("ops") or {}
    return {"execution": result.get("execution"), "duration_s": result.get("duration_s"),
            "faults_injected": result.get("faults_injected"), "ops_ok": ops.get("ok"),
            "violations": len(result.get("violations") or []),
            "verify": (result.get("verify") or {}).get("result")
            if isinstance(result.get("verify"), dict) else result.get("verify")}


def facts(summary: dict[str, Any], commit: str, date: str,
          soak: dict[str, Any] | None = None) -> dict[str, Any]:
    """The facts README's block states, cut from a summary (and a soak's result)."""
    profile = summary.get("profile") or {}
    failover = ((summary.get("flows") or {}).get("leader") or {}).get("failover") or {}
    out: dict[str, Any] = {
        "commit": commit, "date": date, "command": "bash scripts/main.sh",
        "profile": {k: profile.get(k) for k in ("name", "threads", "measure_s",
                                                 "half_load_s", "nodes")},
        "secure": summary.get("secure"),
        "flow_order": list((summary.get("flows") or {}).keys()),
        "flows": {name: _flow_facts(flow) for name, flow in (summary.get("flows") or {}).items()},
        "ratios": summary.get("ratios") or {},
        "failover": {k: failover.get(k) for k in ("trials", "median_s", "max_s")},
    }
    for flow in out["flows"].values():
        flow.pop("failover")
    if soak is not None:
        out["soak"] = _soak_facts(soak)
    return out


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if digits else f"{round(value):,}"


def _flow_row(name: str, flow: dict[str, Any]) -> str:
    batch = None if name == "etcd" else flow.get("requests_per_batch")  # etcd has no batches
    commit_p99 = flow.get("commit_key_p99_half_load_ms")
    cells = [FLOW_LABELS.get(name, name), "yes" if flow.get("durable") else "no",
             _num(flow.get("write_requests_per_s"), 0), _num(flow.get("p50_ms")),
             _num(flow.get("p99_ms")),
             "-" if batch is None else ("1" if round(batch, 1) == 1 else _num(batch)),
             "-" if commit_p99 is None else f"{commit_p99:.1f} ms", flow.get("bound", "-")]
    return "| " + " | ".join(cells) + " |"


def _roles_rows(flows: dict[str, Any], order: list[str]) -> list[str]:
    rows = []
    for name in order:
        cpu = flows[name].get("cpu_us_per_write")
        if not cpu:
            continue
        etcd = "etcd leader" in cpu
        cells = [name]
        for om_key, etcd_key in ROLE_COLUMNS:
            key = etcd_key if etcd else om_key
            cell = "" if key is None or key not in cpu else _num(cpu[key], 0)
            cells.append(cell + (" (leader)" if etcd and key == "etcd leader" else ""))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _wrap(text: str) -> list[str]:
    """Prose lines as the README wraps them (tables are not wrapped)."""
    return textwrap.wrap(text, width=88, break_on_hyphens=False, break_long_words=False)


def render(f: dict[str, Any]) -> str:
    """README's block (without its markers) from ``facts``' output."""
    p, flows, order = f["profile"], f["flows"], f["flow_order"]
    others = max((fl.get("others_share") or 0 for fl in flows.values()), default=0)
    lines = [
        *_wrap(f"Made by `{f['command']}` (`om bench --profile {p['name']}`, then the Spark"
               f" report) from a fresh clone at `{f['commit'][:7]}`, {f['date']}: two cores for"
               f" {p['nodes']} OM nodes (server + Raft process each) and the load generator,"
               f" other processes at most {100 * others:.0f} % of the machine during a flow;"
               f" {p['threads']} requests in flight, {p['measure_s']:.0f} s a flow, then"
               f" {p['half_load_s']:.0f} s at half the rate. OM"
               f" {'secure' if f['secure'] else 'plain'}, etcd plain."
               " Source: docs/figures/main-job.json."),
        "",
        "| flow | durable | write req/s | p50 ms | p99 ms | requests per batch"
        " | CommitKey p99 at half load | what bound it |",
        "|---|---|---|---|---|---|---|---|",
        *(_flow_row(name, flows[name]) for name in order),
        "",
    ]
    ratios = ", ".join(f"{label} {f['ratios'][key]:.2f}x" for key, label in RATIO_LABELS
                       if f["ratios"].get(key) is not None)
    fo = f["failover"]
    lines += _wrap(f"Ratios: {ratios}; failover median **{fo['median_s']:.3f} s**, max "
                   f"{fo['max_s']:.3f} s over {fo['trials']} `kill -9` trials.")
    roles = _roles_rows(flows, order)
    if roles:
        header = " | ".join(om for om, _ in ROLE_COLUMNS)
        lines += ["", "CPU per acknowledged write, by role (µs, from `/proc`; `bench/roles.py`):",
                  "", f"| flow | {header} |", "|---|---|---|---|---|---|---|", *roles]
    projection = (flows.get("leader") or {}).get("projection_writes_per_s")
    if projection:
        lines += ["", *_wrap(f"One leader would stop at ~{round(projection, -1):,.0f} write"
                             " req/s whatever the core count: its server process, one"
                             " thread, is the limit (`bench/roles.py`).")]
    soak = f.get("soak")
    if soak:
        lines += ["", *_wrap(f"The soak ({soak['execution']}): {soak['duration_s']:.0f} s,"
                             f" {soak['faults_injected']} faults, {soak['ops_ok']:,}"
                             f" acknowledged operations, {soak['violations']}"
                             f" violation{'' if soak['violations'] == 1 else 's'};"
                             f" verify {soak['verify']}.")]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with the block between the markers replaced (each marker exactly once)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"README must hold {BEGIN} ... {END} once, in that order")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def current_block(text: str) -> str:
    """What README holds between the markers now."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def _commit_and_date(summary_path: Path, args: argparse.Namespace) -> tuple[str, str]:
    manifest_path = summary_path.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    commit = args.commit or (manifest.get("git") or {}).get("revision")
    date = args.date or str(manifest.get("created_at", ""))[:10]
    if not commit or not date:
        raise SystemExit(f"no manifest.json beside {summary_path}: give --commit and --date")
    return commit, date


def run(args: argparse.Namespace) -> int:
    if args.check:
        expected = render(json.loads(args.facts.read_text()))
        if current_block(args.readme.read_text()) != expected:
            print(f"{args.readme}: the figures block differs from what {args.facts} renders; "
                  "run python -m bench.figures docs SUMMARY.json", file=sys.stderr)
            return 1
        return 0
    if args.summary is None:
        raise SystemExit("give SUMMARY.json, or --check")
    commit, date = _commit_and_date(args.summary, args)
    soak = json.loads(args.soak.read_text()) if args.soak else None
    cut = facts(json.loads(args.summary.read_text()), commit, date, soak)
    args.facts.parent.mkdir(parents=True, exist_ok=True)
    args.facts.write_text(json.dumps(cut, indent=2, sort_keys=True) + "\n")
    args.readme.write_text(replace_block(args.readme.read_text(), render(cut)))
    print(f"wrote {args.facts} and the figures block of {args.readme}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("summary", type=Path, nargs="?", metavar="SUMMARY.json")
    parser.add_argument("--soak", type=Path, metavar="RESULT.json",
                        help="an om chaos run's result.json, summarized in one line")
    parser.add_argument("--commit", help="the commit measured (else manifest.json's)")
    parser.add_argument("--date", help="the day measured, YYYY-MM-DD (else manifest.json's)")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--facts", type=Path, default=FACTS,
                        help="where the block's facts are kept "
                             "(default docs/figures/main-job.json)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when README's block differs from what --facts renders")


FIGURE = Figure(
    name="docs",
    summary="README's Today's figures from a main job's summary.json",
    description=__doc__ or "",
    add_arguments=add_arguments,
    run=run,
)
