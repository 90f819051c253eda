"""A Wing-Gong/Lowe linearizability checker for one register per key.

Model: every key is an independent register that starts absent (`None`).
`put v` sets it to `v`; an `ok` `get` must return its current value (`None`
when absent); `delete` makes it absent, and since DeleteKey of a missing key is
rejected (KEY_NOT_FOUND), a delete can only take effect while the key exists.
Put values are unique per key, so a read names the one write it saw.

A history is linearizable when every `ok` op can be given one instant inside
its [invoke, complete] interval such that the ops, in that order, are a legal
run of the model. `fail` ops are dropped: they did not take effect. An `info`
put or delete may take effect at any instant after its invocation, or never;
an `info` get observed nothing and is dropped.

Linearizability is local (Herlihy & Wing's P-compositionality): a history is
linearizable iff each key's sub-history is, so keys are checked one at a time,
which keeps every search small.

The search is Lowe's just-in-time variant of Wing & Gong: walk the invocation
and completion events in time order; at an invocation, try to linearize that
op now; at a completion whose op has not been linearized, backtrack. A set of
(linearized-ops bitmask, register state) pairs already explored prunes repeated
work, since the future only depends on that pair. An `info` op's completion is
at +infinity, so the search succeeds as soon as every `ok` op is linearized; the
`info` ops left over are the ones that never took effect.

Pruning beyond the memo, each sound (see `_prepare` and `_Search.run`): a read
that is legal now is linearized now and never delayed (it changes no state, so
any solution can be rearranged to read now); values nobody read collapse into
one state; interchangeable writes are only tried in earliest-deadline order; a
read `info` put is known to have taken effect. `tests/chaos` checks the verdicts
against a brute-force search from the definition.

The search is exponential in the worst case (many concurrent writes to one
key), so each key gets a step budget of roughly a microsecond per step; a key
that exhausts it is reported `unknown`, never `ok`. Time ties count as
concurrent (an invocation at the instant another op completes may precede it),
which can only make the checker more permissive, never report a false violation.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from om.chaos.history import F, History, Op, Outcome

DEFAULT_MAX_STEPS: Final = 2_000_000

_PUT: Final = 0
_GET: Final = 1
_DELETE: Final = 2
_KIND: Final = {F.PUT: _PUT, F.GET: _GET, F.DELETE: _DELETE}
_HEAD: Final = 0


class Verdict(StrEnum):
    """The answer of a check: `unknown` means the step budget ran out."""

    OK = "ok"
    VIOLATION = "violation"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class KeyViolation:
    """A key whose sub-history is not linearizable, with a small witness.

    `ops` is a greedily shrunk sub-history that is still not linearizable:
    removing any one of them (a put only together with the reads of its value)
    was tried and made it linearizable, unless the shrink budget ran out.
    """

    key: str
    ops: tuple[Op, ...]

    def describe(self) -> str:
        """The witness ops, one per line, in invocation order."""
        lines = [f"key {self.key!r} is not linearizable; the ops involved:"]
        lines.extend("  " + op.describe() for op in self.ops)
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LinearizabilityResult:
    """The verdict over all keys: any violation wins over any unknown key."""

    violations: tuple[KeyViolation, ...]
    unknown_keys: tuple[str, ...]
    keys_checked: int
    steps: int

    @property
    def verdict(self) -> Verdict:
        if self.violations:
            return Verdict.VIOLATION
        if self.unknown_keys:
            return Verdict.UNKNOWN
        return Verdict.OK

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK


def check_linearizable(
    history: History, *, max_steps_per_key: int = DEFAULT_MAX_STEPS
) -> LinearizabilityResult:
    """Check every key's register sub-history; `add` ops are not registers and are ignored."""
    assert max_steps_per_key > 0, max_steps_per_key
    violations: list[KeyViolation] = []
    unknown: list[str] = []
    total_steps = 0
    by_key = register_ops_by_key(history)
    for key in sorted(by_key):
        ops = by_key[key]
        verdict, steps = search_key(ops, max_steps_per_key)
        total_steps += steps
        if verdict is Verdict.VIOLATION:
            violations.append(KeyViolation(key, _shrink(ops, max_steps_per_key)))
        elif verdict is Verdict.UNKNOWN:
            unknown.append(key)
    return LinearizabilityResult(tuple(violations), tuple(unknown), len(by_key), total_steps)


