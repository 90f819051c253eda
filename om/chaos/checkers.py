"""Checkers that judge a chaos run's history and end-of-run observations.

Every checker returns a list of `Violation`, empty when the run is clean.
Problems in the judged data are violations; a broken caller (a programming
error) trips an assert. Each checker fails closed: when the evidence needed to
judge is missing, that is itself a violation, because a check that saw nothing
proves nothing.

Invariants and why they matter:

- No lost writes (durability: "completed => durable"). Every `ok` put must
  still be visible in the final read unless some put or delete that could have
  taken effect after it explains what the final read shows. Only an op that
  produced the observed final value (the put of that value, or a delete when the
  key is absent) and did not complete before the lost put was invoked counts,
  so a loss is flagged only when no order consistent with real time explains it.
- Linearizability, per key, via `om.chaos.linearizability`.
- Exactly once: each `add` charges its delta bytes and one namespace unit to a
  bucket. The observed usage must lie in [sum over ok adds, that plus the sum
  over info adds]; fail adds charge nothing. Above is `duplicate` (a retry
  re-executed instead of hitting the retry cache), below is `lost`. The
  evidence gate fails the run when no add was ever retried, since only a retry
  with the same call id exercises the retry cache.
- Replica digests: after quiescence every node's per-table digest is equal.
- Object ids: unique across all objects, and increasing in real time: an id
  acknowledged before another op was invoked is smaller than that op's id,
  since the managed index never goes back, even across a leader change.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from om.chaos.history import F, History, Op, Outcome
from om.chaos.linearizability import DEFAULT_MAX_STEPS, check_linearizable

LOST_WRITES: Final = "lost_writes"
LINEARIZABILITY: Final = "linearizability"
EXACTLY_ONCE: Final = "exactly_once"
REPLICAS: Final = "replicas"
OBJECT_IDS: Final = "object_ids"

OBJECT_ID_FIELD: Final = "object_id"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: which checker, what kind, a readable detail, the key."""

    checker: str
    kind: str
    detail: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """A bucket's quota usage as read from the cluster at the end of a run."""

    used_bytes: int
    used_namespace: int


@dataclass(frozen=True, slots=True)
class IdAck:
    """An object id as acknowledged to a client, with that op's real-time interval."""

    source: str
    object_id: int
    invoke_ns: int
    complete_ns: int

    def __post_init__(self) -> None:
        assert self.invoke_ns <= self.complete_ns, self


def check_no_lost_writes(
    history: History, final_state: Mapping[str, int | None]
) -> list[Violation]:
    """Every ok put is visible at the end, or a later-or-concurrent write explains why not.

    `final_state` maps each key to the value read once the run is quiescent
    (`None`: not found). Every key with an ok put must be in it.
    """
    writes: dict[str, list[Op]] = defaultdict(list)
    for op in history.of(F.PUT, F.DELETE):
        writes[op.key].append(op)
    violations: list[Violation] = []
    for key in sorted(set(writes) | set(final_state)):
        ops = writes.get(key, [])
        if key in final_state:
            violations.extend(_check_final_value(key, ops, final_state[key]))
        elif any(op.f is F.PUT and op.outcome is Outcome.OK for op in ops):
            violations.append(
                Violation(LOST_WRITES, "missing_final_read", "no final read of this key", key)
            )
    return violations


def _check_final_value(key: str, ops: Sequence[Op], final: int | None) -> list[Violation]:
    effective = [op for op in ops if op.outcome is not Outcome.FAIL]
    violations: list[Violation] = []
    if final is None:
        producers = [op for op in effective if op.f is F.DELETE]
    else:
        producers = [op for op in effective if op.f is F.PUT and op.value == final]
        if not producers:
            failed = any(op.f is F.PUT and op.value == final for op in ops)
            why = "only a failed put wrote it" if failed else "no put wrote it"
            violations.append(
                Violation(LOST_WRITES, "unexplained_value", f"final value {final}: {why}", key)
            )
    for op in ops:
        if op.f is not F.PUT or op.outcome is not Outcome.OK or op.value == final:
            continue
        if not any(p.op_id != op.op_id and p.end_ns >= op.invoke_ns for p in producers):
            detail = f"final value {final} but nothing after {op.describe()} explains it"
            violations.append(Violation(LOST_WRITES, "lost_write", detail, key))
    return violations


