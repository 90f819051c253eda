"""OM snapshots on one node: a RocksDB checkpoint per snapshot, taken where it applies.

``om.executor.om_snapshots.snapshots`` writes and removes snapshotInfoTable rows. Apply tells
this module when a batch changed that table (``ApplyResult.snapshots_changed``),
and the node calls ``applied`` right after that batch, still under apply's lock
and before the next entry applies: every row without a checkpoint gets one
there, and every checkpoint without a row is freed. So each node's checkpoint of
a snapshot holds exactly the log position of the batch that created it: every
batch applied before, that batch, none after (the transaction info row inside
says which position). Replicas hold identical checkpoints (tests compare their
tables' digests).

Layout, under ``<node data dir>/om-snapshots/<snapshot id, 20 digits>/``:

* ``checkpoint/``: the checkpoint (RocksDB renames it into place when whole);
* ``position``: the log position it holds, written after it;
* ``ABSENT``: this node has no checkpoint of that snapshot (the checkpoint failed:
  a full disk; or a Raft snapshot it installed carried none). Reads
  of it here answer INVALID_SNAPSHOT_ERROR; other nodes serve them.

Restarts: a node killed after applying a create's batch but before its
checkpoint was whole restarts with its store at exactly that position (nothing
applies before ``applied`` returns), so ``recover``, run before the journal
replays, takes the checkpoint then. It knows the store is there because apply
records, in the transaction info row, the position of the last entry that
changed snapshotInfoTable (``snapshot_change_position``): equal to the applied
position, the store stands right after that entry; otherwise the store has moved
past the create (the checkpoint was lost: its directory removed by hand, a disk
fault) and the snapshot is marked ABSENT here rather than checkpointed at the
wrong position. A Raft snapshot carries the checkpoints (``link_into``,
``om.statemachine.raft_snapshot``), so a follower that catches up by one receives every
OM snapshot taken before it (``installed``). An install marks ``INSTALLING``
first, so that a kill during an install never checkpoints the installed state
under an older snapshot's name; whatever it leaves is marked ABSENT.

Reads open checkpoints read-only, at most ``open_max`` at once (the least
recently used is closed). A read holds this module's lock for each row or page it
reads, and a checkpoint is closed only under it, so a delete, an eviction or an
install on another thread (a Raft snapshot install runs on a worker thread) never
closes a checkpoint under a read: the read's next step answers
INVALID_SNAPSHOT_ERROR instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from om.disk.durable_files import fsync_path, write_synced
from om.executor.errors import OMError
from om.protocol import om_pb2
from om.schema.read_view import Parsed, ReadView, parse_row
from om.schema.tables import TableId
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

SNAPSHOTS_DIR = "om-snapshots"
_CHECKPOINT = "checkpoint"
_POSITION = "position"
_ABSENT = "ABSENT"
_INSTALLING = "INSTALLING"
ROWS_MAX = 1_000_000      # snapshot rows a node expects at most (bounds the table scans)


@dataclass(frozen=True)
class CheckpointSettings:
    """``[snapshot]``'s node-side settings (om/config.py)."""

    open_max: int = 8
    headroom_bytes_min: int = 1 << 30
    headroom_fraction_min: float = 0.05

    def __post_init__(self) -> None:
        assert self.open_max >= 2, "a diff opens two checkpoints at once"


class _CheckpointView:
    """A read-only view of one open checkpoint that never reads a closed one."""

    def __init__(self, store: Store, lock: threading.RLock) -> None:
        self._store = store
        self._lock = lock

    def _check(self) -> None:
        if self._store.closed:
            raise OMError(om_pb2.INVALID_SNAPSHOT_ERROR, "the snapshot was deleted, or its "
                          "checkpoint closed, while it was being read; read it again")

    def get(self, table: TableId, key: bytes) -> bytes | None:
        with self._lock:
            self._check()
            return self._store.get(table, key)

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        with self._lock:
            self._check()
            return self._store.scan(table, prefix, start_after, limit)


