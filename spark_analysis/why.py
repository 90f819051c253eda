"""The report's "why" section: what limits each flow, said in sentences computed from data.

Every sentence is a template filled with figures from `facts` and chosen by comparing
figures (which part is largest, whether the machine's CPU was saturated, which flow is
faster); nothing here states a conclusion the data did not select.
"""

from __future__ import annotations

from collections.abc import Sequence

from spark_analysis.facts import OUTSIDE, FlowFacts, Part, ProcessUse, Split, flow_facts
from spark_analysis.metrics import RATIO_FLOWS, ratio_name
from spark_analysis.report import Block, Paragraph, Section, Table
from spark_analysis.results import Results
from spark_analysis.schema import PHASES

WHY = "Why: what limits each flow"
LEADER = "leader"
OLD_FLOW = "replicated"
UNBATCHED = "leader-nobatch"

# A flow whose processes kept at least this fraction of the machine's cores busy is
# CPU-bound: a faster flow on this machine needs less CPU per write, not less waiting.
CPU_SATURATED = 0.85
# A thread running or waiting for a CPU at least this share of the window (in percent)
# always had work: its process cannot go faster without a CPU of its own.
THREAD_SATURATED = 90.0


def ms(value: float) -> str:
    """Milliseconds for prose: one decimal from 10 ms, two below."""
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def pct(fraction: float) -> str:
    """A fraction as a whole percentage."""
    return f"{100 * fraction:.0f}%"


def _part(part: Part) -> str:
    return f"{part.name} {ms(part.ms)} ms ({pct(part.share)})"


def _whole(found: Split) -> str:
    """What a mean split adds up to: the client's latency, or (without it) the server's time."""
    outside = any(part.name == OUTSIDE for part in found.parts)
    return "mean latency" if outside else "mean server time"


def latency_sentence(facts: FlowFacts) -> str:
    """Which part dominates the flow's mean latency and which phase its slowest 1 %."""
    if facts.mean_split is None:
        mean = "n/a" if facts.latency_ms_mean is None else f"{ms(facts.latency_ms_mean)} ms"
        return (f"{facts.label}: no successful server_request records, so its latency "
                f"(mean {mean}) cannot be split into phases.")
    parts = facts.mean_split.parts
    text = (f"{facts.label}: of its {_whole(facts.mean_split)} of "
            f"{ms(facts.mean_split.total_ms)} ms, "
            f"{_part(parts[0])} dominates")
    text += f", then {_part(parts[1])}." if len(parts) > 1 and parts[1].ms > 0 else "."
    if facts.tail_split is not None and facts.tail_threshold_ms is not None:
        tail = facts.tail_split
        text += (f" Its slowest 1% of server requests (server time at or above the p99, "
                 f"{ms(facts.tail_threshold_ms)} ms) spend {pct(tail.dominant.share)} of "
                 f"their {ms(tail.total_ms)} ms in {tail.dominant.name}.")
    return text


def batching_sentence(facts: FlowFacts) -> str:
    """How many requests the flow's replicated batches carried, and how often it sent one."""
    if facts.requests_per_batch is None:
        return "It wrote no server_batch records, so its batching is not traced."
    rate = "" if facts.batches_per_s is None else f", {facts.batches_per_s:,.0f} batches/s"
    return f"Its batches carried {facts.requests_per_batch:.1f} requests on average{rate}."


def resources_sentence(facts: FlowFacts) -> str:
    """The flow's CPU (total, share of the machine, per write), busiest thread and memory."""
    total, busiest = facts.cpu_percent_total, facts.busiest
    if total is None or busiest is None:
        return "summary.json records no CPU for it."
    text = f"Its processes used {total:.0f}% of a core in all"
    if facts.machine_busy is not None:
        text += f" ({pct(facts.machine_busy)} of the machine's {facts.cores} cores)"
    if facts.cpu_us_per_write is not None:
        text += f", {facts.cpu_us_per_write:,.0f} µs of CPU per write"
    text += (f"; its busiest thread, in {busiest.name}, was running or waiting for a CPU "
             f"{busiest.thread_demand_percent:.0f}% of the window")
    rss = facts.rss_mb_total
    return text + ("." if rss is None else f"; resident memory {rss:,.0f} MB in all.")


