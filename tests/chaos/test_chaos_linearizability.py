"""The per-key register linearizability checker: red tests first, then properties.

Each hand-written history is drawn as time intervals; a non-linearizable one
MUST be rejected, and its witness must name the ops that make it so.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from om.chaos.history import F, History, Outcome
from om.chaos.linearizability import Verdict, check_linearizable, search_key
from tests.tiers import examples

from .chaos_builders import Builder, simulate


def _verdict(builder: Builder) -> Verdict:
    return check_linearizable(builder.history()).verdict


# --- red tests: each history below is not linearizable ---------------------------------


def test_stale_read_after_acked_write_is_rejected() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, 30)
    b.op("get", "k", 1, 40, 50)
    assert _verdict(b) is Verdict.VIOLATION


def test_read_of_a_value_never_written_is_rejected() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("get", "k", 99, 20, 30)
    assert _verdict(b) is Verdict.VIOLATION


def test_reads_observing_values_in_an_impossible_order_are_rejected() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, 100)  # concurrent with both reads
    b.op("get", "k", 2, 30, 40)
    b.op("get", "k", 1, 50, 60)  # 2 was already visible; 1 cannot come back
    assert _verdict(b) is Verdict.VIOLATION


def test_read_after_completed_delete_seeing_the_old_value_is_rejected() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("delete", "k", None, 20, 30)
    b.op("get", "k", 1, 40, 50)
    assert _verdict(b) is Verdict.VIOLATION


def test_read_of_a_failed_write_is_rejected() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10, "fail")
    b.op("get", "k", 1, 20, 30)
    assert _verdict(b) is Verdict.VIOLATION


def test_ok_delete_of_a_missing_key_is_rejected() -> None:
    b = Builder()
    b.op("delete", "k", None, 0, 10)
    assert _verdict(b) is Verdict.VIOLATION


def test_info_write_cannot_take_effect_twice() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, None, "info")
    b.op("get", "k", 2, 30, 40)
    b.op("get", "k", 1, 50, 60)
    assert _verdict(b) is Verdict.VIOLATION


def test_info_write_cannot_take_effect_before_its_invocation() -> None:
    b = Builder()
    b.op("get", "k", 1, 0, 10)
    b.op("put", "k", 1, 20, None, "info")
    assert _verdict(b) is Verdict.VIOLATION


def test_read_of_absent_key_after_completed_write_is_rejected() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("get", "k", None, 20, 30)
    assert _verdict(b) is Verdict.VIOLATION


# --- linearizable histories ------------------------------------------------------------


@pytest.mark.parametrize("seen", [None, 1])
def test_concurrent_write_and_read_may_go_either_way(seen: int | None) -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 100)
    b.op("get", "k", seen, 10, 20)
    assert _verdict(b) is Verdict.OK


def test_info_write_may_take_effect_long_after_the_client_gave_up() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, 25, "info")  # complete_ns is the give-up time, not a bound
    b.op("get", "k", 1, 30, 40)
    b.op("get", "k", 2, 50, 60)
    assert _verdict(b) is Verdict.OK


def test_info_write_may_never_take_effect() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, None, "info")
    b.op("get", "k", 1, 30, 40)
    b.op("delete", "k", None, 50, None, "info")  # never took effect either
    b.op("get", "k", 1, 60, 70)
    assert _verdict(b) is Verdict.OK


def test_delete_then_read_of_absent_key_is_fine() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("delete", "k", None, 20, 30)
    b.op("get", "k", None, 40, 50)
    b.op("put", "k", 2, 60, 70)
    b.op("get", "k", 2, 80, 90)
    assert _verdict(b) is Verdict.OK


def test_failed_and_unknown_reads_are_ignored() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("get", "k", None, 20, 30, "fail")
    b.op("get", "k", None, 40, None, "info")
    assert _verdict(b) is Verdict.OK


def test_touching_intervals_count_as_concurrent() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("get", "k", None, 10, 20)
    assert _verdict(b) is Verdict.OK


def test_add_ops_are_not_registers() -> None:
    b = Builder()
    b.op("add", "bucket", 5, 0, 10)
    result = check_linearizable(b.history())
    assert result.ok
    assert result.keys_checked == 0


# --- results, witnesses and budget -----------------------------------------------------


def test_violation_names_the_key_and_a_shrunk_witness() -> None:
    b = Builder()
    noise = [b.op("put", "other", 7, 0, 10), b.op("get", "other", 7, 20, 30)]
    first = b.op("put", "k", 1, 0, 10)
    b.op("get", "k", 1, 12, 18)
    second = b.op("put", "k", 2, 20, 30)
    b.op("get", "k", 2, 32, 38)
    stale = b.op("get", "k", 1, 40, 50)
    b.op("put", "k", 3, 60, 70)
    result = check_linearizable(b.history())
    assert result.verdict is Verdict.VIOLATION
    assert result.keys_checked == 2
    assert [v.key for v in result.violations] == ["k"]
    assert result.violations[0].ops == (first, second, stale)
    assert "p4#4 put k=2 ok [20, 30]" in result.violations[0].describe()
    assert all(op not in result.violations[0].ops for op in noise)


def test_witness_keeps_the_writes_its_ops_depend_on() -> None:
    b = Builder()
    first = b.op("put", "k", 1, 0, 10)
    b.op("get", "k", 1, 12, 18)
    delete = b.op("delete", "k", None, 20, 30)
    b.op("get", "k", None, 32, 38)
    b.op("put", "k", 2, 40, 50)  # enables the next delete: never dropped before it
    b.op("delete", "k", None, 60, 70)
    stale = b.op("get", "k", 1, 80, 90)
    result = check_linearizable(b.history())
    assert result.violations[0].ops == (first, delete, stale)


def test_exhausted_budget_is_unknown_not_ok() -> None:
    history = simulate(random.Random(3), processes=4, ops_per_process=20, keys=1).history
    result = check_linearizable(history, max_steps_per_key=3)
    assert result.verdict is Verdict.UNKNOWN
    assert result.unknown_keys == ("k0",)
    assert not result.ok


def test_violation_wins_over_unknown() -> None:
    b = Builder()
    b.op("put", "a", 1, 0, 10)
    b.op("get", "a", 99, 20, 30)
    for i in range(6):
        b.op("put", "b", i, 0, 100)
    result = check_linearizable(b.history(), max_steps_per_key=5)
    assert result.unknown_keys == ("b",)
    assert result.verdict is Verdict.VIOLATION


def test_zero_budget_search_is_unknown() -> None:
    assert search_key([], 0) == (Verdict.UNKNOWN, 0)


# --- properties ------------------------------------------------------------------------

_SHAPES = {
    "rng": st.randoms(use_true_random=False),
    "processes": st.integers(1, 6),
    "ops_per_process": st.integers(1, 10),
    "keys": st.integers(1, 3),
}


@examples(fast=100, slow=300)
def test_histories_of_a_real_linearization_are_accepted(examples: int) -> None:
    @settings(max_examples=examples, deadline=None)
    @given(**_SHAPES)
    def accepted(rng: random.Random, processes: int, ops_per_process: int, keys: int) -> None:
        sim = simulate(rng, processes=processes, ops_per_process=ops_per_process, keys=keys)
        result = check_linearizable(sim.history)
        assert result.verdict is Verdict.OK, result

    accepted()


@examples(fast=60, slow=200)
def test_a_read_of_a_never_written_value_is_rejected(examples: int) -> None:
    @settings(max_examples=examples, deadline=None)
    @given(**_SHAPES, pick=st.integers(min_value=0))
    def rejected(rng: random.Random, processes: int, ops_per_process: int, keys: int,
                 pick: int) -> None:
        history = simulate(rng, processes=processes, ops_per_process=ops_per_process,
                           keys=keys).history
        reads = [i for i, op in enumerate(history.ops)
                 if op.f is F.GET and op.outcome is Outcome.OK]
        assume(reads)
        target = reads[pick % len(reads)]
        ops = list(history.ops)
        ops[target] = replace(ops[target], value=-1)
        result = check_linearizable(History(tuple(ops)))
        assert result.verdict is Verdict.VIOLATION
        assert ops[target] in result.violations[0].ops

    rejected()


# --- agreement with a brute-force reference --------------------------------------------


def _reference_linearizable(history: History) -> bool:
    """Exhaustive search straight from the definition, for tiny single-key histories."""
    ops = tuple(op for op in history if op.outcome is not Outcome.FAIL)
    ops = tuple(op for op in ops if op.f is not F.GET or op.outcome is Outcome.OK)
    failed: set[tuple[frozenset[int], int | None]] = set()

    def step(state: int | None, op_index: int) -> tuple[bool, int | None]:
        op = ops[op_index]
        if op.f is F.PUT:
            return True, op.value
        if op.f is F.GET:
            return state == op.value, state
        return state is not None, None

    def search(left: frozenset[int], state: int | None) -> bool:
        if all(ops[i].outcome is Outcome.INFO for i in left):
            return True
        if (left, state) in failed:
            return False
        for i in left:
            if any(ops[j].end_ns < ops[i].invoke_ns for j in left):
                continue
            legal, after = step(state, i)
            if legal and search(left - {i}, after):
                return True
        failed.add((left, state))
        return False

    return search(frozenset(range(len(ops))), None)


@st.composite
def _tiny_histories(draw: st.DrawFn) -> History:
    count = draw(st.integers(1, 7))
    b = Builder()
    for index in range(count):
        f = draw(st.sampled_from(["put", "get", "delete"]))
        start = draw(st.integers(0, 12))
        end = start + draw(st.integers(0, 6))
        outcome = draw(st.sampled_from(["ok", "ok", "ok", "info", "fail"]))
        value: int | None = None
        if f == "put":
            value = index
        elif f == "get" and outcome == "ok":
            value = draw(st.sampled_from([None, 99, *range(count)]))
        gave_up = None if outcome == "info" and draw(st.booleans()) else end
        b.op(f, "k", value, start, gave_up, outcome)
    return b.history()


@examples(fast=300, slow=1500)
def test_agrees_with_a_brute_force_reference(examples: int) -> None:
    @settings(max_examples=examples, deadline=None)
    @given(_tiny_histories())
    def agrees(history: History) -> None:
        expected = Verdict.OK if _reference_linearizable(history) else Verdict.VIOLATION
        assert check_linearizable(history).verdict is expected

    agrees()
