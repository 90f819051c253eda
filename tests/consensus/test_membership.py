"""Learners and membership changes (``membership.py``) on real pysyncobj nodes ticked by
hand: a learner follows the log and never campaigns; voters are added and removed
one at a time; every unsafe change is refused and changes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.node import TCPNode

from om.cluster import lifecycle as om_cluster
from om.consensus.pysyncobj.membership import ADD, REMOVE, quorum
from om.consensus.pysyncobj.raft_log import DialNode, RaftLog
from om.consensus.pysyncobj.transport import GroupCommitTransport
from tests.consensus.raft_nodes import Applied
from tests.consensus.test_elections import Scenario

NEW = "n4"


@pytest.fixture
def ring() -> Iterator[Scenario]:
    made = Scenario(min_timeout_s=0.3)
    made.start()
    made.run_until_leader(10)
    _run_until_the_term_began(made, 10)
    yield made
    made.close()


def _run_until_the_term_began(ring: Scenario, timeout_s: float) -> None:
    """Until the leader applied its term's first entry (pysyncobj's no-op): before that,
    Raft refuses a membership change (REQUEST_DENIED), and on a busy machine that took
    longer than the 0.3 s this once waited."""
    deadline = time.monotonic() + timeout_s
    while (leader := ring.nodes[_leader(ring)]).raftLastApplied < leader._SyncObj__noopIDx:
        assert time.monotonic() < deadline, "the leader's first entry was not applied"
        ring.run(0.01)


def _leader(ring: Scenario) -> str:
    leader = ring.leader()
    assert leader is not None
    return leader


def _change(ring: Scenario, op: str, name: str, seconds: float = 1.5) -> list[tuple[str, str]]:
    replies: list[tuple[str, str]] = []
    node = ring.nodes[_leader(ring)]
    node.om_membership.request(op, ring.addresses[name], lambda *r: replies.append(r))
    ring.run(seconds)
    return replies


def _write(ring: Scenario, entry: bytes) -> None:
    ring.nodes[_leader(ring)].submit(entry, lambda _result, _reason: None)


def _voters(ring: Scenario) -> set[str]:
    return set(ring.nodes[_leader(ring)].om_membership.members())


def test_quorum() -> None:
    assert [quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_a_learner_follows_the_log_and_never_campaigns(ring: Scenario) -> None:
    leader = _leader(ring)
    term = ring.nodes[leader].raftCurrentTerm
    _write(ring, b"before")
    ring.run(0.2)
    ring.addresses[NEW] = "127.0.0.1:1"        # a learner binds no port
    ring.learners.add(NEW)
    ring.boot(NEW)
    _write(ring, b"after")
    ring.run(0.8)
    entries = [entry for _, entry in ring.applied.get(NEW, [])]
    assert b"before" in entries
    assert b"after" in entries
    ring.kill(leader)                           # the learner never stands for election
    ring.run_until_leader(5, not_=leader)
    assert ring.leader() != NEW
    assert ring.nodes[_leader(ring)].raftCurrentTerm == term + 1
    assert ring.addresses[NEW] not in _voters(ring)


def test_a_voter_is_added_and_receives_the_log(ring: Scenario) -> None:
    _write(ring, b"old")
    ring.run(0.2)
    ring.addresses[NEW] = ring.addresses["n1"].rsplit(":", 1)[0] + ":" + str(
        int(ring.addresses["n3"].rsplit(":", 1)[1]) + 1)
    ring.boot(NEW)
    assert _change(ring, ADD, NEW) == [("OK", "committed")]
    assert ring.addresses[NEW] in _voters(ring)
    assert len(_voters(ring)) == 4
    _write(ring, b"new")
    ring.run(0.5)
    entries = [entry for _, entry in ring.applied.get(NEW, [])]
    assert {b"old", b"new"} <= set(entries), "the log before and after its addition"


def test_a_follower_is_removed(ring: Scenario) -> None:
    leader = _leader(ring)
    follower = next(n for n in ring.nodes if n != leader)
    assert _change(ring, REMOVE, follower) == [("OK", "committed")]
    assert ring.addresses[follower] not in _voters(ring)
    assert len(_voters(ring)) == 2


@pytest.mark.parametrize("case", ["remove_leader", "add_a_voter", "remove_unknown",
                                  "remove_past_quorum", "add_past_quorum"])
def test_unsafe_changes_are_refused_and_change_nothing(ring: Scenario, case: str) -> None:
    leader = _leader(ring)
    followers = sorted(n for n in ring.nodes if n != leader)
    before = _voters(ring)
    if case == "remove_leader":
        replies, reason = _change(ring, REMOVE, leader), "transfer leadership away"
    elif case == "add_a_voter":
        replies, reason = _change(ring, ADD, followers[0]), "a voter already"
    elif case == "remove_unknown":
        ring.addresses[NEW] = "127.0.0.1:2"
        replies, reason = _change(ring, REMOVE, NEW), "not a voter"
    elif case == "remove_past_quorum":          # 3 -> 2 with one of them down
        ring.kill(followers[0])
        ring.run(0.5)
        replies, reason = _change(ring, REMOVE, followers[1], 0.2), "need 2 up"
    else:                                       # 3 -> 4 with one down and the new one down
        ring.kill(followers[0])
        ring.run(0.5)
        ring.addresses[NEW] = "127.0.0.1:3"
        replies, reason = _change(ring, ADD, NEW, 0.2), "need 3 up"
    assert len(replies) == 1
    in_effect = case in ("add_a_voter", "remove_unknown")   # a resend's answer: OK
    assert replies[0][0] == ("IN_EFFECT" if in_effect else "REFUSED")
    assert reason in replies[0][1]
    assert _voters(ring) == before
    assert ring.leader() == leader


def test_a_follower_answers_not_leader(ring: Scenario) -> None:
    follower = next(n for n in ring.nodes if n != _leader(ring))
    replies: list[tuple[str, str]] = []
    ring.nodes[follower].om_membership.request(REMOVE, ring.addresses[follower],
                                               lambda *r: replies.append(r))
    ring.run(0.2)
    assert replies == [("NOT_LEADER", "not the leader")]


def test_a_snapshots_ring_keeps_the_links_this_node_dials() -> None:
    """With dynamic membership pysyncobj adopts the ring a snapshot carries (its maker's
    node objects); a peer this node reaches through a link proxy stays dialled there."""
    base = om_cluster.free_port_base(3)
    own, linked, plain = (f"127.0.0.1:{base + 10 + i}" for i in range(3))
    conf = SyncObjConf(autoTick=False, dynamicMembershipChange=True)
    node = RaftLog(own, [DialNode(linked, base + 5), plain], conf,
                   lambda position, _entry: Applied(position), False,
                   GroupCommitTransport)
    try:
        node._SyncObj__updateClusterConfiguration([TCPNode(linked), TCPNode(plain)])
        by_id = {n.id: n for n in node.otherNodes}
        assert by_id[linked].port == base + 5
        assert by_id[plain].port == base + 12
    finally:
        node._destroy()


def test_a_dump_made_as_a_learner_loads_once_the_node_votes() -> None:
    """pysyncobj's dump stores ``otherNodes | {selfNode}``: a learner's selfNode is None.
    The node, a voter after its promotion, must still load that ring (it used to fail
    with 'failed to load full dump': AttributeError on None)."""
    base = om_cluster.free_port_base(3)
    own, peer = (f"127.0.0.1:{base + 10 + i}" for i in range(2))
    conf = SyncObjConf(autoTick=False, dynamicMembershipChange=True)
    node = RaftLog(own, [peer], conf, lambda position, _entry: Applied(position), False,
                   GroupCommitTransport)
    try:
        node._SyncObj__updateClusterConfiguration([TCPNode(peer), None])
        assert [n.id for n in node.otherNodes] == [peer]
    finally:
        node._destroy()


def test_a_second_request_before_the_first_starts_is_refused(ring: Scenario) -> None:
    leader = ring.nodes[_leader(ring)]
    first: list[tuple[str, str]] = []
    second: list[tuple[str, str]] = []
    follower = next(n for n in ring.nodes if n != _leader(ring))
    leader.om_membership.request(REMOVE, ring.addresses[follower], lambda *r: first.append(r))
    leader.om_membership.request(REMOVE, ring.addresses[follower], lambda *r: second.append(r))
    assert second == [("REFUSED", "another membership change is waiting to start")]
    ring.run(1.5)
    assert first == [("OK", "committed")]


def test_a_learner_compacts_its_log() -> None:
    """pysyncobj staggers compactions by the node's rank among the member ids, which a
    read-only node does not have: without the adaptation its tick raises."""
    ring = Scenario(min_timeout_s=0.3, compaction_min_entries=5)
    try:
        ring.start()
        ring.run_until_leader(10)
        ring.addresses[NEW] = "127.0.0.1:1"
        ring.learners.add(NEW)
        ring.boot(NEW)
        for i in range(30):
            _write(ring, b"e%d" % i)
            ring.run(0.02)
        ring.run(1.0)
        assert {b"e0", b"e29"} <= {entry for _, entry in ring.applied.get(NEW, [])}
        assert not ring.nodes[NEW].conf.logCompactionSplit
    finally:
        ring.close()
