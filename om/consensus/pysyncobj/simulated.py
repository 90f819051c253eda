"""pysyncobj on a simulated network, disk and clock (the simulator's seam, ``om/sim``).

The production Raft node (``RaftLog`` with ``GroupCommitTransport`` and
``GroupCommitJournal``) runs here unchanged above three replaced layers:

* **Time.** ``take_over(now)`` points every place pysyncobj and this package
  read its monotonic clock (module-level bindings of ``pysyncobj.monotonic``)
  at ``now``, turns pysyncobj's pipe notifier off (a submitted entry is taken
  at the next tick, which the simulator schedules at once), and puts
  everything back when the run ends. pysyncobj's election timeouts draw from
  the global ``random``, which the simulator seeds for the run.
* **The wire.** ``SimTransport`` is ``GroupCommitTransport`` (held
  acknowledgements, group syncs: the real code) over ``_SimWire`` in place of
  TCP: ``send`` hands the message to a ``Network``, which decides from the
  seed when (or whether) it arrives, and calls ``deliver`` then. Connections
  come and go by the network's word (``connected``/``disconnected``), as
  pysyncobj's TCP connections do.
* **The disk.** ``SimJournal`` is ``GroupCommitJournal`` whose file is a
  ``SimDisk``: a page cache and what reached stable storage. Writes land in
  the cache at once; a sync completes when the simulator says so, and only
  then is it stable and ``synced_index`` moves. A crash keeps the stable bytes
  and maybe a torn piece of the rest; reopening decodes the longest valid
  prefix with the production decoder.

Nothing here is used by a node in production (``om/node`` wires TCP, files
and threads); it exists so that one seed replays a whole cluster.
"""

from __future__ import annotations

import random
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pysyncobj import syncobj as pysyncobj_syncobj
from pysyncobj import tcp_connection as pysyncobj_tcp
from pysyncobj import transport as pysyncobj_transport
from pysyncobj.node import TCPNode
from pysyncobj.transport import TCPTransport, Transport

from om.config import NodeAddress, Raft
from om.consensus.port import ApplyEntry, BarrierEntry, SnapshotHooks
from om.consensus.pysyncobj import raft_log, transfer, transport
from om.consensus.pysyncobj.journal import (
    MAGIC,
    GroupCommitJournal,
    JournalSpec,
    SyncWork,
    decode_records,
)
from om.consensus.pysyncobj.raft_log import RaftLog, peers
from om.consensus.pysyncobj.replicator import RaftReplicator, syncobj_conf
from om.consensus.pysyncobj.transport import GroupCommitTransport

_CLOCK_BINDINGS = ((pysyncobj_syncobj, "monotonicTime"), (pysyncobj_tcp, "monotonicTime"),
                   (pysyncobj_transport, "monotonicTime"), (raft_log, "monotonic_time"),
                   (transfer, "monotonic_time"), (transport, "monotonic_time"))


@contextmanager
def take_over(now: Callable[[], float]) -> Iterator[None]:
    """pysyncobj's clock is ``now`` and its pipe notifier off while the block runs."""
    saved = [(module, name, getattr(module, name)) for module, name in _CLOCK_BINDINGS]
    notifier = pysyncobj_syncobj.PIPE_NOTIFIER_ENABLED
    factory = pysyncobj_syncobj.createJournal
    try:
        for module, name, _ in saved:
            setattr(module, name, now)
        pysyncobj_syncobj.PIPE_NOTIFIER_ENABLED = False
        pysyncobj_syncobj.createJournal = _create_journal
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        pysyncobj_syncobj.PIPE_NOTIFIER_ENABLED = notifier
        pysyncobj_syncobj.createJournal = factory


# -- the disk ----------------------------------------------------------------------------


class DiskScheduler(Protocol):
    """Decides when a disk operation of ``node`` completes (the simulator)."""

    def disk_done(self, node: str, work: Callable[[], None]) -> None: ...


