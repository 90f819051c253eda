"""Elections, scenario by scenario, on real pysyncobj nodes ticked by hand.

Three RaftLog nodes in this process on 127.0.0.1, ticked round-robin by the
test (``autoTick=False``), so a node can be "paused" (not ticked, its sockets
open, as under SIGSTOP) or "killed" (its sockets closed, as when its process
dies). In the style of etcd-raft's scenario tests: each test is a script of
steps and the state it expects after them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from pysyncobj import SyncObj, SyncObjConf

from om.cluster import lifecycle as om_cluster
from om.consensus.pysyncobj.raft_log import RaftLog
from om.consensus.pysyncobj.transport import GroupCommitTransport
from tests.consensus.raft_nodes import Applied


class _NoPreVote(RaftLog):
    """The same node without the pre-vote gate: pysyncobj's own elections."""

    def _onTick(self, timeToWait: float = 0.0) -> None:
        SyncObj._onTick(self, timeToWait)


@dataclass
class Scenario:
    """A cluster whose ticks the test drives."""

    min_timeout_s: float
    node_class: type[RaftLog] = RaftLog
    nodes: dict[str, RaftLog] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    paused: set[str] = field(default_factory=set)
    learners: set[str] = field(default_factory=set)   # booted without an address
    compaction_min_entries: int = 5000
    applied: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)

    def start(self, *names: str) -> None:
        base = om_cluster.free_port_base(3)
        for i, name in enumerate(("n1", "n2", "n3")):
            self.addresses[name] = f"127.0.0.1:{base + 10 + i}"
        for name in names or tuple(self.addresses):
            self.boot(name)

    def boot(self, name: str) -> None:
        conf = SyncObjConf(autoTick=False, appendEntriesUseBatch=False,
                           appendEntriesPeriod=self.min_timeout_s / 8,
                           raftMinTimeout=self.min_timeout_s,
                           raftMaxTimeout=self.min_timeout_s * 2,
                           connectionRetryTime=0.05,
                           connectionTimeout=self.min_timeout_s * 4,
                           leaderFallbackTimeout=self.min_timeout_s * 2,
                           dynamicMembershipChange=True,
                           logCompactionMinEntries=self.compaction_min_entries,
                           logCompactionSplit=True)
        others = [a for n, a in self.addresses.items() if n != name and n not in self.learners]
        own = None if name in self.learners else self.addresses[name]
        self.nodes[name] = self.node_class(
            own, others, conf, lambda position, entry: self._applied(name, position, entry),
            False, GroupCommitTransport)

    def _applied(self, name: str, position: int, entry: bytes) -> Applied:
        self.applied.setdefault(name, []).append((position, entry))
        return Applied(position)

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, node in self.nodes.items():
                if name not in self.paused:
                    node.doTick(0.0)
            time.sleep(0.001)

    def run_until_leader(self, timeout_s: float, not_: str = "") -> float:
        started = time.monotonic()
        while (leader := self.leader()) is None or leader == not_:
            assert time.monotonic() - started < timeout_s, "no leader elected"
            self.run(0.005)
        return time.monotonic() - started

    def leader(self) -> str | None:
        leaders = [n for n, node in self.nodes.items()
                   if node._isLeader() and n not in self.paused]
        assert len(leaders) <= 1, f"two leaders: {leaders}"
        return leaders[0] if leaders else None

    def kill(self, name: str) -> None:
        self.nodes.pop(name)._destroy()

    def close(self) -> None:
        for node in self.nodes.values():
            node._destroy()


@pytest.fixture
def scenario() -> Iterator[Scenario]:
    made = Scenario(min_timeout_s=0.3)
    yield made
    made.close()


def _pause_a_follower_past_its_timeout(scenario: Scenario) -> tuple[str, int]:
    scenario.start()
    scenario.run_until_leader(10)
    scenario.run(0.3)
    leader = scenario.leader()
    assert leader is not None
    term = scenario.nodes[leader].raftCurrentTerm
    follower = next(n for n in scenario.nodes if n != leader)
    scenario.paused.add(follower)
    scenario.run(scenario.min_timeout_s * 3)   # past the follower's election timeout
    scenario.paused.clear()
    scenario.run(scenario.min_timeout_s * 3)
    return leader, term


def test_a_resumed_follower_does_not_depose_the_leader(scenario: Scenario) -> None:
    leader, term = _pause_a_follower_past_its_timeout(scenario)
    assert scenario.leader() == leader
    assert {node.raftCurrentTerm for node in scenario.nodes.values()} == {term}


def test_without_pre_vote_the_resumed_follower_forces_an_election() -> None:
    """The red case: pysyncobj's own elections let the paused node bump the term."""
    scenario = Scenario(min_timeout_s=0.3, node_class=_NoPreVote)
    try:
        _, term = _pause_a_follower_past_its_timeout(scenario)
        assert max(node.raftCurrentTerm for node in scenario.nodes.values()) > term
    finally:
        scenario.close()


def test_a_killed_leader_is_replaced_well_within_the_election_timeout() -> None:
    scenario = Scenario(min_timeout_s=1.5)
    try:
        scenario.start()
        scenario.run_until_leader(20)
        scenario.run(0.5)
        leader = scenario.leader()
        assert leader is not None
        scenario.kill(leader)
        took = scenario.run_until_leader(10, not_=leader)
        assert took < scenario.min_timeout_s / 2, (
            f"{took:.2f} s: the followers waited for their timeout instead of "
            "noticing that the leader hung up")
    finally:
        scenario.close()


def test_a_restarted_node_rejoins_without_an_election(scenario: Scenario) -> None:
    scenario.start()
    scenario.run_until_leader(10)
    scenario.run(0.3)
    leader = scenario.leader()
    assert leader is not None
    term = scenario.nodes[leader].raftCurrentTerm
    follower = next(n for n in scenario.nodes if n != leader)
    scenario.kill(follower)
    scenario.run(scenario.min_timeout_s)
    scenario.boot(follower)                 # an empty memory journal, term 0
    scenario.run(scenario.min_timeout_s * 4)
    assert scenario.leader() == leader
    assert scenario.nodes[leader].raftCurrentTerm == term
    assert scenario.nodes[follower].raftCurrentTerm == term, "it follows the leader"


def test_a_leader_asked_to_hand_over_is_replaced_at_once(scenario: Scenario) -> None:
    """``om_transfer_requested`` (a diverged node leaving leadership): the next tick sends
    TimeoutNow to a caught-up follower, which wins well within an election timeout."""
    scenario.start()
    scenario.run_until_leader(10)
    scenario.run(0.3)
    leader = scenario.leader()
    assert leader is not None
    term = scenario.nodes[leader].raftCurrentTerm
    scenario.nodes[leader].om_transfer_requested = True
    took = scenario.run_until_leader(10, not_=leader)
    assert took < scenario.min_timeout_s, f"{took:.2f} s: it waited for a timeout"
    assert not scenario.nodes[leader].om_transfer_requested
    new_leader = scenario.leader()
    assert new_leader is not None
    assert scenario.nodes[new_leader].raftCurrentTerm == term + 1
