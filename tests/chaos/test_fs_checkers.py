"""The file-system workload's checkers: the final tree, quota and audits; red and green."""

from __future__ import annotations

import pytest

from om.chaos.checkers import Usage, Violation
from om.chaos.fs_checkers import (
    FsEntry,
    FsObservation,
    check_fs,
    check_fs_audits,
    check_fs_tree,
    check_fs_usage,
)
from om.chaos.history import F, History, HistoryError, Op, Outcome


class Fs:
    """Hand-written file-system ops; each op its own process, times given."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(self, f: str, path: str, start: int, end: int | None, outcome: str = "ok",
           *, to: str = "", size: int = 10) -> Op:
        made = Op(process=len(self.ops), op_id=len(self.ops), f=F(f), key=path,
                  value=size if f == "create" else None, invoke_ns=start, complete_ns=end,
                  outcome=Outcome(outcome), extra={"to": to} if to else {})
        self.ops.append(made)
        return made

    def history(self) -> History:
        return History(tuple(self.ops))


def _tree(*paths: str) -> list[FsEntry]:
    """Entries from paths: a trailing '/' marks a directory; files hold 10 bytes."""
    return [FsEntry(p.rstrip("/"), p.endswith("/"), 0 if p.endswith("/") else 10, i + 1)
            for i, p in enumerate(paths)]


def _kinds(violations: list[Violation]) -> list[tuple[str, str | None]]:
    return sorted((v.kind, v.key) for v in violations)


def _exercised(b: Fs, start: int = 1000) -> None:
    """One ok op of each kind, in a corner of the tree of its own (d900 is removed)."""
    b.op("mkdir", "d900", start, start + 1)
    b.op("create", "d900/f901", start + 2, start + 3)
    b.op("rename", "d900", start + 4, start + 5, to="r902")
    b.op("rmr", "r902", start + 6, start + 7)


def test_a_tree_the_ops_explain_is_clean() -> None:
    b = Fs()
    b.op("mkdir", "d1", 0, 10)
    b.op("create", "d1/f2", 20, 30)
    b.op("rename", "d1", 40, 50, to="r3")
    b.op("mkdir", "r3/d4", 60, 70)
    b.op("create", "r3/d4/f5", 80, 90)
    b.op("rmr", "r3/d4", 100, 110)
    assert check_fs_tree(b.history(), _tree("r3/", "r3/f2")) == []


def test_a_stale_mkdir_p_may_make_a_directory_name_again() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("rename", "d1", 20, 30, to="r3")
    b.op("mkdir", "d1/d9", 40, 50)   # d1 is gone by that name: mkdir -p makes it again
    b.op("mkdir", "r3/d1", 60, 70, "info")
    assert check_fs_tree(b.history(), _tree("d1/", "d1/d9/", "r3/", "r3/d1/")) == []


def test_a_file_no_op_made_is_unexplained() -> None:
    b = Fs()
    _exercised(b)
    b.op("create", "f7", 0, 10, "fail")
    found = check_fs_tree(b.history(), _tree("f7", "f99"))
    assert _kinds(found) == [("unexplained_entry", "f7"), ("unexplained_entry", "f99")]
    assert all(v.checker == "fs_tree" for v in found)


def test_an_acknowledged_file_missing_at_the_end_is_lost() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("create", "d1/f2", 20, 30)
    found = check_fs_tree(b.history(), _tree("d1/"))
    assert _kinds(found) == [("lost_entry", "f2")]
    assert "p5#5 create d1/f2=10 ok" in found[0].detail


def test_an_rm_r_of_an_ancestor_that_may_run_later_explains_a_missing_file() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1/d2", 0, 10)
    b.op("create", "d1/d2/f3", 20, 30)
    b.op("rename", "d1", 25, 35, to="r4", outcome="info")
    b.op("rmr", "r4", 5, None, "info")   # open-ended: may have run after the create
    assert check_fs_tree(b.history(), _tree()) == []


def test_an_rm_r_done_before_the_create_began_explains_nothing() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("rmr", "d1", 11, 15)
    b.op("create", "d1/f3", 20, 30)
    found = check_fs_tree(b.history(), _tree())
    assert ("lost_entry", "f3") in _kinds(found)
    assert ("lost_entry", "d1") not in _kinds(found)   # the rm -r removed it after all


def test_an_rm_r_elsewhere_explains_nothing() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("mkdir", "d2", 0, 10)
    b.op("create", "d1/f3", 20, 30)
    b.op("rmr", "d2", 40, 50)
    assert _kinds(check_fs_tree(b.history(), _tree("d1/"))) == [("lost_entry", "f3")]


def test_a_file_under_a_directory_it_was_never_moved_to_is_misplaced() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("mkdir", "d6", 0, 10)
    b.op("create", "d1/f2", 20, 30)
    found = check_fs_tree(b.history(), _tree("d1/", "d6/", "d6/f2"))
    assert _kinds(found) == [("misplaced_entry", "d6/f2")]


def test_a_subtree_found_under_its_old_name_after_a_rename_is_misplaced() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1/d2", 0, 10)
    b.op("rename", "d1/d2", 20, 30, to="r5")
    b.op("mkdir", "d7", 0, 10)
    found = check_fs_tree(b.history(), _tree("d1/", "d7/", "d7/r5/"))
    assert _kinds(found) == [("misplaced_entry", "d7/r5")]


def test_a_file_twice_and_a_file_as_a_directory_are_caught() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("create", "d1/f2", 20, 30)
    b.op("create", "f3", 20, 30)
    found = check_fs_tree(b.history(), _tree("d1/", "d1/f2", "f2", "f3/"))
    assert _kinds(found) == [("duplicate_entry", "f2"), ("misplaced_entry", "f2"),
                             ("wrong_type", "f3")]


def test_a_listing_that_is_no_tree_and_duplicate_ids_are_caught() -> None:
    b = Fs()
    _exercised(b)
    b.op("mkdir", "d1", 0, 10)
    b.op("create", "d1/f2", 20, 30)
    entries = [FsEntry("d1/f2", False, 10, 5)]
    assert _kinds(check_fs_tree(b.history(), entries)) == [("lost_entry", "d1"),
                                                             ("not_a_tree", "d1/f2")]
    twins = [FsEntry("d1", True, 0, 5), FsEntry("d1/f2", False, 10, 5)]
    assert _kinds(check_fs_tree(b.history(), twins)) == [("duplicate_object_id", "5")]


def test_a_run_that_never_renamed_proves_nothing_about_renames() -> None:
    b = Fs()
    b.op("mkdir", "d1", 0, 10)
    b.op("create", "d1/f2", 20, 30)
    b.op("rename", "d1", 40, 50, "fail", to="r3")
    b.op("rmr", "d1", 60, None, "info")
    assert _kinds(check_fs_tree(b.history(), _tree())) == [("not_exercised", "rename"),
                                                           ("not_exercised", "rmr")]


def test_quota_must_equal_what_the_tree_lists() -> None:
    entries = tuple(_tree("d1/", "d1/f2", "f3"))
    assert check_fs_usage(FsObservation(entries, Usage(20, 3))) == []
    off = check_fs_usage(FsObservation(entries, Usage(30, 4)))
    assert _kinds(off) == [("bytes", None), ("namespace", None)]
    assert all(v.checker == "fs_quota" for v in off)
    assert _kinds(check_fs_usage(FsObservation(entries, None))) == [("not_observed", None)]
    assert check_fs_usage(FsObservation(entries, None, quota_skipped="old flow")) == []


def test_every_node_must_answer_its_audit_clean() -> None:
    clean = FsObservation((), None, {"om1": [], "om2": [], "om3": []})
    assert check_fs_audits(clean) == []
    found = check_fs_audits(FsObservation((), None, {
        "om1": [("fs_cycle", "bucket /chaos/fso", "d4 loops")], "om2": "did not answer"}))
    assert _kinds(found) == [("fs_cycle", "om1"), ("not_audited", "om2"),
                             ("too_few_audits", None)]


def test_fs_ops_without_an_observation_fail_closed() -> None:
    b = Fs()
    b.op("mkdir", "d1", 0, 10)
    assert _kinds(check_fs(b.history(), None)) == [("not_observed", None)]
    assert check_fs(History(()), None) == []


def test_history_rules_for_the_file_system_ops() -> None:
    b = Fs()
    rename = b.op("rename", "d1", 0, 10, to="d2/r3")
    assert Op.from_json(rename.to_json()) == rename
    assert rename.describe() == "p0#0 rename d1->d2/r3 ok [0, 10]"
    with pytest.raises(HistoryError, match="destination"):
        Op(0, 1, F.RENAME, "d1", None, 0, 10, Outcome.OK)
    with pytest.raises(HistoryError, match="positive size"):
        Op(0, 1, F.CREATE, "f1", None, 0, 10, Outcome.OK)
    with pytest.raises(HistoryError, match="carries no value"):
        Op(0, 1, F.MKDIR, "d1", 5, 0, 10, Outcome.OK)