@dataclass
class SimDisk:
    """One node's journal file and meta file, as the page cache and the platter see them.

    ``cache`` is what a reader of the file sees now; ``stable`` what a power loss
    keeps. ``sync`` makes the cache stable; ``crash`` forgets what was not, except
    that a seeded prefix of the unsynced tail may have reached the platter anyway
    (the kernel writes back when it likes), possibly cutting a record in two.

    The cache changes only through ``write``, ``truncate`` and ``replace``, which
    keep the invariant ``cache[:clean] == stable[:clean]`` (``clean``: the lowest
    offset changed since the last sync), so that a sync copies only from there: a
    journal grows by a batch at a time, and copying all of it at every sync was
    quadratic (seed 1, 2,000 requests: 1 GB copied in 3,598 syncs, now 1.8 MB)."""

    node: str
    scheduler: DiskScheduler
    cache: bytearray = field(default_factory=bytearray)
    stable: bytearray = field(default_factory=bytearray)
    meta: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0            # bumped by every crash: work of an earlier life is void
    syncs: int = 0
    torn: int = 0             # crashes that kept part of an unsynced tail
    clean: int = 0            # cache and stable agree below this offset

    def write(self, offset: int, data: bytes) -> None:
        """A pwrite of ``data`` at ``offset`` (zeros fill a gap past the end)."""
        end = offset + len(data)
        self.clean = min(self.clean, offset, len(self.cache))
        if len(self.cache) < end:
            self.cache.extend(b"\0" * (end - len(self.cache)))
        self.cache[offset:end] = data

    def truncate(self, size: int) -> None:
        self.clean = min(self.clean, size)
        del self.cache[size:]

    def replace(self, content: bytes) -> None:
        """The file's whole content becomes ``content`` (a rewrite renamed over it)."""
        self.cache = bytearray(content)
        self.clean = 0

    def sync(self) -> None:
        del self.stable[self.clean:]
        self.stable += self.cache[self.clean:]
        self.clean = len(self.cache)
        assert len(self.stable) == len(self.cache)
        self.syncs += 1

    def crash(self, rng: random.Random) -> str:
        """Power loss: the cache becomes the stable bytes plus maybe a piece of the rest."""
        self.epoch += 1
        stable, cache = bytes(self.stable), bytes(self.cache)
        kept = stable
        what = "synced only"
        if len(cache) > len(stable) and cache.startswith(stable) and rng.random() < 0.5:
            cut = rng.randrange(len(stable), len(cache) + 1)
            kept = cache[:cut]
            self.torn += 1
            what = f"synced + {cut - len(stable)} of {len(cache) - len(stable)} unsynced bytes"
        self.cache = bytearray(kept)
        self.stable = bytearray(kept)
        self.clean = len(kept)
        return what


_DISKS: dict[str, SimDisk] = {}


def register_disk(journal_file: Path, disk: SimDisk) -> None:
    """The next SyncObj whose ``journalFile`` is ``journal_file`` journals on ``disk``."""
    _DISKS[str(journal_file)] = disk


def _create_journal(journal_file: str | None = None) -> Any:
    disk = _DISKS.pop(str(journal_file))
    return SimJournal(Path(str(journal_file)), disk)


