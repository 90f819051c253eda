"""The whole machine's CPU over a measured window, and how much of it was not the bench's.

A flow's figures hold only while the bench had the machine to itself: a package
install beside a run once made leader/etcd read 0.29 instead of ~0.7, and nothing
in the output said so. ``take_sample`` reads the machine's CPU time (``/proc/stat``
through psutil: every core, in seconds) and every process's (``/proc/<pid>/stat``);
``machine_load`` compares two samples:

* **busy**: user + nice + system + irq + softirq + steal over all of it (idle and
  iowait are the rest). Steal is time the hypervisor gave another guest: capacity
  the bench did not get, so it counts as busy, and as others';
* **own**: the CPU time of the bench's process and every process below it (the OM
  nodes, their Raft processes and front workers, the etcd members, the etcd load
  generator): a process alive at both samples counts its difference, one started in
  between its whole time (a pid reused in between is told apart by its start time);
* **others** = busy - own: any other process, short-lived ones included (a compiler a
  package install runs for 200 ms is in ``/proc/stat``'s totals, never in a scan of
  processes), the kernel's threads, and the hypervisor's steal.

Every share is of the whole machine (all its cores) over the window. ``MachineLoad
.warning`` says when others took more than ``OTHERS_SHARE_MAX`` of it, naming the
other processes that used most, so a reader knows the flow's figures are not to be
trusted. Where psutil cannot read the machine's times, ``take_sample`` answers None.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import psutil

# Other processes may use at most this share of the machine during a flow before the
# bench warns that the flow's figures are not to be trusted (issue 33).
OTHERS_SHARE_MAX = 0.10
# How many of the other processes a warning names (those that used most CPU).
OTHERS_NAMED_MAX = 5
# An other process is named only from this share of the machine up: below it, a name
# says nothing a reader could act on.
OTHERS_NAMED_SHARE_MIN = 0.005
# A process is named by its command line, cut to this many characters.
COMMAND_CHARS_MAX = 60


@dataclass(frozen=True)
class ProcessTimes:
    """One process at one sample: its parent, command, start time and CPU time so far (s)."""

    ppid: int
    command: str
    started: float
    cpu_s: float


@dataclass(frozen=True)
class LoadSample:
    """The machine's CPU seconds so far (all cores) and every readable process's, read at
    ``at_s`` (``time.monotonic``)."""

    busy_s: float
    total_s: float
    steal_s: float
    cores: int
    processes: dict[int, ProcessTimes]
    at_s: float = 0.0

    def __post_init__(self) -> None:
        assert 0.0 <= self.busy_s <= self.total_s + 1e-6
        assert 0.0 <= self.steal_s <= self.busy_s + 1e-6
        assert self.cores > 0


@dataclass(frozen=True)
class OtherProcess:
    """A process that was not the bench's, and its share of the machine over the window."""

    pid: int
    command: str
    share: float


@dataclass(frozen=True)
class MachineLoad:
    """What the whole machine did over one window (see the module docstring).

    Shares are fractions of all the machine's CPU time over the window, in [0, 1];
    ``own_processes`` is how many processes were counted as the bench's."""

    cores: int
    window_s: float
    busy_share: float
    own_share: float
    steal_share: float
    top_others: tuple[OtherProcess, ...] = ()
    own_processes: int = 0

    def __post_init__(self) -> None:
        assert self.cores > 0
        assert self.window_s >= 0.0
        for share in (self.busy_share, self.own_share, self.steal_share):
            assert 0.0 <= share <= 1.0, share

    @property
    def others_share(self) -> float:
        """Everything busy that was not the bench's processes (never below 0: the two
        counters are sampled a few microseconds apart, and ticks are coarse)."""
        return max(self.busy_share - self.own_share, 0.0)

    @property
    def warning(self) -> str | None:
        """Why the flow's figures are not to be trusted, or None when others stayed
        within ``OTHERS_SHARE_MAX`` of the machine."""
        if self.others_share <= OTHERS_SHARE_MAX:
            return None
        named = ", ".join(f"{p.command!r} (pid {p.pid}) {100 * p.share:.0f}%"
                          for p in self.top_others)
        unnamed = self.others_share - sum(p.share for p in self.top_others)
        parts = [named] if named else []
        if self.steal_share >= OTHERS_NAMED_SHARE_MIN:
            parts.append(f"the hypervisor's steal {100 * self.steal_share:.0f}%")
            unnamed -= self.steal_share
        if unnamed >= OTHERS_NAMED_SHARE_MIN:
            parts.append(f"short-lived processes, the kernel or processes this PID namespace "
                         f"does not show {100 * unnamed:.0f}%")
        return (f"other processes used {100 * self.others_share:.0f}% of the machine "
                f"({self.cores} cores) during the measured window, more than "
                f"{100 * OTHERS_SHARE_MAX:.0f}%: this flow's figures are not to be trusted "
                f"(largest: {'; '.join(parts)})")

    def as_dict(self) -> dict[str, Any]:
        """The JSON form recorded in summary.json (shares as fractions)."""
        return {**asdict(self), "top_others": [asdict(p) for p in self.top_others],
                "others_share": self.others_share, "others_share_max": OTHERS_SHARE_MAX,
                "warning": self.warning}


