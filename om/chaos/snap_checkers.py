"""The OM-snapshot checker: snapshots are listed as acknowledged, and read the past.

Read after the run: the register bucket's snapshot names (ListSnapshot, every
page). From the history (``om.chaos.snap_workload`` and the register workload):

* an ``ok`` create's snapshot is listed unless a delete of it was ``ok`` or
  ``info`` (``snapshot_missing``); one whose delete was ``ok`` is not listed
  (``deleted_snapshot_listed``); a listed name no create made is reported
  (``unexplained_snapshot``);
* an ``ok`` read of key ``k`` through snapshot ``S`` (taken at some instant of
  S's create, ``[invoke, complete]``) sees what ``k`` held then:
  - a value must come from a put to ``k`` invoked before S's create completed
    (``future_value``; ``unknown_value`` when no put wrote it), and no ``ok`` put
    to ``k`` may lie wholly between that put's completion and the create's
    invocation (``stale_value``: a later value had certainly replaced it);
  - absence is stale when an ``ok`` put to ``k`` completed before the create
    began and no delete of ``k`` (``ok`` or ``info``) may have run between that
    put's invocation and the create's completion.

These are necessary conditions of a correct snapshot, checked without a search,
so every violation reported is real; a subtle stale read may go unseen.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate

from om.chaos.checkers import Violation
from om.chaos.history import SNAPSHOT, F, History, Op, Outcome

SNAP = "snapshots"


def check_snapshots(history: History, listed: Iterable[str] | None) -> list[Violation]:
    """Every rule of the module docstring; one violation per broken promise."""
    creates = {op.key: op for op in history.of(F.SNAP_CREATE)}
    if not creates:
        return []
    if listed is None:
        return [Violation(SNAP, "not_observed", "the snapshots were not listed")]
    return _check_listed(history, creates, set(listed)) + _check_reads(history, creates)


def _check_listed(history: History, creates: dict[str, Op], listed: set[str]
                  ) -> list[Violation]:
    deletes: dict[str, list[Op]] = defaultdict(list)
    for op in history.of(F.SNAP_DELETE):
        deletes[op.key].append(op)
    violations = []
    for name, create in sorted(creates.items()):
        outcomes = {d.outcome for d in deletes[name]}
        if create.outcome is Outcome.OK and name not in listed and \
                not outcomes & {Outcome.OK, Outcome.INFO}:
            violations.append(Violation(SNAP, "snapshot_missing",
                                        f"{name} is not listed after {create.describe()}", name))
        if Outcome.OK in outcomes and name in listed:
            violations.append(Violation(SNAP, "deleted_snapshot_listed",
                                        f"{name} is listed after its acknowledged delete", name))
    violations.extend(Violation(SNAP, "unexplained_snapshot", f"{name}: no create", name)
                      for name in sorted(listed - set(creates)))
    return violations


@dataclass
class _KeyWrites:
    """One key's writes, indexed so that each read is judged in O(log n + deletes)."""

    by_value: dict[int, Op] = field(default_factory=dict)
    deletes: list[Op] = field(default_factory=list)
    acked: list[Op] = field(default_factory=list)     # ok puts
    _invokes: list[int] = field(default_factory=list)
    _suffix_min_end: list[float] = field(default_factory=list)
    _ends: list[int] = field(default_factory=list)
    _prefix_max_invoke: list[int] = field(default_factory=list)

    def index(self) -> None:
        by_invoke = sorted(self.acked, key=lambda op: op.invoke_ns)
        self._invokes = [op.invoke_ns for op in by_invoke]
        self._suffix_min_end = list(accumulate(
            reversed([op.end_ns for op in by_invoke]), min))[::-1]
        by_end = sorted(self.acked, key=lambda op: op.end_ns)
        self._ends = [int(op.end_ns) for op in by_end]
        self._prefix_max_invoke = list(accumulate((op.invoke_ns for op in by_end), max))

    def replaced_between(self, after_ns: float, before_ns: int) -> bool:
        """Whether an ok put was invoked after ``after_ns`` and completed before ``before_ns``."""
        i = bisect_right(self._invokes, after_ns)
        return i < len(self._invokes) and self._suffix_min_end[i] < before_ns

    def last_invoke_done_before(self, before_ns: int) -> int | None:
        """The latest invocation of an ok put that completed before ``before_ns``."""
        i = bisect_left(self._ends, before_ns)
        return self._prefix_max_invoke[i - 1] if i else None


def _check_reads(history: History, creates: dict[str, Op]) -> list[Violation]:
    writes: dict[str, _KeyWrites] = defaultdict(_KeyWrites)
    for op in history.of(F.PUT):
        if op.outcome is not Outcome.FAIL:
            assert op.value is not None
            writes[op.key].by_value[op.value] = op
            if op.outcome is Outcome.OK:
                writes[op.key].acked.append(op)
    for op in history.of(F.DELETE):
        if op.outcome is not Outcome.FAIL:
            writes[op.key].deletes.append(op)
    for key_writes in writes.values():
        key_writes.index()
    violations = []
    for read in history.of(F.SNAP_READ):
        create = creates.get(str(read.extra[SNAPSHOT]))
        if read.outcome is not Outcome.OK or create is None or create.outcome is not Outcome.OK:
            continue
        kind = _read_fault(read, create, writes[read.key])
        if kind:
            violations.append(Violation(SNAP, kind, f"{read.describe()} through "
                                        f"{create.describe()}", read.key))
    return violations


def _read_fault(read: Op, create: Op, writes: _KeyWrites) -> str:
    """The kind of violation ``read`` through ``create``'s snapshot shows, or ""."""
    assert create.complete_ns is not None
    if read.value is None:
        latest = writes.last_invoke_done_before(create.invoke_ns)
        if latest is not None and not any(
                d.invoke_ns <= create.complete_ns and d.end_ns >= latest
                for d in writes.deletes):
            return "stale_absent"
        return ""
    put = writes.by_value.get(read.value)
    if put is None:
        return "unknown_value"
    if put.invoke_ns > create.complete_ns:
        return "future_value"
    if put.outcome is Outcome.OK and writes.replaced_between(put.end_ns, create.invoke_ns):
        return "stale_value"
    return ""
