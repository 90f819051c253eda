"""``om bench --profile scaling``: the leader at S = 1, 2 and 4 shards, each S against S = 1.

A scaling flow is named ``<family>-s<S>`` (``leader-s2``: three nodes, two shards per
node; ``leader-1node-s2``: one node), runs on a fresh cluster started with ``shards =
S``, and spreads its load over the profile's ``buckets`` buckets (each bucket is one
shard's: ``om.protocol.shard_routing.shard_of``), as does its preload, generated per
shard (``preload.generate_shards``). Its clients are given the nodes' addresses and
route by themselves; the flow reports their WRONG_SHARD answers per client
(``redirects``: about one each at S > 1, none at S = 1).

**Runs.** With the profile's ``runs`` > 1 each flow runs that many times, a run named
``<flow>#<run>`` (``leader-s2#2``), each on a fresh cluster, in rounds: run 1 of every
flow, then run 2, so a drift of the shared machine's speed moves every S alike. Each S
is reported by the median of its runs' write rates, and against S = 1 of its family by
the ratio of the medians (``<family>_s<S>_over_<family>_s1``), beside each run's own
rate and bound (``bench/bound.py``, per run as for any flow), the redirects per client,
and how evenly the buckets spread over the shards (``buckets_per_shard``: the busiest
shard's share against an even one bounds what S can buy).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Any

from om.protocol.shard_routing import shard_of

RUN_SEPARATOR = "#"
RUNS_MAX = 20
_FLOW = re.compile(r"^(?P<family>.+)-s(?P<shards>[1-9][0-9]*)$")


def run_name(flow: str, run: int) -> str:
    """``leader-s2#2``: run ``run`` (from 1) of ``flow``."""
    assert RUN_SEPARATOR not in flow
    assert 1 <= run <= RUNS_MAX
    return f"{flow}{RUN_SEPARATOR}{run}"


@dataclass(frozen=True)
class ScalingFlow:
    """What a flow's name says: its family, its S, and which run it is."""

    family: str
    shards: int
    run: int


def parse(name: str) -> ScalingFlow | None:
    """The family, S and run of a scaling flow's name; None for any other flow."""
    flow, separator, run = name.partition(RUN_SEPARATOR)
    if separator and not run.isdigit():
        return None
    found = _FLOW.match(flow)
    if found is None:
        return None
    return ScalingFlow(found["family"], int(found["shards"]), int(run) if separator else 1)


def buckets_per_shard(volume: str, buckets: tuple[str, ...], shards: int) -> list[int]:
    """How many of ``buckets`` each shard owns: the load's spread, since the load writes
    every bucket alike. The rule is a hash (``shard_of``), so a few buckets spread
    unevenly: ``bucket1-0`` .. ``bucket1-15`` put 10 on one shard of two and 6 on the
    other (the busiest shard then carries 1.25x its share); 64 put 32 and 32, and 16
    on each of four."""
    assert shards >= 1
    owned = [0] * shards
    for bucket in buckets:
        owned[shard_of(volume, bucket, shards)] += 1
    return owned


def busiest_share(owned: list[int]) -> float:
    """The busiest shard's share of the load against an even one (1.0: even)."""
    assert owned
    assert sum(owned) > 0
    return max(owned) * len(owned) / sum(owned)


def flow_name(family: str, shards: int) -> str:
    """``leader-s2``."""
    assert shards >= 1
    return f"{family}-s{shards}"


def ratio_name(family: str, shards: int) -> str:
    """``leader_s2_over_leader_s1``: S against S = 1 of its family."""
    return f"{flow_name(family, shards)}_over_{flow_name(family, 1)}".replace("-", "_")


def _by_shards(flows: dict[str, dict[str, Any]]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """{family: {S: its runs' summaries, in run order}} of the scaling flows."""
    found: dict[str, dict[int, list[tuple[int, dict[str, Any]]]]] = {}
    for name, summary in flows.items():
        parsed = parse(name)
        if parsed is not None:
            found.setdefault(parsed.family, {}).setdefault(parsed.shards, []).append(
                (parsed.run, summary))
    return {family: {s: [summary for _, summary in sorted(runs, key=lambda r: r[0])]
                     for s, runs in by_s.items()} for family, by_s in found.items()}


def median_rate(runs: list[dict[str, Any]]) -> float | None:
    """The median write rate of the runs that measured one (None: none did)."""
    rates = [run["write_requests_per_s"] for run in runs
             if run.get("write_requests_per_s") is not None]
    return statistics.median(rates) if rates else None


def ratios(flows: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Each S > 1 against S = 1 of its family: the ratio of their median write rates
    (None where either has no measured run or S = 1 did not run)."""
    found: dict[str, float | None] = {}
    for family, by_s in _by_shards(flows).items():
        base = median_rate(by_s.get(1, []))
        for shards in sorted(s for s in by_s if s > 1):
            top = median_rate(by_s[shards])
            found[ratio_name(family, shards)] = top / base if top is not None and base else None
    return found


def _redirects(runs: list[dict[str, Any]]) -> str:
    """'1.00 (16/16)': WRONG_SHARD answers per client over the runs, or '-'."""
    counted = [run["redirects"] for run in runs if run.get("redirects")]
    clients = sum(found["clients"] for found in counted)
    if not clients:
        return "-"
    redirects = sum(found["redirects"] for found in counted)
    return f"{redirects / clients:.2f} ({redirects}/{clients})"


def _runs(runs: list[dict[str, Any]]) -> str:
    """'4,106 CPU-bound, 3,980 cycle-bound': each run's rate and bound, in run order."""
    cells = []
    for run in runs:
        rate = run.get("write_requests_per_s")
        cells.append("ERROR" if rate is None else
                     f"{rate:,.0f} {run.get('bound', {}).get('label', '-')}")
    return ", ".join(cells)


def render(summary: dict[str, Any]) -> list[str]:
    """A row per family and S: the median write rate, the ratio to S = 1, redirects per
    client, and each run."""
    by_family = _by_shards(summary["flows"])
    if not by_family:
        return []
    header = ("shards (median of runs)", "write req/s", "over S = 1", "redirects/client",
              "busiest shard", "runs (write req/s, bound)")
    found = ratios(summary["flows"])
    rows = []
    for family in sorted(by_family):
        for shards in sorted(by_family[family]):
            runs = by_family[family][shards]
            median = median_rate(runs)
            ratio = 1.0 if shards == 1 and median else found.get(ratio_name(family, shards))
            owned = runs[0].get("buckets_per_shard")
            rows.append((flow_name(family, shards),
                         "-" if median is None else f"{median:,.0f}",
                         "-" if ratio is None else f"{ratio:.2f}x",
                         _redirects(runs),
                         f"{busiest_share(owned):.2f}x" if owned else "-", _runs(runs)))
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) if 0 < i < len(header) - 1 else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in (header, *rows)]
