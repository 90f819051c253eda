"""The snapshot checker (om/chaos/snap_checkers.py): acknowledged snapshots are listed,
deleted ones are not, and a read through a snapshot sees the register as it was when
the snapshot was taken; each red case is a hand-written history that breaks one rule."""

from __future__ import annotations

from om.chaos.history import SNAPSHOT, F, History, Op, Outcome
from om.chaos.snap_checkers import check_snapshots

OK, INFO, FAIL = Outcome.OK, Outcome.INFO, Outcome.FAIL


class _Ops:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def add(self, f: F, key: str, value: int | None, start: int, end: int,
            outcome: Outcome = OK, snapshot: str = "") -> None:
        extra = {SNAPSHOT: snapshot} if snapshot else {}
        n = len(self.ops)
        self.ops.append(Op(n, n, f, key, value, start, end, outcome, extra=extra))

    def history(self) -> History:
        return History(tuple(self.ops))


def _base() -> _Ops:
    """k000 = 1 at [0, 10], = 2 at [20, 30]; snapshot s1 taken in [40, 50]."""
    ops = _Ops()
    ops.add(F.PUT, "k000", 1, 0, 10)
    ops.add(F.PUT, "k000", 2, 20, 30)
    ops.add(F.SNAP_CREATE, "s1", None, 40, 50)
    return ops


def _kinds(ops: _Ops, listed: list[str] | None = None) -> list[str]:
    found = check_snapshots(ops.history(), ["s1"] if listed is None else listed)
    return sorted(v.kind for v in found)


def test_a_read_of_the_value_current_at_the_snapshot_passes() -> None:
    ops = _base()
    ops.add(F.PUT, "k000", 3, 60, 70)
    ops.add(F.SNAP_READ, "k000", 2, 80, 90, snapshot="s1")
    ops.add(F.SNAP_READ, "k001", None, 80, 90, snapshot="s1")
    assert _kinds(ops) == []


def test_a_stale_or_future_or_unknown_value_is_a_violation() -> None:
    for value, kind in ((1, "stale_value"), (3, "future_value"), (9, "unknown_value")):
        ops = _base()
        ops.add(F.PUT, "k000", 3, 60, 70)
        ops.add(F.SNAP_READ, "k000", value, 80, 90, snapshot="s1")
        assert _kinds(ops) == [kind], value


def test_absence_is_stale_unless_a_delete_may_explain_it() -> None:
    ops = _base()
    ops.add(F.SNAP_READ, "k000", None, 80, 90, snapshot="s1")
    assert _kinds(ops) == ["stale_absent"]
    ops = _base()
    ops.add(F.DELETE, "k000", None, 35, 45, INFO)
    ops.add(F.SNAP_READ, "k000", None, 80, 90, snapshot="s1")
    assert _kinds(ops) == []


def test_the_list_shows_acknowledged_snapshots_and_not_deleted_ones() -> None:
    ops = _base()
    assert _kinds(ops, []) == ["snapshot_missing"]
    assert _kinds(ops, ["s1", "s9"]) == ["unexplained_snapshot"]
    ops.add(F.SNAP_DELETE, "s1", None, 60, 70)
    assert _kinds(ops, []) == []
    assert _kinds(ops, ["s1"]) == ["deleted_snapshot_listed"]
    ops = _base()
    ops.add(F.SNAP_DELETE, "s1", None, 60, 70, FAIL)
    assert _kinds(ops, []) == ["snapshot_missing"]
    assert check_snapshots(ops.history(), None)[0].kind == "not_observed"