def register_ops_by_key(history: History) -> dict[str, list[Op]]:
    """The ops that constrain each register: ok ops and info writes, by invocation."""
    by_key: dict[str, list[Op]] = defaultdict(list)
    for op in history.of(F.PUT, F.GET, F.DELETE):
        if _constrains(op):
            by_key[op.key].append(op)
    for ops in by_key.values():
        ops.sort(key=lambda op: (op.invoke_ns, op.op_id))
    return dict(by_key)


def _constrains(op: Op) -> bool:
    if op.outcome is Outcome.OK:
        return True
    return op.outcome is Outcome.INFO and op.f is not F.GET


def search_key(ops: Sequence[Op], max_steps: int) -> tuple[Verdict, int]:
    """Decide whether one key's ops linearize; returns the verdict and steps spent."""
    assert all(op.key == ops[0].key for op in ops), "ops of several keys"
    assert all(_constrains(op) and op.f in _KIND for op in ops), "a non-register op"
    if max_steps <= 0:
        return Verdict.UNKNOWN, 0
    return _Search(ops).run(max_steps)


_UNREAD: Final = object()
_CLASSES: Final = 4
_NO_CLASS: Final = -1


@dataclass(frozen=True, slots=True)
class _Prepared:
    """Per-op facts the search runs on, indexed like the key's ops."""

    kinds: list[int]
    values: list[object]
    definite: list[bool]
    ends: list[float]
    classes: list[int]
    ranks: list[int]


def _prepare(ops: Sequence[Op]) -> _Prepared:
    """Model the ops for the search, with three sound reductions.

    1. A put whose value an ok get returned took effect before that get
       completed: it is definite even if `info`, with that completion as deadline.
    2. Values no ok get returned are all replaced by one token: states differing
       only in an unread value have the same futures, so the memo merges them.
    3. Writes with the same effect and precondition are interchangeable: unread
       puts, deletes, each split into definite and `info` classes. Given the
       instants a class's ops take effect at, earliest-deadline-first (ties: the
       earliest invoked) fills them whenever any assignment can, so the search
       only linearizes the first-ranked of the class's already-invoked ops.
    """
    first_read: dict[int | None, float] = {}
    for op in ops:
        if op.f is F.GET and op.value is not None:
            first_read[op.value] = min(first_read.get(op.value, op.end_ns), op.end_ns)
    kinds, values, definite, ends, classes = [], [], [], [], []
    for op in ops:
        was_read = op.f is F.PUT and op.value in first_read
        kinds.append(_KIND[op.f])
        values.append(_UNREAD if op.f is F.PUT and not was_read else op.value)
        definite.append(op.outcome is Outcome.OK or was_read)
        ends.append(
            max(op.invoke_ns, min(op.end_ns, first_read[op.value])) if was_read else op.end_ns
        )
        interchangeable = op.f is F.DELETE or (op.f is F.PUT and not was_read)
        klass = 2 * (op.f is F.DELETE) + definite[-1]
        classes.append(klass if interchangeable else _NO_CLASS)
    order = sorted(range(len(ops)), key=lambda i: (ends[i], ops[i].invoke_ns, i))
    ranks = [0] * len(ops)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return _Prepared(kinds, values, definite, ends, classes, ranks)


