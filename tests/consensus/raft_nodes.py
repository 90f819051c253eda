"""In-process Raft nodes on 127.0.0.1 for consensus tests: RaftReplicators sharing one
event loop (each with its own pysyncobj tick thread), applying to a list."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from om.cluster import lifecycle as om_cluster
from om.config import NodeAddress, Raft
from om.consensus.pysyncobj.journal import GroupCommitJournal
from om.consensus.pysyncobj.replicator import RaftReplicator

FAST = Raft(election_timeout_min_s=0.4, election_timeout_max_s=0.8,
            leader_fallback_timeout_s=1.5)


@dataclass(frozen=True)
class Applied:
    position: int
    applied: bool = True
    response: bytes = b""
    batches_applied: tuple[bool, ...] = ()


class NoSnapshots:
    """Snapshot hooks for runs too short to compact."""

    def serialize(self, tmp_file: str, raft_data: object) -> None:
        raise AssertionError("these tests never compact")

    def deserialize(self, file_name: str) -> object:
        raise AssertionError("these tests never compact")

    def prepare_install(self, file_name: str) -> tuple[object, Callable[[], None] | None]:
        raise AssertionError("these tests never compact")


@dataclass
class RaftNode:
    """One node: its replicator, what it applied, and when its journal synced what.

    ``sync_delay_s`` makes each sync that slow on the journal's sync thread (a slow
    disk); ``blocking_sync`` makes the Raft thread wait for each sync it starts,
    as before the sync thread (the red cases); a file at ``stall_file`` stalls the
    sync thread while it exists (``[raft] unsafe_journal_stall``)."""

    address: NodeAddress
    replicator: RaftReplicator
    applied: list[tuple[int, bytes]] = field(default_factory=list)
    syncs: list[tuple[int, int]] = field(default_factory=list)  # (synced index, ns)
    sync_delay_s: float = 0.0
    blocking_sync: bool = False

    @property
    def journal(self) -> GroupCommitJournal:
        assert self.replicator.journal_spec.journal is not None
        return self.replicator.journal_spec.journal

    @property
    def stall_file(self) -> Path:
        stall = self.replicator.journal_spec.stall_file
        assert stall is not None, "started without unsafe_journal_stall"
        return stall

    def synced_by(self, index: int, t_ns: int) -> bool:
        """Whether the journal had synced ``index`` at or before ``t_ns``."""
        return any(synced >= index and at <= t_ns for synced, at in self.syncs)

    def term(self) -> int:
        return self.replicator.role().term


def _instrument(node: RaftNode) -> None:
    """Records every sync when the Raft thread learns of it, delays syncs on the sync
    thread, and makes the Raft thread wait for them, as the node asks."""
    journal = node.journal
    perform, collect, begin_sync = journal._perform, journal.collect, journal.begin_sync

    def slow_perform(work: Any) -> None:
        if node.sync_delay_s and work.target is not None:
            time.sleep(node.sync_delay_s)
        perform(work)

    def recording_collect() -> None:
        before = journal.synced_index
        collect()
        if journal.synced_index > before:
            node.syncs.append((journal.synced_index, time.monotonic_ns()))

    def maybe_blocking_begin_sync() -> None:
        begin_sync()
        if node.blocking_sync:
            journal._wait_idle()

    journal._perform = slow_perform  # type: ignore[method-assign]
    journal.collect = recording_collect  # type: ignore[method-assign]
    journal.begin_sync = maybe_blocking_begin_sync  # type: ignore[method-assign]


async def start_nodes(directory: Path, count: int = 3,
                      settings: Raft = FAST) -> list[RaftNode]:
    """``count`` nodes on free 127.0.0.1 ports."""
    base = om_cluster.free_port_base(count)
    addresses = tuple(NodeAddress(f"n{i + 1}", "127.0.0.1", base + i, base + 10 + i)
                      for i in range(count))
    nodes: list[RaftNode] = []
    for address in addresses:
        holder: list[RaftNode] = []

        def apply(position: int, entry: bytes, holder: list[RaftNode] = holder) -> Applied:
            holder[0].applied.append((position, entry))
            return Applied(position)

        replicator = RaftReplicator(address, addresses, directory / address.id, settings,
                                    apply, NoSnapshots(), _barrier, 1 << 20)
        node = RaftNode(address, replicator)
        holder.append(node)
        _instrument(node)
        await replicator.start()
        nodes.append(node)
    return nodes


def _barrier(term: int) -> bytes:
    return b"barrier-%d" % term


async def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def ready_leader(nodes: list[RaftNode]) -> RaftNode:
    """The node that leads and has committed its barrier."""
    await wait_for(lambda: sum(n.replicator.role().ready for n in nodes) == 1)
    return next(n for n in nodes if n.replicator.role().ready)


async def close_all(nodes: list[RaftNode]) -> None:
    for node in nodes:
        await node.replicator.close()