class SnapshotCheckpoints:
    """This node's checkpoints of OM snapshots (``om.schema.read_view.SnapshotViews``)."""

    def __init__(self, node_dir: Path, store: Store,
                 settings: CheckpointSettings = CheckpointSettings()) -> None:
        self.root = node_dir / SNAPSHOTS_DIR
        self._store = store
        self._settings = settings
        self._lock = threading.RLock()
        self._open: OrderedDict[int, tuple[Store, _CheckpointView]] = OrderedDict()
        self._positions: dict[int, int] = {}
        self._known: set[int] = set()    # the rows seen when the store last changed them
        self.taken = 0
        self.freed = 0
        self.last_checkpoint_s = 0.0
        self.root.mkdir(parents=True, exist_ok=True)

    # -- the apply path ---------------------------------------------------------------

    def recover(self) -> None:
        """At start, before the journal replays: the checkpoints a kill cut short."""
        installing = (self.root / _INSTALLING).exists()
        info = self._store.transaction_info()
        at_change = info.snapshot_change_position == info.applied_index > 0
        with self._lock:
            rows = self._rows()
            for snapshot_id in rows:
                if self._complete(snapshot_id) or self._absent(snapshot_id):
                    continue
                if installing:
                    self._mark_absent(snapshot_id, "a Raft snapshot install was cut short")
                elif not at_change:
                    self._mark_absent(snapshot_id, "its checkpoint was lost and the store "
                                      "has moved past its position")
                else:
                    self._take(snapshot_id)
            (self.root / _INSTALLING).unlink(missing_ok=True)
            self._free_unlisted(rows)
            self._known = rows

    def applied(self) -> None:
        """Right after an entry that changed snapshotInfoTable applied, before the next
        one does (the node calls it on the apply path, the store holding exactly that
        entry): checkpoints the snapshots it created, frees those it deleted. A snapshot
        created earlier whose checkpoint has gone meanwhile is marked absent, never
        checkpointed here at a later position."""
        with self._lock:
            rows = self._rows()
            for snapshot_id in rows:
                if self._complete(snapshot_id) or self._absent(snapshot_id):
                    continue
                if snapshot_id in self._known:
                    self._mark_absent(snapshot_id, "its checkpoint was lost and the store "
                                      "has moved past its position")
                else:
                    self._take(snapshot_id)
            self._free_unlisted(rows)
            self._known = rows

    # -- what a Raft snapshot carries -----------------------------------------------------

    def link_into(self, directory: Path) -> None:
        """Hard-links every whole checkpoint into ``directory/<id>/`` for a Raft snapshot
        (under apply's lock, so they are those its snapshotInfoTable names). Their files
        never change once written; RocksDB's info logs, which a read-only open appends
        to, are left out."""
        directory.mkdir(parents=True)
        with self._lock:
            for entry in sorted(self.root.iterdir()):
                if entry.name.isdigit() and (entry / _POSITION).is_file():
                    shutil.copytree(entry, directory / entry.name, copy_function=os.link,
                                    ignore=shutil.ignore_patterns("LOG*"))

    def installing(self) -> None:
        """A Raft snapshot is about to replace the store."""
        (self.root / _INSTALLING).touch()

    def installed(self, received: Path) -> None:
        """The store was replaced by a Raft snapshot's, whose OM snapshot checkpoints are
        in ``received``: a snapshot it names that this node has no checkpoint of takes
        the one received (the leader's, at the same position as everyone's), else it is
        absent here; checkpoints of snapshots it no longer names go."""
        with self._lock:
            rows = self._rows()
            for snapshot_id in rows:
                if self._complete(snapshot_id):
                    continue
                if self._adopt(received / f"{snapshot_id:020d}", snapshot_id):
                    continue
                if not self._absent(snapshot_id):
                    self._mark_absent(snapshot_id, "installed a Raft snapshot taken after it, "
                                      "which carried no checkpoint of it")
            self._free_unlisted(rows)
            self._known = rows
            (self.root / _INSTALLING).unlink(missing_ok=True)

    def _adopt(self, source: Path, snapshot_id: int) -> bool:
        """Moves a received checkpoint into place; False when none was received."""
        if not (source / _POSITION).is_file():
            return False
        self._forget(snapshot_id)
        directory = self._directory(snapshot_id)
        shutil.rmtree(directory, ignore_errors=True)
        os.replace(source, directory)
        fsync_path(self.root)
        logger.info("OM snapshot %d: checkpoint received with a Raft snapshot", snapshot_id)
        return True

    # -- reads (SnapshotViews) ----------------------------------------------------------

    def open(self, snapshot_id: int) -> ReadView | None:
        """The checkpoint of a snapshot, open read-only; None when this node has none."""
        with self._lock:
            known = self._open.get(snapshot_id)
            if known is not None:
                self._open.move_to_end(snapshot_id)
                return known[1]
            if not self._complete(snapshot_id):
                return None
            store = Store(self._directory(snapshot_id) / _CHECKPOINT, read_only=True)
            view = _CheckpointView(store, self._lock)
            self._open[snapshot_id] = (store, view)
            while len(self._open) > self._settings.open_max:
                _, (oldest, _) = self._open.popitem(last=False)
                oldest.close()
            return view

    def position(self, snapshot_id: int) -> int:
        """The log position the checkpoint holds (0: none on this node)."""
        with self._lock:
            known = self._positions.get(snapshot_id)
            if known is not None:
                return known
            if not self._complete(snapshot_id):
                return 0
            position = int((self._directory(snapshot_id) / _POSITION).read_text())
            self._positions[snapshot_id] = position
            return position

    def headroom_problem(self) -> str | None:
        """Why the disk has no room for another checkpoint, or None."""
        usage = shutil.disk_usage(self.root)
        settings = self._settings
        if usage.free < settings.headroom_bytes_min or \
                usage.free < settings.headroom_fraction_min * usage.total:
            return (f"the disk of {self.root} has {usage.free} bytes free of {usage.total}, "
                    f"under [snapshot] headroom_bytes_min ({settings.headroom_bytes_min}) or "
                    f"headroom_fraction_min ({settings.headroom_fraction_min})")
        return None

    def checkpoint_path(self, snapshot_id: int) -> Path | None:
        """Where the snapshot's checkpoint lies on this node (None: absent)."""
        return self._directory(snapshot_id) / _CHECKPOINT if self._complete(snapshot_id) \
            else None

    def close(self) -> None:
        """Closes every open checkpoint."""
        with self._lock:
            while self._open:
                _, (opened, _) = self._open.popitem()
                opened.close()

    # -- inside ---------------------------------------------------------------------------

    def _directory(self, snapshot_id: int) -> Path:
        return self.root / f"{snapshot_id:020d}"

    def _complete(self, snapshot_id: int) -> bool:
        return (self._directory(snapshot_id) / _POSITION).is_file()

    def _absent(self, snapshot_id: int) -> bool:
        return (self._directory(snapshot_id) / _ABSENT).is_file()

    def _rows(self) -> set[int]:
        ids = set()
        for _, raw in self._store.scan(om_pb2.SNAPSHOT_INFO, b"", None, ROWS_MAX):
            ids.add(om_pb2.SnapshotInfo.FromString(raw).snapshot_id)
        return ids

    def _take(self, snapshot_id: int) -> None:
        """Checkpoints the store as it stands (idempotent: debris of a cut-short attempt
        goes first). A failure (a full disk) marks the snapshot absent here."""
        directory = self._directory(snapshot_id)
        started = time.perf_counter()
        try:
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            position = self._store.transaction_info().applied_index
            self._store.checkpoint(directory / _CHECKPOINT)
            # the position says the checkpoint is whole: on disk only after it
            write_synced(directory / _POSITION, str(position).encode())
            fsync_path(self.root)
        except Exception as error:   # OSError, or rocksdict's own (a full disk)
            logger.exception("OM snapshot %d: no checkpoint", snapshot_id)
            self._mark_absent(snapshot_id, f"the checkpoint failed: {error}")
            return
        self._positions[snapshot_id] = position
        self.taken += 1
        self.last_checkpoint_s = time.perf_counter() - started
        logger.info("OM snapshot %d: checkpoint at position %d in %.3f s", snapshot_id,
                    position, self.last_checkpoint_s)

    def _mark_absent(self, snapshot_id: int, why: str) -> None:
        self._forget(snapshot_id)
        directory = self._directory(snapshot_id)
        shutil.rmtree(directory, ignore_errors=True)
        try:
            directory.mkdir(parents=True)
            (directory / _ABSENT).write_text(why + "\n")
        except OSError:
            logger.exception("OM snapshot %d: cannot even mark it absent", snapshot_id)
        logger.warning("OM snapshot %d has no checkpoint on this node: %s", snapshot_id, why)

    def _free_unlisted(self, rows: set[int]) -> None:
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir() or not entry.name.isdigit() or int(entry.name) in rows:
                continue
            snapshot_id = int(entry.name)
            self._forget(snapshot_id)
            shutil.rmtree(entry, ignore_errors=True)
            self.freed += 1
            logger.info("OM snapshot %d: checkpoint freed", snapshot_id)

    def _forget(self, snapshot_id: int) -> None:
        """Closes the snapshot's checkpoint if open, and drops what is known of it."""
        known = self._open.pop(snapshot_id, None)
        if known is not None:
            known[0].close()
        self._positions.pop(snapshot_id, None)