class _Search:
    """Lowe's search over a doubly linked list of call/return events (dancing links)."""

    def __init__(self, ops: Sequence[Op]) -> None:
        n = len(ops)
        self.model = _prepare(ops)
        self.bits = [1 << i for i in range(n)]
        events = sorted(
            [(op.invoke_ns, 0, i) for i, op in enumerate(ops)]
            + [(end, 1, i) for i, end in enumerate(self.model.ends)]
        )
        tail = 2 * n + 1
        self.nxt = [*range(1, tail + 1)]
        self.prv = [-1, *range(tail)]
        self.node_op = [-1] * (tail + 1)
        self.is_call = [False] * (tail + 1)
        self.call_node = [0] * n
        self.ret_node = [0] * n
        for node, (_, is_return, i) in enumerate(events, start=1):
            self.node_op[node] = i
            if is_return:
                self.ret_node[i] = node
            else:
                self.call_node[i] = node
                self.is_call[node] = True

    def run(self, max_steps: int) -> tuple[Verdict, int]:
        """Walk the events from the head; `passed` holds, per class, the best rank
        among the invoked ops this walk stepped over without linearizing."""
        nxt, node_op, is_call, bits = self.nxt, self.node_op, self.is_call, self.bits
        kinds, values, definite = self.model.kinds, self.model.values, self.model.definite
        classes, ranks = self.model.classes, self.model.ranks
        nobody = len(ranks)
        passed = [nobody] * _CLASSES
        remaining = sum(definite)
        state: object = None
        linearized = 0
        calls: list[tuple[int, object, list[int]]] = []
        seen: set[tuple[int, object]] = set()
        steps = 0
        entry = nxt[_HEAD]
        while remaining:
            if steps >= max_steps:
                return Verdict.UNKNOWN, steps
            steps += 1
            i = node_op[entry]
            assert i >= 0, "walked off the event list with ok ops left"
            if is_call[entry]:
                kind, klass = kinds[i], classes[i]
                new_state = state if kind == _GET else values[i] if kind == _PUT else None
                if kind == _GET:
                    legal = state == values[i]
                else:
                    first = klass == _NO_CLASS or ranks[i] < passed[klass]
                    legal = first and (kind == _PUT or state is not None)
                if legal and (linearized | bits[i], new_state) not in seen:
                    linearized |= bits[i]
                    seen.add((linearized, new_state))
                    calls.append((i, state, passed))
                    state = new_state
                    passed = [nobody] * _CLASSES
                    self._lift(i)
                    remaining -= definite[i]
                    entry = nxt[_HEAD]
                    continue
                if kind != _GET or not legal:
                    if klass != _NO_CLASS:
                        passed[klass] = min(passed[klass], ranks[i])
                    entry = nxt[entry]
                    continue
            else:
                assert definite[i], "an indefinite op's +inf return was reached"
            # Every way on from here fails: undo choices (``_backtrack``).
            undone = self._backtrack(calls, linearized, remaining)
            if undone is None:
                return Verdict.VIOLATION, steps
            i, state, passed, linearized, remaining = undone
            if classes[i] != _NO_CLASS:
                passed[classes[i]] = min(passed[classes[i]], ranks[i])
            entry = nxt[self.call_node[i]]
        return Verdict.OK, steps

    def _backtrack(self, calls: list[tuple[int, object, list[int]]], linearized: int,
                   remaining: int) -> tuple[int, object, list[int], int, int] | None:
        """Undoes the last choice, and keeps undoing while it was a read, since a read
        legal now dominates delaying it: the write undone, with the state, passed ranks,
        linearized set and remaining count from before it; None when nothing is left
        to undo (no linearization exists)."""
        kinds, bits, definite = self.model.kinds, self.bits, self.model.definite
        while calls:
            i, state, passed = calls.pop()
            linearized ^= bits[i]
            self._unlift(i)
            remaining += definite[i]
            if kinds[i] != _GET:
                return i, state, passed, linearized, remaining
        return None

    def _lift(self, i: int) -> None:
        nxt, prv = self.nxt, self.prv
        for node in (self.call_node[i], self.ret_node[i]):
            nxt[prv[node]] = nxt[node]
            prv[nxt[node]] = prv[node]

    def _unlift(self, i: int) -> None:
        nxt, prv = self.nxt, self.prv
        for node in (self.ret_node[i], self.call_node[i]):
            nxt[prv[node]] = node
            prv[nxt[node]] = node


def _shrink(ops: Sequence[Op], budget: int) -> tuple[Op, ...]:
    """Greedily drop ops, latest first, while the rest stays non-linearizable.

    Only drops that cannot create a violation of their own are tried, so the
    witness is non-linearizable because the original is: a read can always go;
    a put only once no kept read returns its value and no kept delete may follow
    it (the delete could need the key to exist); a delete only once no kept read
    of "absent" may follow it. Passes repeat until nothing more can go or the
    budget is spent.
    """
    kept = list(ops)
    spent = 0
    shrinking = True
    while shrinking and spent < budget:
        shrinking = False
        for op in sorted(kept, key=lambda op: (op.invoke_ns, op.op_id), reverse=True):
            if spent >= budget or not _droppable(op, kept):
                continue
            trial = [k for k in kept if k.op_id != op.op_id]
            verdict, steps = search_key(trial, budget - spent)
            spent += steps
            if verdict is Verdict.VIOLATION:
                kept, shrinking = trial, True
    return tuple(kept)


def _droppable(op: Op, kept: Sequence[Op]) -> bool:
    """Whether every linearization of `kept` stays legal without `op`."""
    if op.f is F.PUT:
        return not any(
            (k.f is F.GET and k.value == op.value) or (k.f is F.DELETE and k.end_ns >= op.invoke_ns)
            for k in kept
        )
    if op.f is F.DELETE:
        return not any(k.f is F.GET and k.value is None and k.end_ns >= op.invoke_ns for k in kept)
    return True