class SimJournal(GroupCommitJournal):
    """``GroupCommitJournal`` on a ``SimDisk``: the same bookkeeping (``SyncWork`` targets
    and floors, held acknowledgements, truncation rules), the I/O replaced.

    Each piece of work is handed to the disk's scheduler in order; when it
    completes it runs (the bytes land, the sync makes them stable) and the
    transport is flushed, as the real sync thread's ``wake_fd`` does."""

    def __init__(self, path: Path, disk: SimDisk) -> None:   # no super(): there is no file
        self._path = path
        self._disk = disk
        self._spec = JournalSpec(durable=True, snapshot_file=path.with_name("none"))
        data = bytes(disk.cache)
        if not data.startswith(MAGIC):
            assert not data, "not a journal"
            disk.replace(MAGIC)
            disk.sync()
            data = MAGIC
        self._entries, self._ends = decode_records(data)
        self._written = self._ends[-1] if self._ends else len(MAGIC)
        if self._written < len(data):   # a torn tail: dropped, as the real journal does
            disk.truncate(self._written)
            disk.sync()
        self._pending = bytearray()
        self._dirty = False
        self._file_bytes = self._written
        self.synced_index = self._entries[-1][1] if self._entries else 0
        self.syncs = 0
        self.on_truncate = None
        self._meta = dict(disk.meta)
        self._meta_saved = True
        self._meta_version = 0
        self._outstanding = []
        self._done = deque()
        self._epoch = disk.epoch
        self.on_synced: Callable[[], None] | None = None   # set by the transport

    @property
    def wake_fd(self) -> int:
        return -1    # the simulated poller subscribes nothing

    def _submit(self, work: SyncWork) -> None:
        if work.target is not None:
            work.floor = work.target
            self._outstanding.append(work)
        epoch = self._epoch

        def complete() -> None:
            if self._disk.epoch != epoch:
                return            # the node crashed meanwhile: this work never happened
            work.run()
            self._done.append(work)
            if self.on_synced is not None:
                self.on_synced()

        self._disk.scheduler.disk_done(self._disk.node, complete)

    def begin_sync(self) -> None:
        if self._outstanding or (not self._pending and not self._dirty):
            return
        pending, self._pending = bytes(self._pending), bytearray()
        offset = self._written
        self._written += len(pending)
        cut = self._written if self._file_bytes > self._written else None
        self._file_bytes = self._written
        self._dirty = False
        disk = self._disk
        # the pwrite lands in the page cache at once; the sync completes later
        disk.write(offset, pending)
        if cut is not None:
            disk.truncate(cut)
        self._submit(SyncWork("write", disk.sync, self.last_index))

    def collect(self) -> None:
        while self._done:
            work = self._done.popleft()
            if work.target is None:
                continue
            self._outstanding.remove(work)
            self.synced_index = max(self.synced_index, min(work.target, work.floor))
            if work.action == "write":
                self.syncs += 1

    def _rewrite(self, content: bytes) -> Callable[[], None]:
        disk = self._disk

        def rewrite() -> None:      # a synced temporary file renamed over the journal
            disk.replace(content)
            disk.sync()

        return rewrite

    def _destroy(self) -> None:
        """Nothing to join: the node's disk outlives it."""

    def sync(self) -> None:
        raise AssertionError("the simulated journal never waits for its disk")

    def _save_meta(self) -> None:
        self._meta_version += 1
        self._disk.meta = dict(self._meta)    # synced on the Raft thread, as the real one
        self._meta_saved = True

    def _save_meta_lazily(self) -> None:
        data, version = dict(self._meta), self._meta_version

        def save() -> None:
            if version == self._meta_version:
                self._disk.meta = data

        self._submit(SyncWork("write the commit index of", save))
        self._meta_saved = True


# -- the wire ----------------------------------------------------------------------------


class Network(Protocol):
    """Carries messages between nodes (the simulator)."""

    def send(self, source: str, target: str, message: Any) -> None: ...


class SimPoller:
    """pysyncobj's poller with nothing to poll: the simulator delivers events itself."""

    def subscribe(self, descr: int, callback: Any, event_mask: int) -> None:
        pass

    def unsubscribe(self, descr: int) -> None:
        pass

    def poll(self, timeout: float) -> None:
        pass