def bound_sentence(facts: FlowFacts) -> str | None:
    """What `om bench` found bound the flow's measured run, and why (None if unrecorded)."""
    if facts.bound is None:
        return None
    label, reason = facts.bound
    return f"om bench labelled its measured run {label}: {reason}."


def warning_paragraph(facts: FlowFacts) -> Paragraph | None:
    """`om bench`'s warning that other work shared the machine, when it gave one."""
    if facts.busy_warning is None:
        return None
    return Paragraph(f"WARNING: {facts.label}: {facts.busy_warning}.")


def flow_paragraph(facts: FlowFacts) -> Paragraph:
    """Everything the section says about one flow."""
    sentences = (latency_sentence(facts), batching_sentence(facts),
                 resources_sentence(facts), bound_sentence(facts))
    return Paragraph(" ".join(sentence for sentence in sentences if sentence))


def _largest_difference(top: Split, bottom: Split) -> tuple[str, float, float]:
    """The part whose mean differs most between two splits: (name, top ms, bottom ms)."""
    names = dict.fromkeys(part.name for part in (*top.parts, *bottom.parts))
    name = max(names, key=lambda name: abs(top.ms_of(name) - bottom.ms_of(name)))
    return name, top.ms_of(name), bottom.ms_of(name)


def _bound(facts: FlowFacts) -> str | None:
    """Why the flow cannot go faster when its CPU says so: machine or thread; else None."""
    busy, busiest = facts.machine_busy, facts.busiest
    if busy is not None and busy >= CPU_SATURATED:
        return (f"CPU-bound: its processes kept {pct(busy)} of the machine's {facts.cores} "
                "cores busy")
    demand = None if busiest is None else busiest.thread_demand_percent
    if busiest is not None and demand is not None and demand >= THREAD_SATURATED:
        return (f"bound by one thread: the busiest thread of {busiest.name} was running or "
                f"waiting for a CPU {demand:.0f}% of the window")
    return None


def _cpu_per_write(top: FlowFacts, bottom: FlowFacts) -> str:
    """', at A µs of CPU per write against B µs for <bottom>', or '' when unknown."""
    if top.cpu_us_per_write is None or bottom.cpu_us_per_write is None:
        return ""
    return (f", at {top.cpu_us_per_write:,.0f} µs of CPU per write against "
            f"{bottom.cpu_us_per_write:,.0f} µs for {bottom.flow}")


def _spare_cpu(facts: FlowFacts) -> str:
    """' (its processes used N% of the machine's C cores, busiest thread P at D%)'."""
    busiest = facts.busiest
    if facts.machine_busy is None or busiest is None:
        return ""
    return (f" (its processes used {pct(facts.machine_busy)} of the machine's {facts.cores} "
            f"cores, busiest thread {busiest.name} at {busiest.thread_demand_percent:.0f}%)")


def _latency_limit(top: FlowFacts, bottom: FlowFacts) -> str:
    """The latency-bound explanation: the mean latencies and where they differ most."""
    in_flight = "" if top.in_flight is None else f" with {top.in_flight} requests in flight"
    text = f"latency-bound{_spare_cpu(top)}, so{in_flight} throughput follows mean latency"
    if top.latency_ms_mean is not None and bottom.latency_ms_mean is not None:
        text += f", {ms(top.latency_ms_mean)} ms against {ms(bottom.latency_ms_mean)} ms"
    if top.mean_split is not None and bottom.mean_split is not None:
        name, mine, theirs = _largest_difference(top.mean_split, bottom.mean_split)
        return (text + f", and the largest difference is {name}, {ms(mine)} ms against "
                f"{ms(theirs)} ms")
    if top.mean_split is not None:
        return (text + f"; {top.flow}'s largest part is {_part(top.mean_split.dominant)}, and "
                f"{bottom.flow} traces no server phases to compare")
    return text


def ratio_sentence(name: str, ratio: float, top: FlowFacts, bottom: FlowFacts) -> str:
    """One sentence on a write-throughput ratio `top / bottom`: what limits it.

    The limit is the numerator's: its CPU when the machine or one thread was saturated
    (with the CPU each flow spends per write), else its latency against the denominator's.
    Flows are named without their run; `ratio_blocks` names the run when there are several.
    """
    head = (f"{name} = {ratio:.2f} ({top.flow} {top.write_rps or 0:,.0f} writes/s, "
            f"{bottom.flow} {bottom.write_rps or 0:,.0f}): {top.flow} is ")
    bound = _bound(top)
    if bound is not None:
        return head + bound + _cpu_per_write(top, bottom) + "."
    return head + _latency_limit(top, bottom) + "."


