"""The checkers: lost writes, exactly-once bounds, replica digests, object ids, run_all."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om.chaos.checkers import (
    IdAck,
    Usage,
    Violation,
    check_exactly_once,
    check_increasing,
    check_linearizability,
    check_no_lost_writes,
    check_replicas_identical,
    check_unique_object_ids,
    id_acks_from_history,
    run_all,
)
from om.chaos.history import F, History, Op, Outcome

from .chaos_builders import Builder, simulate


def _kinds(violations: list[Violation]) -> list[tuple[str, str | None]]:
    return [(v.kind, v.key) for v in violations]


# --- lost writes -----------------------------------------------------------------------


def test_acknowledged_write_present_at_the_end_is_clean() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    assert check_no_lost_writes(b.history(), {"k": 1}) == []


def test_acknowledged_write_missing_at_the_end_is_lost() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    violations = check_no_lost_writes(b.history(), {"k": None})
    assert _kinds(violations) == [("lost_write", "k")]
    assert violations[0].checker == "lost_writes"
    assert "p0#0 put k=1 ok" in violations[0].detail


def test_write_overwritten_later_is_not_lost_but_the_later_one_must_survive() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, 30)
    assert check_no_lost_writes(b.history(), {"k": 2}) == []
    assert _kinds(check_no_lost_writes(b.history(), {"k": 1})) == [("lost_write", "k")]


@pytest.mark.parametrize("final", [1, 2])
def test_concurrent_writes_may_end_in_either_order(final: int) -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 100)
    b.op("put", "k", 2, 10, 20)
    assert check_no_lost_writes(b.history(), {"k": final}) == []


def test_info_ops_may_explain_the_final_state() -> None:
    deleted = Builder()
    deleted.op("put", "k", 1, 0, 10)
    deleted.op("delete", "k", None, 5, None, "info")
    assert check_no_lost_writes(deleted.history(), {"k": None}) == []
    overwritten = Builder()
    overwritten.op("put", "k", 1, 20, 30)
    overwritten.op("put", "k", 2, 0, 5, "info")  # gave up early, applied late
    assert check_no_lost_writes(overwritten.history(), {"k": 2}) == []


@pytest.mark.parametrize(
    ("start", "end", "outcome"),
    [(0, 10, "ok"), (30, 40, "fail")],
    ids=["delete-completed-before-the-put", "failed-delete"],
)
def test_delete_that_cannot_follow_the_put_does_not_explain_absence(
    start: int, end: int, outcome: str
) -> None:
    b = Builder()
    b.op("delete", "k", None, start, end, outcome)
    b.op("put", "k", 1, 20, 25)
    assert _kinds(check_no_lost_writes(b.history(), {"k": None})) == [("lost_write", "k")]


def test_final_value_no_put_wrote_is_unexplained() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "k", 2, 20, 30, "fail")
    never = check_no_lost_writes(b.history(), {"k": 99, "fresh": 5})
    assert _kinds(never) == [
        ("unexplained_value", "fresh"),
        ("unexplained_value", "k"),
        ("lost_write", "k"),
    ]
    failed = check_no_lost_writes(b.history(), {"k": 2})
    assert failed[0].detail == "final value 2: only a failed put wrote it"


def test_key_with_acknowledged_write_must_be_read_at_the_end() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("put", "maybe", 2, 0, 10, "info")
    assert _kinds(check_no_lost_writes(b.history(), {})) == [("missing_final_read", "k")]


@settings(max_examples=150, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 6), st.integers(1, 10))
def test_final_state_of_a_real_run_loses_nothing(
    rng: random.Random, processes: int, ops_per_process: int
) -> None:
    sim = simulate(rng, processes=processes, ops_per_process=ops_per_process, keys=3)
    assert check_no_lost_writes(sim.history, sim.final_state) == []


# --- exactly once ----------------------------------------------------------------------


def _adds() -> History:
    b = Builder()
    b.op("add", "v/b1", 10, 0, 10, retries=2)
    b.op("add", "v/b1", 20, 0, 10)
    b.op("add", "v/b1", 5, 0, None, "info")
    b.op("add", "v/b1", 7, 0, 10, "fail", retries=1)
    b.op("add", "v/b2", 3, 0, 10)
    return b.history()


@pytest.mark.parametrize("applied_info", [False, True])
def test_usage_within_bounds_is_clean(applied_info: bool) -> None:
    extra = 1 if applied_info else 0
    observed = {"v/b1": Usage(30 + 5 * extra, 2 + extra), "v/b2": Usage(3, 1)}
    assert check_exactly_once(_adds(), observed) == []


def test_retry_applied_twice_is_a_duplicate() -> None:
    # The retried add of 10 applied twice, as when the retry cache is disabled.
    observed = {"v/b1": Usage(40, 3), "v/b2": Usage(3, 1)}
    violations = check_exactly_once(_adds(), observed)
    assert _kinds(violations) == [("duplicate", "v/b1")]
    assert violations[0].detail == "usedBytes=40 outside [30, 35] (2 ok, 1 info, 1 fail adds)"


def test_acknowledged_add_missing_is_lost() -> None:
    observed = {"v/b1": Usage(30, 2), "v/b2": Usage(0, 0)}
    assert _kinds(check_exactly_once(_adds(), observed)) == [
        ("lost", "v/b2"),
        ("lost", "v/b2"),
    ]


def test_namespace_is_bounded_separately() -> None:
    observed = {"v/b1": Usage(30, 4), "v/b2": Usage(3, 1)}
    violations = check_exactly_once(_adds(), observed)
    assert _kinds(violations) == [("duplicate", "v/b1")]
    assert violations[0].detail.startswith("usedNamespace=4 outside [2, 3]")


def test_run_without_any_retry_fails_the_evidence_gate() -> None:
    b = Builder()
    b.op("add", "v/b1", 10, 0, 10)
    b.op("put", "k", 1, 0, 10, retries=3)  # a put's retry does not exercise adds
    violations = check_exactly_once(b.history(), {"v/b1": Usage(10, 1)})
    assert _kinds(violations) == [("no_retry_exercised", None)]


def test_buckets_must_be_observed_and_unexpected_usage_is_a_duplicate() -> None:
    violations = check_exactly_once(_adds(), {"v/b1": Usage(30, 2), "v/other": Usage(1, 0)})
    assert _kinds(violations) == [
        ("missing_observation", "v/b2"),
        ("duplicate", "v/other"),
    ]


# --- replicas --------------------------------------------------------------------------


def test_identical_replicas_are_clean() -> None:
    digests = {node: {"keyTable": "aa", "bucketTable": "bb"} for node in ("om1", "om2", "om3")}
    assert check_replicas_identical(digests) == []


def test_differing_and_missing_tables_are_reported() -> None:
    digests = {
        "om1": {"keyTable": "aa", "bucketTable": "bb", "retryCache": "cc"},
        "om2": {"keyTable": "aa", "bucketTable": "XX", "retryCache": "cc"},
        "om3": {"keyTable": "aa", "bucketTable": "bb"},
    }
    violations = check_replicas_identical(digests)
    assert _kinds(violations) == [
        ("digest_mismatch", "bucketTable"),
        ("missing_table", "retryCache"),
    ]
    assert violations[0].detail == "table 'bucketTable' differs: om1=bb, om2=XX, om3=bb"
    assert violations[1].detail == "table 'retryCache' missing on om3"


def test_replica_check_needs_two_nodes_and_some_tables() -> None:
    assert _kinds(check_replicas_identical({"om1": {"keyTable": "aa"}})) == [
        ("too_few_replicas", None)
    ]
    assert _kinds(check_replicas_identical({"om1": {}, "om2": {}})) == [("no_tables", None)]


# --- object ids ------------------------------------------------------------------------


def test_unique_object_ids_are_clean() -> None:
    assert check_unique_object_ids([("v", 1), ("v/b", 2), ("v/b/k", 3)]) == []


def test_duplicate_object_id_is_reported() -> None:
    violations = check_unique_object_ids([("v/b/k1", 7), ("v/b", 2), ("v/b/k2", 7)])
    assert _kinds(violations) == [("duplicate_object_id", "7")]
    assert violations[0].detail == "object id 7 held by v/b/k1, v/b/k2"


def test_ids_increase_in_real_time_order() -> None:
    acks = [IdAck("a", 5, 0, 10), IdAck("b", 9, 20, 30), IdAck("c", 7, 15, 40)]
    assert check_increasing(acks) == []  # b and c overlap, so either order is fine


def test_id_below_an_earlier_acknowledged_id_is_reported() -> None:
    acks = [IdAck("a", 5, 0, 10), IdAck("b", 9, 20, 30), IdAck("c", 7, 35, 40)]
    violations = check_increasing(acks)
    assert _kinds(violations) == [("id_not_increasing", "c")]
    assert violations[0].detail == "c got id 7 at 35, after b was acknowledged id 9 at 30"


def test_id_acks_come_from_ok_writes_with_an_object_id() -> None:
    ops = (
        Op(0, 0, F.PUT, "k", 1, 0, 10, Outcome.OK, extra={"object_id": 100}),
        Op(1, 1, F.ADD, "v/b", 4, 20, 30, Outcome.OK, extra={"object_id": 50}),
        Op(2, 2, F.PUT, "k", 2, 20, None, Outcome.INFO, extra={"object_id": 1}),
        Op(3, 3, F.PUT, "k", 3, 40, 50, Outcome.OK),
    )
    acks = id_acks_from_history(History(ops))
    assert acks == [IdAck("put k #0", 100, 0, 10), IdAck("add v/b #1", 50, 20, 30)]
    assert _kinds(check_increasing(acks)) == [("id_not_increasing", "add v/b #1")]


# --- run_all ---------------------------------------------------------------------------


def test_run_all_is_clean_on_a_clean_run() -> None:
    sim = simulate(random.Random(7), processes=4, ops_per_process=30, keys=5)
    adds = Builder(list(sim.history.ops))
    adds.op("add", "v/b", 10, 0, 10, process=100, retries=1)
    history = adds.history()
    violations = run_all(
        history,
        final_state=sim.final_state,
        observed_usage={"v/b": Usage(10, 1)},
        digests={"om1": {"t": "x"}, "om2": {"t": "x"}},
        object_ids=[("v/b", 1), ("v/b/k", 2)],
    )
    assert violations == []
    assert check_linearizability(history) == []


def test_run_all_fails_closed_and_collects_every_checker() -> None:
    b = Builder()
    b.op("put", "k", 1, 0, 10)
    b.op("get", "k", 2, 20, 30)
    b.op("add", "v/b", 10, 0, 10)
    violations = run_all(
        b.history(),
        digests={"om1": {"t": "x"}, "om2": {"t": "y"}},
        object_ids=[("a", 1), ("b", 1)],
    )
    assert [(v.checker, v.kind) for v in violations] == [
        ("linearizability", "nonlinearizable"),
        ("lost_writes", "not_observed"),
        ("exactly_once", "not_observed"),
        ("replicas", "digest_mismatch"),
        ("object_ids", "duplicate_object_id"),
    ]


def test_unknown_linearizability_is_a_violation() -> None:
    history = simulate(random.Random(3), processes=4, ops_per_process=20, keys=1).history
    violations = check_linearizability(history, max_steps_per_key=3)
    assert _kinds(violations) == [("unknown", "k0")]
