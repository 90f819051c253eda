"""RaftProcessReplicator: the Replicator port over a Raft child process.

The node's serving process (event loop, handlers, store) and its Raft
(pysyncobj, the journal, the peers) run in two processes joined by a
socketpair (``channel.py``), so Raft ticks on a GIL of its own instead of
handing one back and forth with the event loop. The child
(``child.py``) forwards every committed entry, in log order; this side
applies it to the store on the event loop, then resolves the ``replicate``
call that submitted it, so an entry is answered only after it is committed
(synced on a majority) and applied here, exactly as in-process.

Leadership follows the same rules as ``replicator.RaftReplicator``, in the same
code (``leadership.py``): ready only once a barrier of the current term is applied;
on losing leadership every pending entry fails with LEADER_CHANGED.

The channel's messages (``om.protocol.channel`` frames them): parent to child,
``submit(request id, entry)``, ``keepalive()``, ``snapshot_written(error)``,
``snapshot_installed(raft data | error)``, ``catching_up(bool)``, ``close()``;
child to parent, in the order the child produced them, ``apply(position,
entry)`` for every committed entry (``apply_own(position, request ids)`` for one
the child appended for this node: the bytes stay here, not sent back, and the
entry is the merge of the submitted entries those ids name, ``entry_merge.py``),
``result(request ids, reason, position)`` for every appended one, each id then
answered with its own slice's outcome, ``state(...)`` when its role, term,
leader or commit index changed, ``snapshot_write(tmp file, raft data)`` and
``snapshot_install(file)`` (answered before the child goes on, as soon as the
dump is read: the store's install follows, the child ticking meanwhile, and the
entries it commits meanwhile are held, within HELD_ENTRIES_MAX / HELD_BYTES_MAX,
and applied after the install, in order).

With S shards (docs/SHARDS.md, step 2; ``shards``) this side makes S socketpairs and
passes the child one end of each (``pass_fds``, argv in channel order): channel 0 is
its own; the other ends of channels 1..S-1 it keeps for the shard processes
(``take_shard_channels``), each of which attaches to its end (``channel=``: no child
of its own, no setup; this same class, so every rule above holds per channel). Each
channel then also receives ``position(p)`` for an entry with nothing for its shard
(``shard_forwarding.py``; handed to ``on_position``, in log order with the applies),
and a shard's channel ``closing()`` before an orderly stop of the child; the merge
gauge (``merges(entries, slices)``) and everything about snapshots, membership and
transfers stay on channel 0.

Fate sharing: the node fails stop (``on_child_exit``) if the child dies; the
child exits when this process dies (the channel closes) and stops ticking if
this process stops talking (a keepalive goes every ``KEEPALIVE_S``). A shard's
channel is under the same rules: closed, it stops the child and so the node.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pysyncobj import FAIL_REASON

from om.config import SHARDS_MAX, NodeAddress, Raft
from om.consensus.port import (
    Applied,
    ApplyEntry,
    BarrierEntry,
    DeferredInstallHooks,
    LeaderChanges,
    ReplicateResult,
    ReplicateStatus,
    Role,
)
from om.consensus.pysyncobj.leadership import LeadershipBarrier
from om.consensus.pysyncobj.replicator import ENTRY_BYTES_MAX, status_of
from om.observe.histogram import Snapshot
from om.protocol import merged_entry
from om.protocol.channel import FrameReader, Message, encode

logger = logging.getLogger(__name__)
KEEPALIVE_S = 0.1
RECENT_APPLIED_MAX = 4096
PassPosition = Callable[[int], None]   # a log position with nothing for this channel
HELD_ENTRIES_MAX = 200_000      # entries held while a snapshot's store is installed
HELD_BYTES_MAX = 512 << 20
CLOSE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class SliceApplied:
    """What apply did with one slice of a merged entry (``Applied``)."""

    position: int
    applied: bool
    response: bytes = b""
    batches_applied: tuple[bool, ...] = ()


def slice_outcome(outcome: tuple[Applied, int] | None, slot: int,
                  slices: int) -> tuple[Applied, int] | None:
    """The outcome of the ``slot``-th of ``slices`` one-slice entries merged into one
    (``entry_merge.py``): committed where its own slice applied. One entry alone keeps
    the entry's outcome (all its slices applied, or not committed)."""
    assert 0 <= slot < slices
    if outcome is None or slices == 1:
        return outcome
    applied, apply_ns = outcome
    flags = applied.batches_applied
    assert not flags or len(flags) == slices, "one batch per merged slice"
    own = bool(flags) and flags[slot]
    return SliceApplied(applied.position, own, applied.response, (own,)), apply_ns