def compare_sentence(top: FlowFacts, bottom: FlowFacts) -> str | None:
    """How `top`'s phases differ from `bottom`'s: its largest saving and largest added cost."""
    if top.mean_split is None or bottom.mean_split is None:
        return None
    names = [name for _, name in PHASES] + [OUTSIDE]
    change = {name: top.mean_split.ms_of(name) - bottom.mean_split.ms_of(name) for name in names}
    text = (f"Against {bottom.label}, {top.label}'s {_whole(top.mean_split)} is "
            f"{ms(top.mean_split.total_ms)} ms instead of {ms(bottom.mean_split.total_ms)} ms")
    saving = min(names, key=lambda name: change[name])
    cost = max(names, key=lambda name: change[name])
    if change[saving] < 0:
        text += (f"; its largest saving is {saving}, {ms(top.mean_split.ms_of(saving))} ms "
                 f"instead of {ms(bottom.mean_split.ms_of(saving))} ms")
    if change[cost] > 0:
        text += (f"; its largest added cost is {cost}, {ms(top.mean_split.ms_of(cost))} ms "
                 f"instead of {ms(bottom.mean_split.ms_of(cost))} ms")
    return text + "."


def compare_table(top: FlowFacts, bottom: FlowFacts) -> Table | None:
    """Each part's mean in two flows and their difference, in request order."""
    if top.mean_split is None or bottom.mean_split is None:
        return None
    names = [name for _, name in PHASES] + [OUTSIDE]
    rows = [
        (name, ms(top.mean_split.ms_of(name)), ms(bottom.mean_split.ms_of(name)),
         ms(top.mean_split.ms_of(name) - bottom.mean_split.ms_of(name)))
        for name in names
    ]
    rows.append(("total", ms(top.mean_split.total_ms), ms(bottom.mean_split.total_ms),
                 ms(top.mean_split.total_ms - bottom.mean_split.total_ms)))
    return Table(("part of the mean latency", f"{top.label} (ms)", f"{bottom.label} (ms)",
                  "difference (ms)"), tuple(rows))


def batching_bought(batched: FlowFacts, unbatched: FlowFacts) -> str | None:
    """What batching changed: requests per entry, entry rate, throughput, p99, CPU/write."""
    if not batched.write_rps or not unbatched.write_rps or batched.requests_per_batch is None:
        return None
    gain = batched.write_rps / unbatched.write_rps
    text = (f"Batching carried {batched.requests_per_batch:.1f} requests per replicated "
            f"batch against {unbatched.requests_per_batch or 1.0:.1f} in {unbatched.label}")
    if batched.batches_per_s is not None and unbatched.batches_per_s is not None:
        text += (f" ({batched.batches_per_s:,.0f} batches/s instead of "
                 f"{unbatched.batches_per_s:,.0f})")
    text += f", and {'raised' if gain >= 1 else 'lowered'} write throughput {gain:.2f}x"
    if batched.write_latency_ms_p99 is not None and unbatched.write_latency_ms_p99 is not None:
        text += (f", with write p99 {ms(batched.write_latency_ms_p99)} ms instead of "
                 f"{ms(unbatched.write_latency_ms_p99)} ms")
    if batched.cpu_us_per_write is not None and unbatched.cpu_us_per_write is not None:
        text += (f" and {batched.cpu_us_per_write:,.0f} µs of CPU per write instead of "
                 f"{unbatched.cpu_us_per_write:,.0f}")
    return text + "."


def _process_rows(facts: Sequence[FlowFacts]) -> tuple[tuple[str, ...], ...]:
    """One row per recorded process of each flow: CPU, busiest thread, RSS."""
    def cell(value: float | None) -> str:
        return "n/a" if value is None else f"{value:,.0f}"

    def row(flow: FlowFacts, use: ProcessUse) -> tuple[str, ...]:
        return (flow.label, use.name, cell(use.cpu_percent),
                cell(use.thread_demand_percent), cell(use.rss_mb))

    return tuple(row(flow, use) for flow in facts for use in flow.processes)


