"""``om bench --profile sweep``: the leader, replicated and etcd flows at 16, 64 and 256
requests in flight, each point labelled with what bound it.

A point, one flow at one in-flight count, is a flow of its own named
``<flow>@<in flight>`` (``leader@64``; ``driver.sweep_points`` makes them), run as any
other flow is: a fresh cluster, warm-up, the measured window, and the fixed-rate
half-load phase at half the point's own rate (the latency Ozone users size clusters
by). Its summary, traces and label are its own.

**A fresh cluster per point**, not one cluster per flow taking the counts in turn:
each point then starts from the same state, with an empty Raft log, an empty
database, an empty retry cache (its rows live 10 minutes, so a cluster reused for the
next count would carry the last count's ~100k rows), no compaction debt and no
election history, so the difference between two points is the in-flight count and
nothing the earlier points left behind. A start costs a few seconds per point, ~1
minute over the 9 points, against ~5 minutes of load.

**Ordered by in-flight count, then flow** (16: leader, replicated, etcd; then 64;
then 256): the points a ratio compares run next to each other, so a drift of the
machine's speed over the run (docs/PERFORMANCE.md: 2,300 to 5,000 write req/s within
an hour) moves both sides of a ratio alike.

``ratios`` adds ``<flow>_over_<flow>_at_<n>`` for each pair of ``RATIO_FLOWS`` at each
count; ``render`` prints the sweep as one table, a row per flow and a column per count.
"""

from __future__ import annotations

from typing import Any

SEPARATOR = "@"
IN_FLIGHT = (16, 64, 256)
FLOWS = ("leader", "replicated", "etcd")
RATIO_FLOWS: tuple[tuple[str, str], ...] = (("leader", "replicated"), ("leader", "etcd"))


def point_name(flow: str, in_flight: int) -> str:
    """``leader@64``."""
    assert SEPARATOR not in flow
    assert in_flight > 0
    return f"{flow}{SEPARATOR}{in_flight}"


def split_name(name: str) -> tuple[str, int] | None:
    """(flow, in flight) of a point's name, None for a flow that is no sweep point."""
    flow, separator, count = name.partition(SEPARATOR)
    if not separator or not count.isdigit():
        return None
    return flow, int(count)


def _points(flows: dict[str, dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """{flow: {in flight: its summary}} of the sweep points among ``flows``."""
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for name, summary in flows.items():
        point = split_name(name)
        if point is not None:
            found.setdefault(point[0], {})[point[1]] = summary
    return found


def ratios(flows: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """Write-throughput ratios of ``RATIO_FLOWS`` at each in-flight count that ran."""
    points = _points(flows)
    counts = sorted({count for by_count in points.values() for count in by_count})
    found: dict[str, float | None] = {}
    for top, bottom in RATIO_FLOWS:
        if top not in points or bottom not in points:
            continue
        for count in counts:
            numerator = points[top].get(count, {}).get("write_requests_per_s")
            denominator = points[bottom].get(count, {}).get("write_requests_per_s")
            found[f"{top}_over_{bottom}_at_{count}"] = (
                numerator / denominator if numerator is not None and denominator else None)
    return found


def _cell(summary: dict[str, Any]) -> str:
    """'4,106 (CPU-bound)', or why there is no figure."""
    if summary.get("skipped"):
        return "skipped"
    rate = summary.get("write_requests_per_s")
    if rate is None:
        return "ERROR"
    return f"{rate:,.0f} ({summary.get('bound', {}).get('label', '-')})"


def render(summary: dict[str, Any]) -> list[str]:
    """The sweep's write req/s and labels, a row per flow and a column per count."""
    points = _points(summary["flows"])
    if not points:
        return []
    counts = sorted({count for by_count in points.values() for count in by_count})
    header = ("write req/s (bound) at", *(f"{count} in flight" for count in counts))
    order = sorted(points, key=lambda flow: (FLOWS.index(flow) if flow in FLOWS
                                              else len(FLOWS), flow))
    rows = [(flow, *(_cell(points[flow][count]) if count in points[flow] else "-"
                     for count in counts)) for flow in order]
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
            for row in (header, *rows)]