def _command(name: str | None, cmdline: list[str] | None) -> str:
    """A process's command line (its name when it has none: a kernel thread), cut short."""
    text = " ".join(cmdline) if cmdline else (name or "?")
    return text if len(text) <= COMMAND_CHARS_MAX else text[:COMMAND_CHARS_MAX - 3] + "..."


def _process_table() -> dict[int, ProcessTimes]:
    """Every process psutil can read now: {pid: ProcessTimes}."""
    table: dict[int, ProcessTimes] = {}
    for process in psutil.process_iter(["ppid", "name", "cmdline", "create_time",
                                        "cpu_times"]):
        info = process.info
        times = info.get("cpu_times")
        if times is None or info.get("create_time") is None:
            continue   # gone, or not ours to read: its CPU still shows in the totals
        table[process.pid] = ProcessTimes(int(info.get("ppid") or 0),
                                          _command(info.get("name"), info.get("cmdline")),
                                          float(info["create_time"]),
                                          float(times.user + times.system))
    return table


def take_sample() -> LoadSample | None:
    """The machine's and every process's CPU time now; None where psutil cannot tell."""
    try:
        times = psutil.cpu_times()
    except (OSError, psutil.Error):
        return None
    idle = times.idle + getattr(times, "iowait", 0.0)
    # guest and guest_nice are already inside user and nice (proc(5)): not added again
    busy = sum(getattr(times, name, 0.0) for name in
               ("user", "nice", "system", "irq", "softirq", "steal"))
    at_s = time.monotonic()
    return LoadSample(busy, busy + idle, getattr(times, "steal", 0.0),
                      psutil.cpu_count() or 1, _process_table(), at_s)


def descendants(root: int, processes: dict[int, ProcessTimes]) -> set[int]:
    """``root`` and every process below it in ``processes`` (by parent pid)."""
    below: dict[int, list[int]] = {}
    for pid, times in processes.items():
        below.setdefault(times.ppid, []).append(pid)
    found, todo = {root}, [root]
    while todo:
        for child in below.get(todo.pop(), ()):
            if child not in found:   # a cycle cannot happen in a real table; be safe
                found.add(child)
                todo.append(child)
    return found


def _used_s(pid: int, before: LoadSample, after: LoadSample) -> float:
    """CPU seconds process ``pid`` used between the samples (all of it if it is new)."""
    now = after.processes[pid]
    then = before.processes.get(pid)
    if then is None or then.started != now.started:
        return now.cpu_s
    return max(now.cpu_s - then.cpu_s, 0.0)


def cpu_percent(before: LoadSample, after: LoadSample, pid: int) -> float | None:
    """Process ``pid``'s CPU between the samples in percent of one core, all its threads
    included (ended ones too); None unless the same process is in both."""
    if pid not in before.processes or pid not in after.processes:
        return None
    if before.processes[pid].started != after.processes[pid].started:
        return None
    elapsed_s = after.at_s - before.at_s
    return 100.0 * _used_s(pid, before, after) / elapsed_s if elapsed_s > 0 else None


def _share(seconds: float, total_s: float) -> float:
    return min(max(seconds / total_s, 0.0), 1.0) if total_s > 0 else 0.0


def machine_load(before: LoadSample, after: LoadSample, window_s: float,
                 root: int | None = None) -> MachineLoad:
    """The window between two samples; ``root`` is the bench's process (default: this
    one): it and every process below it at ``after`` are the bench's own."""
    assert after.total_s >= before.total_s
    total = after.total_s - before.total_s
    own = descendants(os.getpid() if root is None else root, after.processes)
    others = [OtherProcess(pid, after.processes[pid].command,
                           _share(_used_s(pid, before, after), total))
              for pid in after.processes if pid not in own]
    return MachineLoad(
        cores=after.cores, window_s=window_s,
        busy_share=_share(after.busy_s - before.busy_s, total),
        own_share=_share(sum(_used_s(pid, before, after) for pid in own
                             if pid in after.processes), total),
        steal_share=_share(after.steal_s - before.steal_s, total),
        top_others=_largest(others), own_processes=len(own & after.processes.keys()))


def _largest(others: Iterable[OtherProcess]) -> tuple[OtherProcess, ...]:
    """The ``OTHERS_NAMED_MAX`` other processes that used most, from
    ``OTHERS_NAMED_SHARE_MIN`` of the machine up, largest first."""
    ranked = sorted((p for p in others if p.share >= OTHERS_NAMED_SHARE_MIN),
                    key=lambda p: p.share, reverse=True)
    return tuple(ranked[:OTHERS_NAMED_MAX])
