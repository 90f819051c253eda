"""The continuous self-check's vote (om/integrity/continuous.py): who counts, and
what too few answers mean. Both found by the 2-hour soak at 5371bdf."""

from __future__ import annotations

import logging

import pytest

from om.config import NodeAddress
from om.integrity.compare import ReplicaError
from om.integrity.continuous import SelfCheck
from om.integrity.verifier import Verification, VerifySpec
from om.node.integrity import check_members
from om.protocol import om_pb2


def _silent(request: om_pb2.OMRequest) -> om_pb2.OMResponse:
    raise ReplicaError("127.0.0.1:1 did not answer: [Errno 111] Connection refused")


def test_with_a_majority_silent_nothing_is_judged_and_nothing_alerts(
        caplog: pytest.LogCaptureFixture) -> None:
    marked: list[object] = []
    check = SelfCheck("om1", None, {"om2": _silent, "om3": _silent}, 3, marked.append, 1.0)
    check.verifier = object()  # type: ignore[assignment]   # never read: nothing to compare
    mine = Verification(VerifySpec(51198, 3), om_pb2.VERIFY_DONE)
    with caplog.at_level(logging.WARNING):
        result = check.check(mine)
    assert result.result == "incomplete"
    assert not marked
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "1 of 3 members answered, too few to vote" in caplog.text


def test_a_learner_counts_itself_among_the_members() -> None:
    voters = [NodeAddress(f"om{i}") for i in (1, 2, 3)]
    learner = NodeAddress("om4", learner=True)
    assert check_members([*voters, learner], "om1") == 3
    assert check_members([*voters, learner], "om4") == 4
    assert check_members(voters[:1], "om1") == 1
