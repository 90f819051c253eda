"""Heartbeats do not wait for the disk: a journal sync that hangs costs no election.

Three real pysyncobj nodes on 127.0.0.1 (in this process, each with its tick
thread and its journal's sync thread), under a steady write load, one node's
journal stalled for two seconds (several election timeouts) through its stall
file (``[raft] unsafe_journal_stall``). Every write must commit, the leader and
term must stay, and every acknowledged entry must have been synced on a
majority before its acknowledgement; with every node's disk stalled, writes
wait and the leader stays. The red case stalls the leader the same
way with the Raft thread waiting for its sync, as it did before the sync
thread: its followers hear nothing and elect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from om.consensus.port import ReplicateStatus
from tests.consensus.raft_nodes import FAST, RaftNode, close_all, ready_leader, start_nodes

STALL_S = 2.0          # election timeouts are 0.4-0.8 s, the leader's fallback 1.5 s
LOAD_AROUND_S = 0.5    # writes before the stall (they flow) and after (they resume):
WRITERS = 8            # 20 heartbeat intervals each, and the load costs CPU throughout
STALLABLE = dataclasses.replace(FAST, unsafe_journal_stall=True)


@dataclass
class Run:
    """What a loaded run with a stall saw."""

    terms_before: set[int]
    terms_after: set[int]
    leaders_after: list[str]
    stall: tuple[int, int] = (0, 0)          # when the stall began and ended (ns)
    acknowledged: list[tuple[int, int]] = field(default_factory=list)  # (position, ns)
    failed: list[ReplicateStatus] = field(default_factory=list)

    def acknowledged_during_stall(self) -> int:
        return sum(self.stall[0] < at < self.stall[1] for _, at in self.acknowledged)

    def acknowledged_after_stall(self) -> int:
        return sum(at > self.stall[1] for _, at in self.acknowledged)


async def _stall_under_load(nodes: list[RaftNode], leader: RaftNode,
                            stalled: list[RaftNode]) -> Run:
    """Writes through ``leader`` from WRITERS tasks; stalls the journals of
    ``stalled`` for STALL_S after LOAD_AROUND_S of load; writes LOAD_AROUND_S more."""
    run = Run({n.term() for n in nodes}, set(), [])
    stop = asyncio.Event()

    async def writer(number: int) -> None:
        count = 0
        while not stop.is_set():
            result = await leader.replicator.replicate(b"w%d-%d" % (number, count))
            count += 1
            if result.status is ReplicateStatus.COMMITTED:
                run.acknowledged.append((result.position, time.monotonic_ns()))
            else:
                run.failed.append(result.status)
                await asyncio.sleep(0.05)

    writers = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
    try:
        await asyncio.sleep(LOAD_AROUND_S)
        assert run.acknowledged, "no write committed before the stall"
        for node in stalled:
            node.stall_file.touch()
        began = time.monotonic_ns()
        await asyncio.sleep(STALL_S)
        for node in stalled:
            node.stall_file.unlink()
        run.stall = (began, time.monotonic_ns())
        await asyncio.sleep(LOAD_AROUND_S)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    run.terms_after = {n.term() for n in nodes}
    run.leaders_after = [n.address.id for n in nodes if n.replicator.role().is_leader]
    return run


def _synced_on_a_majority(nodes: list[RaftNode], run: Run) -> None:
    for position, at in run.acknowledged:
        holders = [n.address.id for n in nodes if n.synced_by(position, at)]
        assert len(holders) >= 2, f"entry {position} acknowledged when synced on {holders}"


async def test_a_stalled_leader_disk_costs_no_election_and_no_write(tmp_path: Path) -> None:
    nodes = await start_nodes(tmp_path, settings=STALLABLE)
    try:
        leader = await ready_leader(nodes)
        run = await _stall_under_load(nodes, leader, [leader])
        assert run.failed == [], "a write failed while the leader's disk hung"
        assert run.terms_after == run.terms_before, "an election while the leader's disk hung"
        assert run.leaders_after == [leader.address.id]
        assert run.acknowledged_after_stall() > 0, "writes did not resume with the disk"
        # The followers' disks held a majority meanwhile: the leader went on committing.
        assert run.acknowledged_during_stall() > 0
        _synced_on_a_majority(nodes, run)
        during = [i for i, at in leader.syncs if run.stall[0] < at < run.stall[1]]
        assert len(during) <= 1, "the leader's journal was not stalled (one sync may have "\
            "begun before the stall)"
    finally:
        await close_all(nodes)


async def test_a_stalled_follower_disk_leaves_the_leader_its_majority(tmp_path: Path) -> None:
    nodes = await start_nodes(tmp_path, settings=STALLABLE)
    try:
        leader = await ready_leader(nodes)
        stalled = next(n for n in nodes if n is not leader)
        run = await _stall_under_load(nodes, leader, [stalled])
        assert run.failed == []
        assert run.terms_after == run.terms_before
        assert run.leaders_after == [leader.address.id]
        assert run.acknowledged_during_stall() > 0, "the leader lost its majority"
        assert run.acknowledged_after_stall() > 0
        _synced_on_a_majority(nodes, run)
    finally:
        await close_all(nodes)


async def test_when_every_disk_hangs_the_leader_stays_and_writes_wait(tmp_path: Path) -> None:
    """No majority holds new entries, so nothing commits; the followers still say
    they are alive (``transport.ALIVE_AFTER_S``), or the leader would step down
    after ``leader_fallback_timeout_s`` (1.5 s here, less than the stall)."""
    nodes = await start_nodes(tmp_path, settings=STALLABLE)
    try:
        leader = await ready_leader(nodes)
        run = await _stall_under_load(nodes, leader, nodes)
        assert FAST.leader_fallback_timeout_s < STALL_S
        assert run.failed == []
        assert run.terms_after == run.terms_before
        assert run.leaders_after == [leader.address.id]
        assert run.acknowledged_after_stall() > 0
        _synced_on_a_majority(nodes, run)
    finally:
        await close_all(nodes)


async def test_a_raft_thread_that_waits_for_its_sync_loses_the_leadership(
        tmp_path: Path) -> None:
    """The red case: the same stall with the leader's Raft thread waiting for each
    sync it starts (the path before the sync thread): no heartbeats for two
    seconds, and the followers elect."""
    nodes = await start_nodes(tmp_path, settings=STALLABLE)
    try:
        leader = await ready_leader(nodes)
        leader.blocking_sync = True
        run = await _stall_under_load(nodes, leader, [leader])
        assert max(run.terms_after) > max(run.terms_before), "no election: the test is blind"
        _synced_on_a_majority(nodes, run)
    finally:
        await close_all(nodes)
