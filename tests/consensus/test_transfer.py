"""Aimed leadership transfer (``transfer.py``) on real pysyncobj nodes ticked by hand."""

from __future__ import annotations

from typing import Any

import pytest
from pysyncobj import FAIL_REASON

from om.consensus.pysyncobj import transfer
from tests.consensus.test_elections import Scenario, scenario

__all__ = ["scenario"]  # the fixture, used by name below


def _started(scenario: Scenario) -> str:
    scenario.start()
    scenario.run_until_leader(10)
    scenario.run(0.3)
    leader = scenario.leader()
    assert leader is not None
    return leader


def _ask(scenario: Scenario, leader: str, target: str | None) -> list[tuple[str, str, str]]:
    replies: list[tuple[str, str, str]] = []
    address = scenario.addresses[target] if target else None
    transfers = scenario.nodes[leader].om_transfers
    transfers.request(address, lambda code, chosen, text: replies.append((code, chosen, text)))
    transfers.tick()   # as the next tick would: entries submitted from now on are held
    return replies


def _results(scenario: Scenario, leader: str) -> list[int]:
    reasons: list[int] = []
    scenario.nodes[leader].submit(b"entry", lambda _result, reason: reasons.append(reason))
    return reasons


def test_the_named_follower_becomes_leader(scenario: Scenario) -> None:
    """pysyncobj alone would pick the highest (match, id); the lower id is aimed at."""
    leader = _started(scenario)
    target = min((n for n in scenario.nodes if n != leader),
                 key=lambda n: scenario.addresses[n])
    term = scenario.nodes[leader].raftCurrentTerm
    replies = _ask(scenario, leader, target)
    held = _results(scenario, leader)
    scenario.run_until_leader(5, not_=leader)
    assert scenario.leader() == target
    assert scenario.nodes[target].raftCurrentTerm == term + 1
    assert replies
    assert replies[0][:2] == ("OK", scenario.addresses[target])
    scenario.run(0.1)
    assert held == [FAIL_REASON.NOT_LEADER], "held, never appended: the client retries"


def test_a_lagging_target_is_refused_and_held_entries_go_through(
        scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "CATCH_UP_S", 0.5)
    leader = _started(scenario)
    target = next(n for n in scenario.nodes if n != leader)
    scenario.paused.add(target)              # connected, but it acknowledges nothing
    _results(scenario, leader)
    scenario.run(0.1)
    replies = _ask(scenario, leader, target)
    held = _results(scenario, leader)
    pending = scenario.nodes[leader].om_transfers.pending
    assert pending is not None
    assert len(pending.held) == 1
    scenario.run(0.8)
    assert [r[0] for r in replies] == ["NOT_UP_TO_DATE"]
    assert scenario.leader() == leader
    assert held == [FAIL_REASON.SUCCESS]
    assert scenario.nodes[leader].om_transfers.pending is None


@pytest.mark.parametrize("whom", ["self", "stranger"])
def test_refusals(scenario: Scenario, whom: str) -> None:
    leader = _started(scenario)
    nodes: Any = scenario.nodes
    term = nodes[leader].raftCurrentTerm
    if whom == "self":
        replies = _ask(scenario, leader, leader)
    else:
        scenario.addresses["n9"] = "127.0.0.1:1"
        replies = _ask(scenario, leader, "n9")
    scenario.run(0.2)
    assert [r[0] for r in replies] == ["REFUSED"]
    assert scenario.leader() == leader
    assert nodes[leader].raftCurrentTerm == term


def test_an_unreachable_target_is_refused_after_the_window_without_holding_writes(
        scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "CATCH_UP_S", 0.5)
    leader = _started(scenario)
    term = scenario.nodes[leader].raftCurrentTerm
    target = next(n for n in scenario.nodes if n != leader)
    scenario.kill(target)
    scenario.run(0.3)
    replies = _ask(scenario, leader, target)
    written = _results(scenario, leader)
    scenario.run(0.2)
    assert replies == [], "still waiting for the link"
    assert written == [FAIL_REASON.SUCCESS], "writes flow meanwhile"
    scenario.run(0.5)
    assert [r[0] for r in replies] == ["REFUSED"]
    assert "not connected" in replies[0][2]
    assert scenario.leader() == leader
    assert scenario.nodes[leader].raftCurrentTerm == term


def test_a_target_that_connects_within_the_window_takes_over(scenario: Scenario) -> None:
    """Just after an election the leader's link to a follower may not be up yet."""
    leader = _started(scenario)
    target = next(n for n in scenario.nodes if n != leader)
    scenario.kill(target)
    scenario.run(0.3)
    replies = _ask(scenario, leader, target)
    scenario.boot(target)
    scenario.run_until_leader(5, not_=leader)
    assert scenario.leader() == target
    assert [r[0] for r in replies] == ["OK"]