def check_linearizability(
    history: History, *, max_steps_per_key: int = DEFAULT_MAX_STEPS
) -> list[Violation]:
    """Per-key register linearizability; a key whose search ran out of budget is a violation."""
    result = check_linearizable(history, max_steps_per_key=max_steps_per_key)
    violations = [
        Violation(LINEARIZABILITY, "nonlinearizable", found.describe(), found.key)
        for found in result.violations
    ]
    violations.extend(
        Violation(
            LINEARIZABILITY,
            "unknown",
            f"search gave up after {max_steps_per_key} steps; the key is unverified",
            key,
        )
        for key in result.unknown_keys
    )
    return violations


@dataclass(slots=True)
class _Bounds:
    ok_bytes: int = 0
    info_bytes: int = 0
    ok_count: int = 0
    info_count: int = 0
    fail_count: int = 0

    def charge(self, op: Op) -> None:
        assert op.f is F.ADD, op
        assert op.value is not None, op
        assert op.value > 0, op
        if op.outcome is Outcome.OK:
            self.ok_bytes += op.value
            self.ok_count += 1
        elif op.outcome is Outcome.INFO:
            self.info_bytes += op.value
            self.info_count += 1
        else:
            self.fail_count += 1

    def byte_range(self) -> tuple[int, int]:
        return self.ok_bytes, self.ok_bytes + self.info_bytes

    def count_range(self) -> tuple[int, int]:
        return self.ok_count, self.ok_count + self.info_count

    def counts(self) -> str:
        return f"{self.ok_count} ok, {self.info_count} info, {self.fail_count} fail adds"


def check_exactly_once(history: History, observed: Mapping[str, Usage]) -> list[Violation]:
    """Observed bucket usage lies within the bounds the adds allow; some add was retried.

    `observed` maps each bucket (the adds' `key`) to its usage read at the end.
    Buckets must start empty: subtract any baseline before calling.
    """
    adds = history.of(F.ADD)
    bounds: dict[str, _Bounds] = defaultdict(_Bounds)
    for op in adds:
        bounds[op.key].charge(op)
    violations = _retry_evidence(adds)
    for bucket in sorted(set(bounds) | set(observed)):
        if bucket not in observed:
            violations.append(
                Violation(EXACTLY_ONCE, "missing_observation", "no final usage read", bucket)
            )
            continue
        usage, bound = observed[bucket], bounds[bucket]
        violations.extend(_within(bucket, "usedBytes", usage.used_bytes, bound.byte_range(), bound))
        violations.extend(
            _within(bucket, "usedNamespace", usage.used_namespace, bound.count_range(), bound)
        )
    return violations


def _retry_evidence(adds: Sequence[Op]) -> list[Violation]:
    if any(op.retries > 0 for op in adds):
        return []
    detail = f"none of {len(adds)} adds was retried, so the retry cache was never exercised"
    return [Violation(EXACTLY_ONCE, "no_retry_exercised", detail)]


def _within(
    bucket: str, name: str, seen: int, allowed: tuple[int, int], bound: _Bounds
) -> list[Violation]:
    lower, upper = allowed
    if lower <= seen <= upper:
        return []
    kind = "duplicate" if seen > upper else "lost"
    detail = f"{name}={seen} outside [{lower}, {upper}] ({bound.counts()})"
    return [Violation(EXACTLY_ONCE, kind, detail, bucket)]


def check_replicas_identical(digests: Mapping[str, Mapping[str, str]]) -> list[Violation]:
    """Every node reports the same digest for every table; needs two nodes or more."""
    violations: list[Violation] = []
    if len(digests) < 2:
        detail = f"{len(digests)} node(s) reported; comparing needs at least 2"
        violations.append(Violation(REPLICAS, "too_few_replicas", detail))
    tables = sorted({table for per_table in digests.values() for table in per_table})
    if not tables:
        violations.append(Violation(REPLICAS, "no_tables", "no node reported any table"))
    for table in tables:
        per_node = {node: per_table.get(table) for node, per_table in sorted(digests.items())}
        missing = [node for node, digest in per_node.items() if digest is None]
        if missing:
            detail = f"table {table!r} missing on {', '.join(missing)}"
            violations.append(Violation(REPLICAS, "missing_table", detail, table))
        elif len(set(per_node.values())) > 1:
            shown = ", ".join(f"{node}={digest}" for node, digest in per_node.items())
            detail = f"table {table!r} differs: {shown}"
            violations.append(Violation(REPLICAS, "digest_mismatch", detail, table))
    return violations


