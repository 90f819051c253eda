"""What bound a flow's measured run: the CPU, the cycle, or stalls.

The inputs, all over the measured window:

* the machine's busy share: every process's CPU (the bench's and any other's) and the
  hypervisor's steal, over all cores (``bench.machine_load``);
* the busiest thread of the bench's processes: the share of the window it was running
  or runnable but waiting for a CPU (its *demand*), and the share it ran
  (``bench.machine.CpuMeter``, from schedstat);
* the mean latency of a successful write at the client and, from the server traces,
  the mean of each phase of one (lock wait, execute, batch wait, replicate, apply,
  reply: docs/TRACES.md); what the phases leave of the client's mean is *outside the
  server* (the client, the sockets, the front workers' queue);
* the client's completions: a *stall* is a gap between two consecutive completions of
  at least ``max(STALL_GAP_MS_MIN, STALL_GAP_P50S * p50 write latency)``. Requests that
  go through a cycle (a batch sealed, replicated, applied) complete in bursts one cycle
  apart, and a cycle is shorter than the p50 latency: a gap of five p50s is no cycle,
  nothing moved.

The rules, in order; the first that holds labels the run:

1. **CPU-bound** when the machine was busy at least ``CPU_BUSY_SHARE_MIN`` (85 %) of the
   window, or the busiest thread's demand was at least ``THREAD_DEMAND_MIN`` (90 %):
   every core, or the one core a thread can use, had no time to spare. (These are the
   Spark report's thresholds, ``spark_analysis/why.py``.)
2. **stall-bound** when stalls add up to at least ``STALLED_SHARE_MIN`` (10 %) of the
   window: the CPUs had time to spare and still nothing completed.
3. **cycle-bound** otherwise: the CPUs had time to spare and requests kept completing,
   so with a fixed number in flight the rate is in-flight / latency, and the latency is
   the cycle each request waits through. The evidence names its parts: batch wait +
   replicate + apply is the batch in flight (etcd traces no server phases: its cycle is
   its Raft round trip and sync).

``MOVES`` says in one line what would move each kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

from bench.machine_load import MachineLoad

CPU_BOUND = "CPU-bound"
CYCLE_BOUND = "cycle-bound"
STALL_BOUND = "stall-bound"
LABELS = (CPU_BOUND, CYCLE_BOUND, STALL_BOUND)

CPU_BUSY_SHARE_MIN = 0.85
THREAD_DEMAND_MIN = 90.0     # percent of the window
STALL_GAP_MS_MIN = 50.0
STALL_GAP_P50S = 5.0
STALLED_SHARE_MIN = 0.10
OUTSIDE = "outside the server"
# The phases a request spends on the batch in flight: waiting for it, its Raft round
# trip, applying it.
CYCLE_PHASES = ("batch wait", "replicate", "apply")

MOVES: dict[str, str] = {
    CPU_BOUND: "less CPU per write (on that thread, when one thread binds it) or more "
               "cores; more requests in flight will not",
    CYCLE_BOUND: "a shorter cycle or more of it at once: more batches in flight, "
                 "pipelined appends, a faster sync or round trip, or more requests in "
                 "flight; saving CPU will not",
    STALL_BOUND: "removing the stall: see what the gaps line up with in the traces (a "
                 "sync or compaction stall, a GC pause, an election, a full queue); "
                 "neither CPU nor the cycle moves it first",
}


@dataclass(frozen=True)
class Busiest:
    """The bench's busiest thread: its process's label, its demand and run shares (%)."""

    process: str
    demand_percent: float
    run_percent: float


@dataclass(frozen=True)
class Stalls:
    """Gaps in the client's completions of at least ``gap_ms_min``: how many, their
    share of the window, and the longest gap of all (stall or not)."""

    gap_ms_min: float
    gaps: int
    stalled_share: float
    longest_gap_ms: float


@dataclass(frozen=True)
class BoundInputs:
    """Everything the rules read (the module docstring); None where it was not measured."""

    machine: MachineLoad | None
    busiest: Busiest | None
    write_latency_ms_mean: float | None
    phases_ms: dict[str, float] = field(default_factory=dict)   # server phases, by name
    stalls: Stalls | None = None

    def latency_split_ms(self) -> dict[str, float]:
        """The client's mean write latency in server phases and ``OUTSIDE`` (empty
        without server phases or a client mean)."""
        if not self.phases_ms or self.write_latency_ms_mean is None:
            return {}
        outside = max(self.write_latency_ms_mean - sum(self.phases_ms.values()), 0.0)
        return {**self.phases_ms, OUTSIDE: outside}

    def cycle_share(self) -> float | None:
        """The share of the client's mean write latency spent on the batch in flight."""
        if not self.phases_ms or not self.write_latency_ms_mean:
            return None
        cycle = sum(self.phases_ms.get(name, 0.0) for name in CYCLE_PHASES)
        return min(cycle / self.write_latency_ms_mean, 1.0)


