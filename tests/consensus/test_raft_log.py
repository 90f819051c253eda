"""The SyncObj subclass: pipelined appends are not re-sent, and each command is
pickled once, with protocol 5."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.transport import TCPTransport

from om.cluster import lifecycle as om_cluster
from om.consensus.pysyncobj.raft_log import RaftLog
from om.consensus.pysyncobj.transport import GroupCommitTransport
from tests.consensus.raft_nodes import Applied as RaftApplied


class _Recorder:
    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def __call__(self, position: int, entry: bytes) -> RaftApplied:
        self.applied.append((position, entry))
        return RaftApplied(position)


def _conf() -> SyncObjConf:
    return SyncObjConf(autoTick=False, appendEntriesUseBatch=False)


@pytest.fixture
def leader() -> Iterator[tuple[RaftLog, object]]:
    """A RaftLog forced into leadership of a 3-node configuration whose peers never
    answer: every message it would get is injected by the test."""
    base = om_cluster.free_port_base(3)
    peers = [f"127.0.0.1:{base + 1}", f"127.0.0.1:{base + 2}"]
    log = RaftLog(f"127.0.0.1:{base}", peers, _conf(), _Recorder(), False,
                  GroupCommitTransport)
    log._SyncObj__onBecomeLeader()
    follower = next(iter(log.otherNodes))
    yield log, follower
    log._destroy()


def _ack(node: object, next_index: int, *, reset: bool = False,
         success: bool = True) -> dict[str, object]:
    return {"type": "next_node_idx", "next_node_idx": next_index, "reset": reset,
            "success": success}


def test_an_early_acknowledgement_does_not_rewind_next_index(
        leader: tuple[RaftLog, object]) -> None:
    log, follower = leader
    next_index = log._SyncObj__raftNextIndex
    next_index[follower] = 12          # entries up to 11 are on their way
    log._SyncObj__onMessageReceived(follower, _ack(follower, 5))  # 4 acknowledged
    assert log._SyncObj__raftMatchIndex[follower] == 4
    assert next_index[follower] == 12, "entries in flight would be sent again"


def test_a_reset_still_rewinds_next_index(leader: tuple[RaftLog, object]) -> None:
    log, follower = leader
    next_index = log._SyncObj__raftNextIndex
    next_index[follower] = 12
    log._SyncObj__onMessageReceived(follower, _ack(follower, 3, reset=True, success=False))
    assert next_index[follower] == 3, "a follower missing entries must get them again"


def test_pysyncobj_itself_rewinds_which_is_what_the_override_repairs(tmp_path: Path) -> None:
    """The red case: stock SyncObj moves nextIndex back on a plain success."""
    base = om_cluster.free_port_base(3)
    stock = SyncObj(f"127.0.0.1:{base}", [f"127.0.0.1:{base + 1}", f"127.0.0.1:{base + 2}"],
                    _conf())
    try:
        stock._SyncObj__onBecomeLeader()
        follower = next(iter(stock.otherNodes))
        stock._SyncObj__raftNextIndex[follower] = 12
        stock._SyncObj__onMessageReceived(follower, _ack(follower, 5))
        assert stock._SyncObj__raftNextIndex[follower] == 5
    finally:
        stock._destroy()


def test_submit_queues_one_protocol_5_pickle_of_the_persist_call(
        leader: tuple[RaftLog, object]) -> None:
    log, _ = leader
    queued: list[tuple[bytes, object]] = []
    log._applyCommand = lambda command, callback, kind: queued.append((command, kind))
    entry = bytes(range(256)) * 4
    log.submit(entry, lambda result, reason: None)
    ((command, kind),) = queued
    assert kind == 0
    assert command[:2] == b"\x80\x05", "pickle protocol 5"
    assert len(command) < len(entry) + 64, "bytes are not inflated"
    _, (argument,) = pickle.loads(command)
    assert argument == entry
    log._SyncObj__doApplyCommand(b"\x00" + command)  # how pysyncobj applies it
    assert log._apply_entry.applied == [(log.raftLastApplied + 1, entry)]  # type: ignore[attr-defined]


def test_a_stale_reset_below_what_the_follower_acknowledged_is_ignored(
        leader: tuple[RaftLog, object]) -> None:
    """A reset answering an append sent before an earlier reset was repaired asks for
    entries the follower has since acknowledged: acting on it would resend them all
    (and pysyncobj's follower would drop and re-journal them)."""
    log, follower = leader
    log._SyncObj__raftNextIndex[follower] = 30
    log._SyncObj__onMessageReceived(follower, _ack(follower, 21))        # acknowledged 20
    assert log._SyncObj__raftMatchIndex[follower] == 20
    log._SyncObj__onMessageReceived(follower, _ack(follower, 9, reset=True, success=False))
    assert log._SyncObj__raftNextIndex[follower] == 30, "a stale reset rewound nextIndex"
    log._SyncObj__onMessageReceived(follower, _ack(follower, 25, reset=True, success=False))
    assert log._SyncObj__raftNextIndex[follower] == 25, "a real reset still rewinds"


def test_a_follower_that_reconnects_is_trusted_again_when_it_asks_to_go_back(
        leader: tuple[RaftLog, object]) -> None:
    """A follower may come back from a disconnection with less than it acknowledged
    (restarted with its data wiped): its resets must then rewind nextIndex."""
    log, follower = leader
    log._SyncObj__raftNextIndex[follower] = 30
    log._SyncObj__onMessageReceived(follower, _ack(follower, 21))
    log.om_peer_disconnected(follower)
    log._SyncObj__onMessageReceived(follower, _ack(follower, 2, reset=True, success=False))
    assert log._SyncObj__raftNextIndex[follower] == 2


def test_a_reset_answering_an_append_sent_before_the_last_reset_is_ignored(
        leader: tuple[RaftLog, object]) -> None:
    log, follower = leader
    next_index = log._SyncObj__raftNextIndex
    next_index[follower] = 40                            # appends up to 39 on their way
    first = {**_ack(follower, 20, reset=True, success=False), "for_prev": 30}
    log._SyncObj__onMessageReceived(follower, first)     # acted on: probe from 20
    assert next_index[follower] == 20
    next_index[follower] = 26                            # the probe (prev 19) and more went
    late = {**_ack(follower, 20, reset=True, success=False), "for_prev": 35}
    log._SyncObj__onMessageReceived(follower, late)      # answers an append sent before
    assert next_index[follower] == 26, "a stale reset sent everything again"
    probe = {**_ack(follower, 12, reset=True, success=False), "for_prev": 19}
    log._SyncObj__onMessageReceived(follower, probe)     # the probe's own answer counts
    assert next_index[follower] == 12


def test_a_follower_cut_off_while_the_leader_sent_on_past_its_probe_is_repaired(
        leader: tuple[RaftLog, object]) -> None:
    """pysyncobj moves nextIndex on as it sends, answered or not: while the follower was
    cut off after a reset, the leader's nextIndex ran far past the probe, and every reset
    the follower sends once back answers the latest append. That reset counts, or the
    follower is never repaired (om/sim seed 1458: stuck 430 entries behind for good)."""
    log, follower = leader
    next_index = log._SyncObj__raftNextIndex
    next_index[follower] = 40
    first = {**_ack(follower, 20, reset=True, success=False), "for_prev": 39}
    log._SyncObj__onMessageReceived(follower, first)     # acted on: probe from 20
    assert next_index[follower] == 20
    next_index[follower] = 90                            # sent on, to a follower cut off
    back = {**_ack(follower, 20, reset=True, success=False), "for_prev": 89}
    log._SyncObj__onMessageReceived(follower, back)      # answers the latest append
    assert next_index[follower] == 20, "the follower back from a cut is never repaired"


def test_an_answer_says_which_append_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    base = om_cluster.free_port_base(3)
    sent: list[dict[str, object]] = []

    def record(_self: object, _node: object, message: dict[str, object]) -> bool:
        sent.append(message)
        return True

    monkeypatch.setattr(TCPTransport, "send", record)
    follower = RaftLog(f"127.0.0.1:{base}", [f"127.0.0.1:{base + 1}"], _conf(),
                       _Recorder(), False, GroupCommitTransport)
    try:
        leader_node = next(iter(follower.otherNodes))
        follower._SyncObj__onMessageReceived(leader_node, {
            "type": "append_entries", "term": 1, "commit_index": 1, "prevLogIdx": 1,
            "prevLogTerm": 0, "entries": [(b"\x01", 2, 1)]})
        assert sent
        assert sent[-1]["for_prev"] == 1
        assert sent[-1]["success"] is True
    finally:
        follower._destroy()
