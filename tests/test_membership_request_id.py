"""ChangeMembership is idempotent by request id (``om/node/membership.py``): a resend of
the same id answers the recorded outcome of the first, committed or refused, and never
starts a second change; a leader with no record answers a change already in effect as
OK. The node-level rules against a fake Raft; ``tests/test_membership_cluster.py`` runs
the CLI's resend on a real ring."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from om import config as om_config
from om.config import ServerConfig
from om.consensus.port import Role
from om.node import membership
from om.protocol import om_pb2

ADDRESS = "127.0.0.1:9875"


class FakeRaft:
    """Answers each change once ``release`` is set, with the next of ``outcomes``."""

    def __init__(self, *outcomes: tuple[str, str]) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, str]] = []
        self.release = asyncio.Event()

    async def change_membership(self, op: str, address: str,
                                timeout_s: float = 30.0) -> tuple[str, str]:
        self.calls.append((op, address))
        await self.release.wait()
        return self.outcomes.pop(0)

    def members(self) -> list[str]:
        return ["127.0.0.1:9872", ADDRESS]

    def role(self) -> Role:
        return Role(is_leader=True, ready=True, leader_id="om1", leader_address="x",
                    term=3, commit_index=10)


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return om_config.load(None, data_dir=tmp_path / "data")


def _request(request_id: str,
             op: om_pb2.ChangeMembershipRequest.Op.ValueType = om_pb2.ChangeMembershipRequest.ADD
             ) -> om_pb2.OMRequest:
    return om_pb2.OMRequest(
        cmd_type=om_pb2.ChangeMembership, client_id="c", call_id=1,
        change_membership=om_pb2.ChangeMembershipRequest(
            op=op, node_id="om4", raft_address=ADDRESS, request_id=request_id))


async def test_a_timed_out_change_is_answered_with_its_outcome_when_asked_again(
        config: ServerConfig) -> None:
    raft, ledger = FakeRaft(("OK", "committed")), membership.Ledger()
    first = await membership.answer(_request("r1"), config, raft, ledger, wait_s=0.05)
    assert om_pb2.Status.Name(first.status) == "TIMEOUT"
    assert "still pending" in first.message
    assert "'r1'" in first.message
    raft.release.set()
    again = await membership.answer(_request("r1"), config, raft, ledger, wait_s=5)
    assert om_pb2.Status.Name(again.status) == "OK"
    assert again.change_membership.replayed
    assert raft.calls == [("add", ADDRESS)], "the resend started no second change"
    third = await membership.answer(_request("r1"), config, raft, ledger, wait_s=5)
    assert third.status == om_pb2.OK
    assert raft.calls == [("add", ADDRESS)]


async def test_a_refusal_is_recorded_too(config: ServerConfig) -> None:
    raft, ledger = FakeRaft(("REFUSED", "need 3 up")), membership.Ledger()
    raft.release.set()
    first = await membership.answer(_request("r2"), config, raft, ledger)
    again = await membership.answer(_request("r2"), config, raft, ledger)
    for response in (first, again):
        assert om_pb2.Status.Name(response.status) == "MEMBERSHIP_REFUSED"
        assert "need 3 up" in response.message
    assert "recorded outcome" in again.message
    assert len(raft.calls) == 1


async def test_an_id_reused_for_another_change_is_invalid(config: ServerConfig) -> None:
    raft, ledger = FakeRaft(("OK", "committed")), membership.Ledger()
    raft.release.set()
    await membership.answer(_request("r3"), config, raft, ledger)
    other = await membership.answer(
        _request("r3", om_pb2.ChangeMembershipRequest.REMOVE), config, raft, ledger)
    assert om_pb2.Status.Name(other.status) == "INVALID_REQUEST"


async def test_a_leader_without_a_record_answers_a_change_in_effect_as_done(
        config: ServerConfig) -> None:
    """Leadership moved after the first request committed: the new leader's Raft says
    the address is a voter already; with a request id that is the outcome, OK."""
    raft, ledger = FakeRaft(("IN_EFFECT", f"{ADDRESS} is a voter already"),
                            ("IN_EFFECT", f"{ADDRESS} is a voter already")), membership.Ledger()
    raft.release.set()
    answered = await membership.answer(_request("r4"), config, raft, ledger)
    assert answered.status == om_pb2.OK
    assert answered.change_membership.replayed
    assert "already in effect" in answered.message
    old_client = await membership.answer(_request(""), config, raft, ledger)
    assert om_pb2.Status.Name(old_client.status) == "MEMBERSHIP_REFUSED"


async def test_raft_timeouts_are_not_recorded(config: ServerConfig) -> None:
    raft = FakeRaft(("TIMEOUT", "Raft did not answer"), ("OK", "committed"))
    ledger = membership.Ledger()
    raft.release.set()
    first = await membership.answer(_request("r5"), config, raft, ledger)
    assert om_pb2.Status.Name(first.status) == "TIMEOUT"
    await asyncio.sleep(0)
    again = await membership.answer(_request("r5"), config, raft, ledger)
    assert again.status == om_pb2.OK
    assert len(raft.calls) == 2, "Raft was asked again"