def _split_rows(facts: Sequence[FlowFacts]) -> tuple[tuple[str, ...], ...]:
    """One row per flow: its mean latency and p99 server time and their largest parts."""
    def dominant(found: Split | None) -> tuple[str, str]:
        return ("n/a", "n/a") if found is None else (found.dominant.name,
                                                     pct(found.dominant.share))

    return tuple(
        (flow.label,
         "n/a" if flow.latency_ms_mean is None else ms(flow.latency_ms_mean),
         *dominant(flow.mean_split),
         "n/a" if flow.tail_threshold_ms is None else ms(flow.tail_threshold_ms),
         *dominant(flow.tail_split))
        for flow in facts
    )


def _find(facts: Sequence[FlowFacts], run: str, flow: str) -> FlowFacts | None:
    return next((found for found in facts if (found.run, found.flow) == (run, flow)), None)


def ratio_blocks(results: Results, facts: Sequence[FlowFacts]) -> list[Block]:
    """One paragraph per headline ratio of every run that has both its flows."""
    blocks: list[Block] = []
    for row in results.throughput_ratios:
        for numerator, denominator in RATIO_FLOWS:
            value = row.get(ratio_name(numerator, denominator))
            top = _find(facts, row["run"], numerator)
            bottom = _find(facts, row["run"], denominator)
            if value is not None and top is not None and bottom is not None:
                name = ratio_name(numerator, denominator)
                run = f"{row['run']}: " if results.several_runs else ""
                blocks.append(Paragraph(run + ratio_sentence(name, value, top, bottom)))
    return blocks


def _pair_blocks(facts: Sequence[FlowFacts]) -> list[Block]:
    """The leader against the old flow, and what batching bought, for every run."""
    blocks: list[Block] = []
    for run in sorted({found.run for found in facts}):
        leader, old = _find(facts, run, LEADER), _find(facts, run, OLD_FLOW)
        if leader is not None and old is not None:
            sentence, table = compare_sentence(leader, old), compare_table(leader, old)
            blocks += [Paragraph(sentence)] if sentence else []
            blocks += [table] if table else []
        unbatched = _find(facts, run, UNBATCHED)
        bought = None if leader is None or unbatched is None else batching_bought(leader, unbatched)
        blocks += [Paragraph(bought)] if bought else []
    return blocks


def why_section(results: Results) -> Section:
    """The "why" section: headline ratios, then each flow, then flow pairs, then processes."""
    facts = flow_facts(results)
    if not facts:
        return Section(WHY, (Paragraph("No client or server records, so nothing to explain."),))
    intro = Paragraph(
        "Each sentence below is a template filled with this run's figures (the tables of this "
        "report and om bench's summary.json) and chosen by comparing them. "
        f"A flow counts as CPU-bound when its processes kept {pct(CPU_SATURATED)} or more of "
        f"the machine's cores busy, or one thread ran or waited for a CPU {THREAD_SATURATED:.0f}% "
        "or more of the window; otherwise, with a fixed number of requests in flight, its "
        f"throughput follows its mean latency. '{OUTSIDE}' is the client's mean latency "
        "minus the server's phases: the client, the sockets and the server's queue. CPU is "
        "over the measured window, memory at its end."
    )
    splits = Table(("flow", "mean latency (ms)", "largest part of the mean", "share",
                    "server p99 (ms)", "largest phase of the slowest 1%", "share"),
                   _split_rows(facts))
    processes = Table(("flow", "process", "CPU (% of a core)", "busiest thread (% of window)",
                       "RSS (MB; a node's server and Raft process together)"),
                      _process_rows(facts))
    role_rows = tuple((flow.label, name, f"{value:,.0f}") for flow in facts
                      for name, value in flow.roles)
    roles = (Table(("flow", "role", "CPU µs per acknowledged write"), role_rows),) \
        if role_rows else ()
    warnings = [found for found in map(warning_paragraph, facts) if found is not None]
    return Section(WHY, (*warnings, intro, *ratio_blocks(results, facts), splits,
                         *(flow_paragraph(found) for found in facts), *_pair_blocks(facts),
                         processes, *roles))