class NoSnapshots:
    """The snapshot hooks of a shard's channel: the Raft process writes and installs
    snapshots through channel 0 only (shard-aware snapshots are docs/SHARDS.md's step
    4), so a call here is a bug."""

    def serialize(self, tmp_file: str, raft_data: object) -> None:
        raise AssertionError("a snapshot written through a shard's channel")

    def deserialize(self, file_name: str) -> object:
        raise AssertionError("a snapshot installed through a shard's channel")

    def prepare_install(self, file_name: str) -> tuple[object, Callable[[], None] | None]:
        raise AssertionError("a snapshot installed through a shard's channel")


class _Channel(asyncio.Protocol):
    """This side of the socketpair."""

    def __init__(self, owner: RaftProcessReplicator) -> None:
        self._owner = owner
        self._reader = FrameReader()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for message in self._reader.feed(data):
            self._owner.received(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._owner.child_gone()


def _spawn_child(shards: int) -> tuple[subprocess.Popen[bytes], socket.socket,
                                       tuple[socket.socket, ...]]:
    """The Raft child over ``shards`` channels: it, this side's end of channel 0, and
    the ends of channels 1..shards-1 for the shard processes."""
    assert 1 <= shards <= SHARDS_MAX
    pairs = [socket.socketpair() for _ in range(shards)]
    theirs = [pair[1].fileno() for pair in pairs]
    process = subprocess.Popen(
        [sys.executable, "-m", "om.consensus.pysyncobj.child", *map(str, theirs)],
        pass_fds=theirs)
    for _, child_end in pairs:
        child_end.close()
    return process, pairs[0][0], tuple(ours for ours, _ in pairs[1:])


class RaftProcessReplicator:
    """Commits entries through a Raft child process; resolves after the local apply."""

    def __init__(self, node: NodeAddress, nodes: tuple[NodeAddress, ...], data_dir: Path,
                 settings: Raft, apply_entry: ApplyEntry,
                 snapshots: DeferredInstallHooks,
                 barrier: BarrierEntry, entry_bytes_max: int,
                 on_child_exit: Callable[[], None], commit_timeout_s: float = 30.0, *,
                 shards: int = 1, channel: socket.socket | None = None,
                 on_position: PassPosition | None = None, shard: int = 0) -> None:
        """Spawns the Raft child with ``shards`` channels, or with ``channel`` attaches
        to shard ``shard``'s end of a child another process spawned. ``on_position``:
        where a position with nothing for this channel goes (with shards). NOT_LEADER
        names ``role().leader_address``: the leader's port of this side's shard."""
        assert channel is None or shards == 1, "a shard's side spawns nothing"
        assert (channel is None) == (shard == 0), "shard k >= 1 attaches to its channel"
        self._shard = shard
        self._loop = asyncio.get_running_loop()
        self._node = node
        self._by_raft = {n.raft_address: n for n in nodes}
        self._apply_entry = apply_entry
        self._snapshots = snapshots
        self._on_child_exit = on_child_exit
        self._on_position = on_position
        self._commit_timeout_s = commit_timeout_s
        self._requests: dict[int, asyncio.Future[tuple[Any, int]]] = {}
        # what this node submitted, until the child's result: the child names a committed
        # entry of ours by its id ("apply_own") instead of sending its bytes back
        self._submitted: dict[int, bytes] = {}
        self._recent: OrderedDict[int, tuple[Applied, int]] = OrderedDict()
        self._next_request = 1
        self._state: tuple[bool, int, str, int, bool] = (False, 0, "", 0, False)
        self._leadership = LeadershipBarrier(
            node.id, lambda: self._state[0], lambda: self._state[1], self.replicate, barrier,
            self._fail_pending, self._update_role)
        self._update_role()
        self._keepalive_task: asyncio.Task[None] | None = None
        self._snapshot_task: asyncio.Task[None] | None = None
        self.leader_changes = LeaderChanges()
        self._journal_syncs: Snapshot | None = None
        self._merges = (0, 0)    # M entries the child appended, and their slices
        self._matches: dict[str, int] = {}
        self._transfers: dict[int, asyncio.Future[tuple[str, str, str]]] = {}
        self._membership_changes: dict[int, asyncio.Future[tuple[str, str]]] = {}
        self._members: list[str] = []
        self._closing = False
        # while a snapshot's store is installed: the entries committed after it, held
        # (None: a position with nothing for this channel)
        self._held: deque[tuple[int, bytes | None]] | None = None
        self._held_bytes = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        if not settings.fsync:
            logger.warning("[raft] fsync = false: acknowledged writes survive a process crash "
                           "but NOT a power loss (durability opted out)")
        self._process: subprocess.Popen[bytes] | None = None
        # the ends of channels 1..S-1, until the shard processes take them
        self._shard_channels: tuple[socket.socket, ...] = ()
        if channel is None:
            self._process, channel, self._shard_channels = _spawn_child(shards)
            channel.sendall(encode(("setup", node, nodes, str(data_dir), settings,
                                    entry_bytes_max)))
        self._socket = channel
        self._channel = _Channel(self)

    def take_shard_channels(self) -> tuple[socket.socket, ...]:
        """The ends of channels 1..S-1 (shard k's at k-1), once: the caller owns them
        now (hands each to its shard process, and closes its copies)."""
        taken, self._shard_channels = self._shard_channels, ()
        return taken

    @property
    def child_pid(self) -> int:
        """The Raft process's pid (of the process that spawned it)."""
        assert self._process is not None, "a shard's side did not spawn the Raft process"
        return self._process.pid

    async def start(self) -> None:
        """Connects the channel and starts following leadership (once, on the loop)."""
        self._socket.setblocking(False)
        await self._loop.connect_accepted_socket(lambda: self._channel, self._socket)
        self._keepalive_task = self._loop.create_task(self._keepalive())

    def journal_syncs(self) -> Snapshot | None:
        """The Raft process's journal sync times, as last reported (None before any)."""
        return self._journal_syncs

    def on_leadership_lost(self, callback: Callable[[], None]) -> None:
        """Registers a callback run on the loop when this node stops being leader."""
        self._leadership.on_leadership_lost(callback)

    def metrics(self) -> dict[str, float]:
        """State gauges by key (``om/observe/metrics.py``, NODE_STATE): the merge rate is
        merged_slices_appended / merged_entries_appended (slices per M entry)."""
        return {"leader_changes": self.leader_changes.count,
                "merged_entries_appended": self._merges[0],
                "merged_slices_appended": self._merges[1]}

    # -- the port ----------------------------------------------------------------------------

    async def replicate(self, entry: bytes) -> ReplicateResult:
        """Commits ``entry``; resolves once it is applied on this node."""
        assert len(entry) <= ENTRY_BYTES_MAX, "the batcher's byte cap keeps entries small"
        if not self._state[0] or self._channel.transport is None:
            return ReplicateResult(ReplicateStatus.NOT_LEADER)
        request = self._next_request
        self._next_request += 1
        future: asyncio.Future[tuple[Any, int]] = self._loop.create_future()
        self._requests[request] = future
        self._submitted[request] = entry
        self._channel.transport.write(encode(("submit", request, entry)))
        try:
            result, reason = await asyncio.wait_for(asyncio.shield(future),
                                                    self._commit_timeout_s)
        except TimeoutError:
            return ReplicateResult(ReplicateStatus.LEADER_CHANGED)
        finally:
            self._requests.pop(request, None)
        return status_of(result, reason)

    def compact_log(self) -> None:
        """Asks the Raft process to snapshot and compact its journal now (pysyncobj's
        forceLogCompaction), as a Prepare's apply asks (om/executor/admin/upgrade.py)."""
        self._send(("compact",))

    def transfer_leadership(self) -> None:
        """Asks the Raft process to hand leadership to a caught-up follower (best effort:
        pysyncobj refuses while none is caught up; ask again)."""
        self._send(("transfer_leadership",))

    async def transfer_leadership_to(self, target: str,
                                     timeout_s: float = 10.0) -> tuple[str, str, str]:
        """Asks the Raft process to hand leadership to the Raft address ``target`` ("": a
        random caught-up follower); (code, target, message) once TimeoutNow is sent or
        refused (``transfer.py``): OK, REFUSED, NOT_UP_TO_DATE, NOT_LEADER, TIMEOUT."""
        request = self._next_request
        self._next_request += 1
        future: asyncio.Future[tuple[str, str, str]] = self._loop.create_future()
        self._transfers[request] = future
        self._send(("transfer_to", request, target))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return "TIMEOUT", target, f"the Raft process did not answer within {timeout_s} s"
        finally:
            self._transfers.pop(request, None)

    async def change_membership(self, op: str, address: str,
                                timeout_s: float = 30.0) -> tuple[str, str]:
        """Asks the Raft process to add or remove the voter at ``address``
        (``membership.py``); (code, message) once committed or refused."""
        request = self._next_request
        self._next_request += 1
        future: asyncio.Future[tuple[str, str]] = self._loop.create_future()
        self._membership_changes[request] = future
        self._send(("membership", request, op, address))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return "TIMEOUT", f"the Raft process did not answer within {timeout_s} s"
        finally:
            self._membership_changes.pop(request, None)

    def members(self) -> list[str]:
        """The Raft addresses of the voters, as the Raft process last reported them."""
        return list(self._members)

    def match_indexes(self) -> dict[str, int]:
        """Each follower's match index by Raft address, as this leader last reported it."""
        return dict(self._matches) if self._state[0] else {}

    def role(self) -> Role:
        """This node's view, as the child last reported it."""
        return self._role

    def _update_role(self) -> None:
        is_leader, term, leader, commit_index, candidate = self._state
        known = self._by_raft.get(leader)
        self._role = Role(is_leader=is_leader, ready=self._leadership.ready(is_leader, term),
                          leader_id=known.id if known else "",
                          leader_address=known.shard_address(self._shard) if known else "",
                          term=term, commit_index=commit_index, candidate=candidate)

    # -- what the child says ---------------------------------------------------------------

    def received(self, message: Message) -> None:
        """Handles one message of the child, in the order it sent them."""
        kind = message[0]
        if kind == "apply_own":
            self._apply(message[1], merged_entry.merge([self._submitted[request]
                                                        for request in message[2]]))
        elif kind == "apply":
            self._apply(message[1], message[2])
        elif kind == "position":
            self._apply(message[1], None)
        elif kind == "result":
            self._resolve(message[1], message[2], message[3])
        elif kind == "ack":       # after an entry every shard applies (every_shard_acks.py)
            if self._held is None:    # applied, not held for an install
                self._send(("applied", message[1]))
        elif kind == "state":
            self._state = message[1:]
            self.leader_changes.saw(self._state[2])
            self._update_role()
            self._leadership.changed()
        elif kind == "journal":
            self._journal_syncs = message[1]
        elif kind == "merges":
            self._merges = (message[1], message[2])
        elif kind == "closing":    # the node stops the Raft process: not a failure
            self._closing = True
        elif kind == "matches":
            self._matches = message[1]
        elif kind == "membership_result":
            changing = self._membership_changes.get(message[1])
            if changing is not None and not changing.done():
                changing.set_result((message[2], message[3]))
        elif kind == "members":
            self._members = message[1]
        elif kind == "transfer_result":
            waiting = self._transfers.get(message[1])
            if waiting is not None and not waiting.done():
                waiting.set_result((message[2], message[3], message[4]))
        elif kind == "snapshot_write":
            self._answer_snapshot_write(message[1], message[2])
        else:
            assert kind == "snapshot_install", f"unexpected message {kind}"
            self._answer_snapshot_install(message[1])

    def _resolve(self, requests: tuple[int, ...], reason: int, position: int) -> None:
        """Answers every request whose entry the child appended in one entry: each with
        the outcome of its own slice (a slice of a deposed leader's term is skipped
        while the others of its entry apply), at that entry's position."""
        applied = self._recent.pop(position, None)
        for slot, request in enumerate(requests):
            self._submitted.pop(request, None)
            future = self._requests.get(request)
            if future is not None and not future.done():
                future.set_result((slice_outcome(applied, slot, len(requests)), reason))

    def _apply(self, position: int, entry: bytes | None) -> None:
        """Applies a committed entry, or (None) passes a position with nothing for this
        channel, in log order (after an install's held entries)."""
        if self._held is not None:
            self._hold(position, entry)
            return
        if entry is None:
            assert self._on_position is not None, "only a channel of several is passed over"
            self._on_position(position)
            return
        started = time.perf_counter_ns()
        applied = self._apply_entry(position, entry)
        if self._requests:  # only a leader's own entries are awaited
            self._recent[position] = (applied, time.perf_counter_ns() - started)
            while len(self._recent) > RECENT_APPLIED_MAX:
                self._recent.popitem(last=False)

    def _answer_snapshot_write(self, tmp_file: str, raft_data: object) -> None:
        self._start_snapshot_task(self._write_snapshot(tmp_file, raft_data))

    def _answer_snapshot_install(self, file_name: str) -> None:
        self._start_snapshot_task(self._install_snapshot(file_name))

    @property
    def catching_up(self) -> bool:
        """Whether a snapshot's store is being installed (fetched) here: the Raft
        process goes on, the entries it commits meanwhile wait (``_held``)."""
        return self._held is not None

    def _hold(self, position: int, entry: bytes | None) -> None:
        """Keeps an entry committed while the store is installed, for after it. Past
        HELD_ENTRIES_MAX or HELD_BYTES_MAX the node stops (fail-stop): its journal
        holds them, and the restart resumes the install, then replays them."""
        assert self._held is not None
        self._held.append((position, entry))
        self._held_bytes += len(entry or b"")
        if len(self._held) > HELD_ENTRIES_MAX or self._held_bytes > HELD_BYTES_MAX:
            logger.critical("%d entries (%d bytes) committed while the store is installed: "
                            "over the limit; stopping this node (a restart resumes the "
                            "catch-up)", len(self._held), self._held_bytes)
            self._held = None
            self._on_child_exit()

    def _start_snapshot_task(self, work: Coroutine[Any, Any, None]) -> None:
        """Runs snapshot work off the event loop, which keeps serving reads and
        executing writes meanwhile, after the snapshot work before it. While a
        snapshot is written, Raft keeps running and entries keep being applied
        (the snapshot takes its checkpoint under apply's lock); while one is
        installed, nothing is applied: the Raft process waits for the answer."""
        previous = self._snapshot_task

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await work

        self._snapshot_task = self._loop.create_task(after_previous())

    async def _write_snapshot(self, tmp_file: str, raft_data: object) -> None:
        error = ""
        try:
            await asyncio.to_thread(self._snapshots.serialize, tmp_file, raft_data)
        except Exception as failure:  # reported to pysyncobj, which retries later
            logger.exception("writing a snapshot failed")
            error = f"{type(failure).__name__}: {failure}"
        self._send(("snapshot_written", error))

    async def _install_snapshot(self, file_name: str) -> None:
        """Answers the Raft process with its data as soon as the (small) dump is read,
        then installs the snapshot's store, if ahead, while Raft goes on: the entries
        committed meanwhile are held and applied after it, in order, so the store
        moves from the snapshot's position on. A failure stops this node: pysyncobj
        would take a failed install for done, and the restart resumes it (a
        checkpoint download keeps what it staged)."""
        try:
            raft_data, install = await asyncio.to_thread(self._snapshots.prepare_install,
                                                         file_name)
        except Exception:
            self._install_failed()
            return
        if install is None:
            self._send(("snapshot_installed", raft_data, ""))
            return
        assert self._held is None, "installs run one at a time (_start_snapshot_task)"
        self._held, self._held_bytes = deque(), 0
        self._send(("snapshot_installed", raft_data, ""))
        self._send(("catching_up", True))
        try:
            await asyncio.to_thread(install)
        except Exception:
            self._install_failed()
            return
        held, self._held = self._held, None
        if held is None:     # over the limit: the node is stopping
            return
        for position, entry in held:
            self._apply(position, entry)
        self._send(("catching_up", False))

    def _install_failed(self) -> None:
        if self._closing:     # stopped mid-install: the restart resumes it
            logger.warning("stopped before the snapshot's store was installed: the restart "
                           "resumes the catch-up", exc_info=True)
            return
        logger.critical("installing a snapshot failed: stopping this node (a restart "
                        "resumes the catch-up)", exc_info=True)
        self._on_child_exit()

    def child_gone(self) -> None:
        """The channel closed: the Raft process is gone, so is this node (unless closing)."""
        if self._closing:
            return
        if self._process is None:
            logger.critical("the Raft process closed this shard's channel: stopping")
            self._on_child_exit()
            return
        try:
            status: int | None = self._process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            status = None  # the channel closed but the process lives on: stop it with us
            self._process.kill()
        logger.critical("the Raft process exited (status %s): stopping the node", status)
        self._on_child_exit()

    # -- leadership (leadership.py) ------------------------------------------------------

    def _fail_pending(self) -> None:
        """Leadership lost: every entry awaiting the child's result fails at once."""
        for future in self._requests.values():
            if not future.done():
                future.set_result((None, FAIL_REASON.LEADER_CHANGED))

    # -- housekeeping ----------------------------------------------------------------------

    def _send(self, message: Message) -> None:
        """Sends ``message`` to the Raft process; a shard's channel sends keepalives and
        applied acks only (besides ``replicate``'s submits): the child stops on anything
        else."""
        assert self._process is not None or message[0] in ("keepalive", "applied"), \
            f"a shard's channel may not send {message[0]}"
        if self._channel.transport is not None:
            self._channel.transport.write(encode(message))

    async def _keepalive(self) -> None:
        while True:
            self._send(("keepalive",))
            await asyncio.sleep(KEEPALIVE_S)

    async def close(self) -> None:
        """Stops the Raft process (it syncs and closes its journal) and the channel. A
        shard's side stops its channel only: closed before the child said ``closing``,
        it stops the child (fate sharing), so a node stops its spawning side first."""
        self._closing = True
        if self._snapshot_task is not None:
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        await self._leadership.close()
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            await asyncio.gather(self._keepalive_task, return_exceptions=True)
        if self._process is None:
            if self._channel.transport is not None:
                self._channel.transport.close()
            return
        self._send(("close",))
        try:
            await asyncio.to_thread(self._process.wait, CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            await asyncio.to_thread(self._process.wait, CLOSE_TIMEOUT_S)
        if self._channel.transport is not None:
            self._channel.transport.close()
        for shard_channel in self.take_shard_channels():   # none started on them
            shard_channel.close()
