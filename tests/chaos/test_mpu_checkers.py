"""The multipart checker (om/chaos/mpu_checkers.py): a clean run passes, and each
broken promise (lost or resized complete, aborted key visible, a key nobody
completed, an upload row left open) is reported; the red cases are hand-written."""

from __future__ import annotations

from collections.abc import Mapping

from om.chaos.history import UPLOAD_ID, F, History, Op, Outcome
from om.chaos.mpu_checkers import MpuObservation, check_mpu


def _op(op_id: int, f: F, key: str, value: int | None, outcome: Outcome,
        upload_id: str = "") -> Op:
    extra = {UPLOAD_ID: upload_id} if upload_id else {}
    return Op(op_id, op_id, f, key, value, 10 * op_id, 10 * op_id + 5, outcome, extra=extra)


def _history() -> History:
    return History((
        _op(1, F.MPU_COMPLETE, "u1", 300, Outcome.OK, "up1"),
        _op(2, F.MPU_ABORT, "u2", None, Outcome.OK, "up2"),
        _op(3, F.MPU_COMPLETE, "u3", 40, Outcome.INFO, "up3"),
        _op(4, F.MPU_COMPLETE, "u4", 50, Outcome.FAIL),
        _op(5, F.MPU_COMPLETE, "u5", 60, Outcome.FAIL, "up5"),
        _op(6, F.MPU_ABORT, "u5", None, Outcome.INFO, "up5"),
    ))


def _kinds(keys: Mapping[str, int], uploads: set[tuple[str, str]] | None = None) -> list[str]:
    found = check_mpu(_history(), MpuObservation(keys, frozenset(uploads or ())))
    return sorted(v.kind for v in found)


def test_a_clean_run_passes_and_ambiguous_uploads_may_go_either_way() -> None:
    assert _kinds({"u1": 300}) == []
    assert _kinds({"u1": 300, "u3": 40}, {("u5", "up5")}) == []


def test_an_acknowledged_complete_must_leave_its_key_with_its_parts_size() -> None:
    assert _kinds({}) == ["lost_complete"]
    assert _kinds({"u1": 299}) == ["wrong_size"]
    assert _kinds({"u1": 300, "u3": 41}) == ["wrong_size"]


def test_an_aborted_or_failed_upload_leaves_no_key() -> None:
    assert _kinds({"u1": 300, "u2": 1}) == ["aborted_key_visible"]
    assert _kinds({"u1": 300, "u4": 50}) == ["failed_complete_applied"]
    assert _kinds({"u1": 300, "u5": 60}) == ["aborted_key_visible", "failed_complete_applied"]
    assert _kinds({"u1": 300, "x": 1}) == ["unexplained_key"]


def test_an_ended_upload_leaves_no_open_row() -> None:
    assert _kinds({"u1": 300}, {("u1", "up1")}) == ["upload_left_open"]
    assert _kinds({"u1": 300}, {("u2", "up2")}) == ["upload_left_open"]
    assert _kinds({"u1": 300, "u3": 40}, {("u3", "up3")}) == ["upload_left_open"]


def test_an_unread_bucket_is_a_violation_only_when_uploads_ran() -> None:
    assert [v.kind for v in check_mpu(_history(), None)] == ["not_observed"]
    assert check_mpu(History(()), None) == []
