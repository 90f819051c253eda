"""An acknowledged entry is on disk on a majority before the acknowledgement.

Real pysyncobj nodes in one process, each journal instrumented to record when it
synced which index; some syncs are made slow, so that an acknowledgement sent
before its sync, or a leader counting itself before its own sync, shows up as an
entry acknowledged with fewer than two journals holding it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from om.consensus.port import ReplicateStatus
from om.consensus.pysyncobj.journal import decode_records
from om.consensus.pysyncobj.replicator import RaftReplicator
from tests.consensus.raft_nodes import (
    FAST,
    Applied,
    RaftNode,
    close_all,
    ready_leader,
    start_nodes,
)


async def _replicate_and_check(nodes: list[RaftNode], leader: RaftNode, count: int,
                               in_flight: int) -> None:
    acknowledged: list[tuple[int, int]] = []

    async def one(i: int) -> None:
        result = await leader.replicator.replicate(b"entry-%d" % i)
        assert result.status is ReplicateStatus.COMMITTED
        acknowledged.append((result.position, time.monotonic_ns()))

    for start in range(0, count, in_flight):
        await asyncio.gather(*(one(i) for i in range(start, min(start + in_flight, count))))
    for position, at in acknowledged:
        holders = [n.address.id for n in nodes if n.synced_by(position, at)]
        assert len(holders) >= 2, f"entry {position} acknowledged when synced on {holders}"
    assert leader.journal.syncs < count, "syncs are grouped"


@pytest.mark.parametrize("slow", ["followers", "leader and one follower"])
async def test_every_acknowledged_entry_was_synced_on_a_majority_first(
        tmp_path: Path, slow: str) -> None:
    nodes = await start_nodes(tmp_path)
    try:
        leader = await ready_leader(nodes)
        followers = [n for n in nodes if n is not leader]
        if slow == "followers":
            for follower in followers:
                follower.sync_delay_s = 0.02
        else:
            leader.sync_delay_s = 0.02
            followers[0].sync_delay_s = 0.2
        await _replicate_and_check(nodes, leader, count=60, in_flight=20)
    finally:
        await close_all(nodes)


async def test_replicas_apply_the_same_entries_in_the_same_order(tmp_path: Path) -> None:
    nodes = await start_nodes(tmp_path)
    try:
        leader = await ready_leader(nodes)
        results = await asyncio.gather(*(leader.replicator.replicate(b"e%d" % i)
                                         for i in range(200)))
        assert all(r.status is ReplicateStatus.COMMITTED for r in results)
        positions = [r.position for r in results]
        assert positions == sorted(positions), "pipelined entries commit in submission order"
        last = max(positions)
        deadline = time.monotonic() + 20
        while any(not n.applied or n.applied[-1][0] < last for n in nodes):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        histories = [[entry for entry in n.applied if entry[0] <= last] for n in nodes]
        assert histories[0] == histories[1] == histories[2]
    finally:
        await close_all(nodes)


class _FixedDump:
    """Snapshot hooks whose dump is one fixed pysyncobj state (nothing to restore)."""

    def __init__(self, raft_data: object) -> None:
        self.raft_data = raft_data

    def serialize(self, tmp_file: str, raft_data: object) -> None:
        raise AssertionError("this run never compacts")

    def deserialize(self, file_name: str) -> object:
        return self.raft_data


async def test_a_restart_after_a_compaction_cut_short_keeps_the_entries_after_the_dump(
        tmp_path: Path) -> None:
    """A node killed after renaming its snapshot into place and before its journal
    dropped the entries it covers restarts with the new snapshot and the whole older
    journal. pysyncobj cleared such a journal, entries after the snapshot included:
    synced and acknowledged entries gone (test_crash_restart caught a lost write)."""
    nodes = await start_nodes(tmp_path, count=1)
    node = nodes[0]
    try:
        await ready_leader(nodes)
        for i in range(10):
            result = await node.replicator.replicate(b"entry-%d" % i)
            assert result.status is ReplicateStatus.COMMITTED
    finally:
        await close_all(nodes)
    entries, _ = decode_records((tmp_path / "n1" / "raft.wal").read_bytes())
    last = entries[-1][1]
    dumped = entries[5]    # the snapshot covers up to here; the journal starts earlier
    (tmp_path / "n1" / "raft.snapshot").write_bytes(b"a snapshot")
    hooks = _FixedDump((dumped, entries[4], []))
    replicator = RaftReplicator(node.address, (node.address,), tmp_path / "n1", FAST,
                                lambda position, entry: Applied(position), hooks,
                                lambda term: b"barrier", 1 << 20)
    await replicator.start()
    try:
        journal = replicator.journal_spec.journal
        assert journal is not None
        deadline = time.monotonic() + 10
        while not replicator.role().ready:
            assert time.monotonic() < deadline, "the restarted node never led"
            await asyncio.sleep(0.05)
        assert journal[0] == entries[4], "compacted to the dump"
        assert journal[1] == dumped
        kept = [entry[1] for entry in journal[:]]
        assert kept[:last - entries[4][1] + 1] == list(range(entries[4][1], last + 1)), \
            f"entries after the dump were lost: the journal holds {kept}"
    finally:
        await replicator.close()