@dataclass(frozen=True)
class Bound:
    """A run's label, the sentence that says why, and what it was read from."""

    label: str
    reason: str
    inputs: BoundInputs

    def __post_init__(self) -> None:
        assert self.label in LABELS, self.label
        assert self.reason

    def as_dict(self) -> dict[str, Any]:
        """The JSON form recorded in summary.json (shares as fractions, times in ms)."""
        found = self.inputs
        return {"label": self.label, "reason": self.reason, "moves_it": MOVES[self.label],
                "machine_busy_share": None if found.machine is None
                else found.machine.busy_share,
                "busiest_thread": None if found.busiest is None else asdict(found.busiest),
                "write_latency_ms_mean": found.write_latency_ms_mean,
                "latency_split_ms": found.latency_split_ms(),
                "cycle_share": found.cycle_share(),
                "stalls": None if found.stalls is None else asdict(found.stalls)}


def stalls(completions_ns: Sequence[int], write_p50_ms: float, window_s: float) -> Stalls | None:
    """The stalls among sorted completion times (None with fewer than two, or no window)."""
    if len(completions_ns) < 2 or window_s <= 0:
        return None
    assert write_p50_ms >= 0.0
    gap_ms_min = max(STALL_GAP_MS_MIN, STALL_GAP_P50S * write_p50_ms)
    gaps_ns = [later - earlier for earlier, later in pairwise(completions_ns)]
    assert min(gaps_ns) >= 0, "completion times must be sorted"
    long_ns = [gap for gap in gaps_ns if gap >= gap_ms_min * 1e6]
    return Stalls(gap_ms_min, len(long_ns), min(sum(long_ns) / 1e9 / window_s, 1.0),
                  max(gaps_ns) / 1e6)


def busiest(cpu: dict[str, dict[str, float]]) -> Busiest | None:
    """The process whose busiest thread had the highest demand, from ``CpuMeter``'s use."""
    if not cpu:
        return None
    label = max(cpu, key=lambda name: cpu[name]["thread_demand"])
    use = cpu[label]
    return Busiest(label, use["thread_demand"], use.get("thread_run", 0.0))


def classify(inputs: BoundInputs) -> Bound:
    """The first rule of the module docstring that holds, with its reason."""
    machine, thread = inputs.machine, inputs.busiest
    if machine is not None and machine.busy_share >= CPU_BUSY_SHARE_MIN:
        busiest_too = "" if thread is None else f"; {_thread(thread)}"
        return Bound(CPU_BOUND, f"the machine's {machine.cores} cores were "
                     f"{_pct(machine.busy_share)} busy ({_who(machine)}){busiest_too}",
                     inputs)
    if thread is not None and thread.demand_percent >= THREAD_DEMAND_MIN:
        return Bound(CPU_BOUND, f"one thread: {_thread(thread)}", inputs)
    found = inputs.stalls
    if found is not None and found.stalled_share >= STALLED_SHARE_MIN:
        return Bound(STALL_BOUND, f"nothing completed for {_pct(found.stalled_share)} of the "
                     f"window, in {found.gaps} gaps of {found.gap_ms_min:.0f} ms or more "
                     f"(longest {found.longest_gap_ms:.0f} ms), {_spare(inputs)}", inputs)
    stalled = "stalls not measured" if found is None else (
        f"{_pct(found.stalled_share)} of the window stalled (longest gap "
        f"{found.longest_gap_ms:.0f} ms)")
    return Bound(CYCLE_BOUND, f"{_spare(inputs)}, {stalled}; {_cycle(inputs)}", inputs)


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _who(machine: MachineLoad) -> str:
    return f"the bench's processes {_pct(machine.own_share)}, others {_pct(machine.others_share)}"


def _thread(thread: Busiest) -> str:
    return (f"{thread.process}'s busiest thread ran or waited for a CPU "
            f"{thread.demand_percent:.0f}% of the window (ran {thread.run_percent:.0f}%)")


def _spare(inputs: BoundInputs) -> str:
    """'the machine 60% busy, om1's busiest thread at 70% (ran 55%)': the CPUs' slack."""
    parts = []
    if inputs.machine is not None:
        parts.append(f"the machine {_pct(inputs.machine.busy_share)} busy")
    if inputs.busiest is not None:
        parts.append(f"{inputs.busiest.process}'s busiest thread at "
                     f"{inputs.busiest.demand_percent:.0f}% (ran "
                     f"{inputs.busiest.run_percent:.0f}%)")
    return ", ".join(parts) or "no CPU figures"


def _cycle(inputs: BoundInputs) -> str:
    """Where the mean write's time went: the batch in flight and the largest part."""
    split, share = inputs.latency_split_ms(), inputs.cycle_share()
    if not split or share is None or inputs.write_latency_ms_mean is None:
        mean = inputs.write_latency_ms_mean
        return ("no server phases traced" if mean is None else
                f"the mean write took {mean:.1f} ms; no server phases traced")
    largest = max(split, key=lambda name: split[name])
    return (f"of the {inputs.write_latency_ms_mean:.1f} ms mean write, "
            f"{' + '.join(CYCLE_PHASES)} took {_pct(share)}, the largest part {largest} "
            f"{split[largest]:.1f} ms")