def check_unique_object_ids(ids: Iterable[tuple[str, int]]) -> list[Violation]:
    """No object id appears twice among (source, object_id) pairs of all objects."""
    sources: dict[int, list[str]] = defaultdict(list)
    for source, object_id in ids:
        sources[object_id].append(source)
    return [
        Violation(
            OBJECT_IDS,
            "duplicate_object_id",
            f"object id {object_id} held by {', '.join(holders)}",
            str(object_id),
        )
        for object_id, holders in sorted(sources.items())
        if len(holders) > 1
    ]


def check_increasing(acks: Iterable[IdAck]) -> list[Violation]:
    """An id acknowledged before an op was invoked is smaller than that op's id.

    Only real-time order is checked: concurrent ops may get ids in either order.
    """
    acks = list(acks)
    by_complete = sorted(acks, key=lambda ack: ack.complete_ns)
    violations: list[Violation] = []
    done = 0
    highest: IdAck | None = None
    for ack in sorted(acks, key=lambda ack: ack.invoke_ns):
        while done < len(by_complete) and by_complete[done].complete_ns < ack.invoke_ns:
            if highest is None or by_complete[done].object_id > highest.object_id:
                highest = by_complete[done]
            done += 1
        if highest is not None and highest.object_id >= ack.object_id:
            detail = (
                f"{ack.source} got id {ack.object_id} at {ack.invoke_ns}, after "
                f"{highest.source} was acknowledged id {highest.object_id} at {highest.complete_ns}"
            )
            violations.append(Violation(OBJECT_IDS, "id_not_increasing", detail, ack.source))
    return violations


def id_acks_from_history(history: History) -> list[IdAck]:
    """The ids of ok puts, adds and file creates that recorded `extra["object_id"]` (an int)."""
    acks: list[IdAck] = []
    for op in history.of(F.PUT, F.ADD, F.CREATE):
        object_id = op.extra.get(OBJECT_ID_FIELD)
        if op.outcome is not Outcome.OK or type(object_id) is not int:
            continue
        assert op.complete_ns is not None, op
        acks.append(IdAck(f"{op.f} {op.key} #{op.op_id}", object_id, op.invoke_ns, op.complete_ns))
    return acks


def run_all(
    history: History,
    *,
    final_state: Mapping[str, int | None] | None = None,
    observed_usage: Mapping[str, Usage] | None = None,
    digests: Mapping[str, Mapping[str, str]] | None = None,
    object_ids: Iterable[tuple[str, int]] | None = None,
    max_steps_per_key: int = DEFAULT_MAX_STEPS,
) -> list[Violation]:
    """Every applicable check; a workload in the history without its observation fails.

    Linearizability always runs. Lost writes needs `final_state` when the
    history has puts, exactly-once needs `observed_usage` when it has adds.
    Real-time id order runs on the ids recorded in `extra["object_id"]`;
    replica digests and id uniqueness run when given.
    """
    violations = check_linearizability(history, max_steps_per_key=max_steps_per_key)
    if final_state is not None:
        violations.extend(check_no_lost_writes(history, final_state))
    elif history.of(F.PUT):
        violations.append(_not_observed(LOST_WRITES, "puts but no final read state"))
    if observed_usage is not None:
        violations.extend(check_exactly_once(history, observed_usage))
    elif history.of(F.ADD):
        violations.append(_not_observed(EXACTLY_ONCE, "adds but no observed bucket usage"))
    if digests is not None:
        violations.extend(check_replicas_identical(digests))
    if object_ids is not None:
        violations.extend(check_unique_object_ids(object_ids))
    violations.extend(check_increasing(id_acks_from_history(history)))
    return violations


def _not_observed(checker: str, what: str) -> Violation:
    return Violation(checker, "not_observed", f"the history has {what}; the check cannot run")