class _SimWire(TCPTransport):  # type: ignore[misc]
    """TCPTransport's place in the class order, with no sockets: messages go to the
    ``Network`` the SyncObj carries as ``om_network``."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        Transport.__init__(self, syncObj, selfNode, otherNodes)
        self._syncObj = syncObj
        self._selfNode = selfNode
        self._connections: dict[Any, Any] = {}
        self._nodes_by_id: dict[str, Any] = {str(n.id): n for n in otherNodes}
        self._connected: set[str] = set()
        self._network: Network = syncObj.om_network

    def tryGetReady(self) -> None:
        pass

    @property
    def ready(self) -> bool:
        return True

    def addNode(self, node: Any) -> None:
        self._nodes_by_id[str(node.id)] = node

    def dropNode(self, node: Any) -> None:
        self._nodes_by_id.pop(str(node.id), None)
        self.disconnected(str(node.id))

    def send(self, node: Any, message: Any) -> bool:
        target = str(node.id)
        if target not in self._connected:
            return False
        self._network.send(str(self._selfNode.id), target, message)
        return True

    def destroy(self) -> None:
        self._connected.clear()

    def peers(self) -> set[str]:
        """The peers this node has a connection to."""
        return set(self._connected)

    # -- the network's calls -------------------------------------------------------------

    def connected(self, peer: str) -> None:
        node = self._nodes_by_id.get(peer)
        if node is None or peer in self._connected:
            return
        self._connected.add(peer)
        self._onNodeConnected(node)

    def disconnected(self, peer: str) -> None:
        node = self._nodes_by_id.get(peer)
        if node is None or peer not in self._connected:
            return
        self._connected.discard(peer)
        self._onNodeDisconnected(node)
        self._syncObj.om_peer_disconnected(node)

    def deliver(self, source: str, message: Any) -> None:
        node = self._nodes_by_id.get(source)
        if node is not None and source in self._connected:
            self._onMessageReceived(node, message)


class SimTransport(GroupCommitTransport, _SimWire):
    """The production transport's logic over the simulated wire."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        syncObj._poller = SimPoller()
        super().__init__(syncObj, selfNode, otherNodes)
        journal = syncObj.om_journal
        if isinstance(journal, SimJournal):
            journal.on_synced = self.flush


class SimRaftLog(RaftLog):
    """RaftLog that carries its network (read by ``_SimWire`` while it is built)."""

    def __init__(self, network: Network, *args: Any, **kwargs: Any) -> None:
        self.om_network = network
        super().__init__(*args, **kwargs)

    @property
    def transport(self) -> SimTransport:
        wire: SimTransport = self._SyncObj__transport
        return wire


class StableNode(TCPNode):  # type: ignore[misc]
    """A TCPNode whose hash does not depend on ``PYTHONHASHSEED``: pysyncobj keeps its
    peers in sets and sends to them in set order, which must be the same in every
    process for a seed to replay. Computed once: pysyncobj hashes its nodes some
    fifty times a tick (its per-peer dicts), about 1 % of a seed's time."""

    def __init__(self, address: str) -> None:
        super().__init__(address)
        self._stable_hash = zlib.crc32(str(self.id).encode())

    def __hash__(self) -> int:
        return self._stable_hash


def address_id(address: str) -> str:
    """pysyncobj's id of a node at ``address``."""
    return str(TCPNode(address).id)


class SimRaftReplicator(RaftReplicator):
    """``RaftReplicator`` (barrier, leadership tracking, replicate) over a ``SimRaftLog``
    ticked by the simulator instead of a thread."""

    def __init__(self, node: NodeAddress, nodes: tuple[NodeAddress, ...], data_dir: Path,
                 settings: Raft, apply_entry: ApplyEntry, snapshots: SnapshotHooks,
                 barrier: BarrierEntry, entry_bytes_max: int, network: Network,
                 disk: SimDisk, commit_timeout_s: float = 30.0) -> None:
        self._follow(node, nodes, barrier, commit_timeout_s)
        conf = syncobj_conf(settings, data_dir, snapshots, entry_bytes_max,
                            self._state_changed_on_raft_thread)
        conf.autoTick = False
        conf.pollerType = "select"
        conf.fullDumpFile = None        # no snapshots in the simulator (docs/RELIABILITY.md)
        conf.serializer = conf.deserializer = None
        register_disk(Path(conf.journalFile), disk)
        self.journal_spec = JournalSpec(durable=True, snapshot_file=data_dir / "none")
        own: Any = StableNode(node.raft_address)
        others = [StableNode(str(peer)) for peer in peers(node, nodes, {})]
        self._raft = SimRaftLog(network, own, others, conf, apply_entry, False, SimTransport)
        self.journal_spec.journal = self._raft.om_journal

    @property
    def raft(self) -> SimRaftLog:
        """The Raft node, for the simulator to tick and wire."""
        return self._raft

    def tick(self) -> None:
        """One tick of pysyncobj (timers, queued entries, commits, apply)."""
        self._raft.doTick(0.0)
