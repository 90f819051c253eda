"""Raft snapshots of the RocksDB store, through pysyncobj's serializer hooks.

pysyncobj's default snapshot pickles the SyncObj's Python attributes: it would
not contain the RocksDB data, and a follower catching up by snapshot would
silently diverge. Here the dump file is a small uncompressed tar of:

* ``manifest.json``: the applied position, managed index and term;
* ``checkpoint.json``: the checkpoint's ``Manifest`` (``checkpoint_shelf.py``): its
  id, the node that keeps it, its files with sizes and sha256;
* ``raft.pickle``: pysyncobj's own data (last entries, cluster members).

The checkpoint itself stays on the writer's shelf: ``db/``, a RocksDB checkpoint
taken under apply's lock together with the positions of the manifest, so it is
exactly the applied state at those positions (retry cache, managed index and
applied position included), and ``om-snapshots/<id>/``, the node's OM snapshot
checkpoints, hard-linked under apply's lock beside it (so they match its
snapshotInfoTable), so that a follower catching up serves the OM snapshots taken
before it too, as Ozone's checkpoint download carries snapshot data. The server
writes snapshots on a worker thread while Raft keeps running and apply continues:
the checkpoint may hold entries past the position pysyncobj compacts to, which a
node installing it skips as already applied.

pysyncobj ships the dump (a few KiB) to followers that fell behind compaction, as
it shipped the whole store before; the follower downloads the checkpoint's files
outside Raft, as Ozone's followers download the leader's checkpoint
(``CheckpointSource``: om/node/catchup.py), into a staging directory that
outlives the process, so a download cut short resumes (``checkpoint_download.py``).
When the writer no longer keeps that checkpoint, the follower installs the newest
one it keeps: its store is then ahead of Raft's position, and apply skips what it
holds. When durable, the dump and the checkpoint are fsynced before pysyncobj
renames the dump into place (the Raft journal syncs the rename before it
compacts), and a downloaded checkpoint's files and directories are fsynced before
the node acknowledges the snapshot, so a power loss can never leave a compacted
journal beside a snapshot or database that is not on disk.

``deserialize`` installs the data only when the snapshot is ahead of the local
store (a wiped or lagging node); on an ordinary restart the store is already
ahead, is kept, and the journal replay skips what it has applied. A dump of an
older release (the whole checkpoint in the tar, under ``db/``) still installs.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import shutil
import tarfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from om.disk.durable_files import fsync_path
from om.statemachine.checkpoint_download import DownloadStats, ReadChunk, download
from om.statemachine.checkpoint_shelf import CheckpointGone, CheckpointShelf, Manifest
from om.statemachine.store import Store

logger = logging.getLogger(__name__)


class SnapshotSource(Protocol):
    """What a snapshot needs of a state machine (either flow's)."""

    store: Store
    applied_index: int
    managed_index: int
    term: int

    def applying(self) -> AbstractContextManager[bool]:
        """The lock apply holds."""
        ...

    def quiesce(self) -> None:
        """Returns once the store holds everything applied."""
        ...

    def reload(self) -> None:
        """Re-reads the positions from the store."""
        ...


class CarriedCheckpoints(Protocol):
    """The node's OM snapshot checkpoints, as a Raft snapshot carries them."""

    def link_into(self, directory: Path) -> None:
        """Hard-links every whole checkpoint into ``directory/<id>/`` (under apply's
        lock: they then match the store's snapshotInfoTable)."""
        ...

    def installing(self) -> None:
        """An install is about to replace the store (under apply's lock)."""
        ...

    def installed(self, received: Path) -> None:
        """The store was replaced; ``received`` holds the snapshot's checkpoints."""
        ...


class NoCheckpoints:
    """A node without OM snapshot checkpoints (tests of Raft snapshots alone)."""

    def link_into(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)

    def installing(self) -> None:
        pass

    def installed(self, received: Path) -> None:
        pass


class CheckpointSource(Protocol):
    """Where a follower fetches a checkpoint's files (om/node/catchup.py)."""

    chunk_bytes: int

    def reader(self, manifest: Manifest) -> ReadChunk:
        """Reads chunks of ``manifest``'s files from the node that keeps it (raises
        CheckpointGone once it no longer does)."""
        ...

    def newest(self, source: str, at_least: int) -> Manifest:
        """The newest checkpoint at position ``at_least`` or later that ``source`` keeps,
        else another node (CheckpointGone when none has one in time)."""
        ...


CARRIED = "om-snapshots"
STAGING = "catchup-staging"
NEWEST_TRIES_MAX = 4     # checkpoints dropped while fetched before the install fails


class ShardedInstallRefused(Exception):
    """A snapshot ahead of this node's store reached a node with shards: it holds
    shard 0's store only (docs/SHARDS.md, *After step 5*), so installing it would leave
    shards 1..S-1 applying later slices over rows they never got."""


class Snapshotter:
    """Writes and installs snapshots of one node's store."""

    def __init__(self, state_machine: SnapshotSource, work_dir: Path, durable: bool, *,
                 shelf: CheckpointShelf, source: CheckpointSource,
                 unsafe_delay_s: float = 0.0,
                 unsafe_delay_if: Callable[[], bool] = lambda: True,
                 carried: CarriedCheckpoints | None = None, shards: int = 1) -> None:
        """``shelf``: where this node keeps the checkpoints its snapshots name;
        ``source``: where it fetches the ones a leader's snapshot names; ``carried``:
        the OM snapshot checkpoints each snapshot carries and each install brings
        (none: ``NoCheckpoints``); ``shards``: the node's (above 1 it refuses to install
        a snapshot that is ahead: ``ShardedInstallRefused``)."""
        assert unsafe_delay_s >= 0
        assert shards >= 1
        self._shards = shards
        self._state_machine = state_machine
        self._work_dir = work_dir
        self._durable = durable
        self._unsafe_delay_s = unsafe_delay_s
        self._unsafe_delay_if = unsafe_delay_if
        self._carried = carried if carried is not None else NoCheckpoints()
        self._shelf = shelf
        self._source = source
        self.installed = 0
        self.last_download: DownloadStats | None = None
        self.written = 0

    def serialize(self, tmp_file: str, raft_data: Any) -> None:
        """Writes the snapshot to ``tmp_file`` (pysyncobj renames it into place)."""
        started = time.perf_counter()
        machine = self._state_machine
        if self._unsafe_delay_s and self._unsafe_delay_if():
            time.sleep(self._unsafe_delay_s)   # test-only: a slow disk, or a huge store
        with machine.applying():
            machine.quiesce()
            positions = {"applied_index": machine.applied_index,
                         "managed_index": machine.managed_index, "term": machine.term}
            checkpoint_id, directory = self._shelf.begin(machine.applied_index)
            try:
                machine.store.checkpoint(directory / "db")
                self._carried.link_into(directory / CARRIED)
            except BaseException:
                self._shelf.discard(checkpoint_id)
                raise
        manifest = self._shelf.seal(checkpoint_id, positions["applied_index"],
                                    positions["managed_index"], positions["term"])
        with tarfile.open(tmp_file, "w") as archive:
            _add_bytes(archive, "manifest.json", json.dumps(positions).encode())
            _add_bytes(archive, "checkpoint.json", json.dumps(manifest.to_json()).encode())
            _add_bytes(archive, "raft.pickle", pickle.dumps(raft_data))
        if self._durable:
            fsync_tree(Path(tmp_file))
        self.written += 1
        logger.info("snapshot at position %d written in %.3f s (checkpoint %s, %d files, "
                    "%d bytes)", positions["applied_index"], time.perf_counter() - started,
                    checkpoint_id, len(manifest.files), manifest.total_bytes)

    def deserialize(self, file_name: str) -> Any:
        """Installs the snapshot's data when it is ahead; returns pysyncobj's data."""
        raft_data, install = self.prepare_install(file_name)
        if install is not None:
            install()
        return raft_data

    def prepare_install(self, file_name: str) -> tuple[Any, Callable[[], None] | None]:
        """pysyncobj's data at once (the dump is small), and the work that installs the
        snapshot's store when it is ahead of this one (None: nothing to install), which
        the caller may run later: entries after the snapshot's position must then wait
        for it (``process.py`` queues them)."""
        if self._durable:  # a received snapshot was written and renamed unsynced
            fsync_path(Path(file_name))
            fsync_path(Path(file_name).parent)
        with tarfile.open(file_name, "r") as archive:
            positions = json.loads(_read(archive, "manifest.json"))
            raft_data = pickle.loads(_read(archive, "raft.pickle"))
            if positions["applied_index"] <= self._state_machine.applied_index:
                return raft_data, None
            if self._shards > 1:
                raise ShardedInstallRefused(
                    f"a Raft snapshot at position {positions['applied_index']} is ahead of "
                    f"this node's store (position {self._state_machine.applied_index}), and "
                    f"with shards = {self._shards} it holds shard 0's store only: not "
                    "installed (its other shards would miss their rows). Seed this node again "
                    "from a stopped peer's data directory, every shard's store "
                    "(docs/SHARDS.md, After step 5)")
            if "checkpoint.json" not in archive.getnames():   # an older release's dump
                return raft_data, lambda: self._install_archive(file_name, positions)
            manifest = Manifest.from_json(json.loads(_read(archive, "checkpoint.json")))
        assert manifest.applied_index == positions["applied_index"]
        return raft_data, lambda: self._install_checkpoint(manifest)

    def _install_checkpoint(self, manifest: Manifest) -> None:
        staged, directory = self._stage(manifest)
        self._install(directory, staged.applied_index)
        shutil.rmtree(directory, ignore_errors=True)

    def _stage(self, manifest: Manifest) -> tuple[Manifest, Path]:
        """Downloads ``manifest``'s checkpoint, or a newer one when its source no longer
        keeps it; the manifest staged and its directory."""
        wanted = manifest
        for _ in range(NEWEST_TRIES_MAX):
            try:
                return wanted, self._download(wanted)
            except CheckpointGone as gone:
                newer = self._source.newest(wanted.source, manifest.applied_index)
                assert newer.applied_index >= manifest.applied_index
                logger.warning("%s: fetching the newest one, %s at position %d", gone,
                               newer.checkpoint_id, newer.applied_index)
                wanted = newer
        raise CheckpointGone(f"{NEWEST_TRIES_MAX} checkpoints were dropped while fetched")

    def _download(self, manifest: Manifest) -> Path:
        """Stages ``manifest``'s files in ``work_dir/catchup-staging/<id>`` (what an
        earlier attempt staged there is kept; other checkpoints' staging goes)."""
        root = self._work_dir / STAGING
        root.mkdir(exist_ok=True)
        for other in root.iterdir():
            if other.name != manifest.checkpoint_id:
                shutil.rmtree(other, ignore_errors=True)
        staging = root / manifest.checkpoint_id
        started = time.perf_counter()
        stats = download(manifest, staging, self._source.reader(manifest),
                         self._source.chunk_bytes, self._durable)
        self.last_download = stats
        logger.warning("downloaded checkpoint %s from OM:%s in %.3f s: %d files, %d bytes "
                       "fetched in %d chunks; kept from an earlier attempt: %d bytes (%d files "
                       "whole); linked %d; refetched after a checksum mismatch %d",
                       manifest.checkpoint_id, manifest.source, time.perf_counter() - started,
                       stats.files, stats.bytes_fetched, stats.chunks, stats.bytes_resumed,
                       stats.files_resumed, stats.files_linked, stats.refetched)
        return staging

    def _install_archive(self, file_name: str, manifest: dict[str, int]) -> None:
        """Installs a dump of an older release, which holds the whole checkpoint."""
        incoming = self._work_dir / "snapshot-incoming"
        shutil.rmtree(incoming, ignore_errors=True)
        with tarfile.open(file_name, "r") as archive:
            members = [m for m in archive.getmembers()
                       if m.name.split("/", 1)[0] in ("db", CARRIED)]
            archive.extractall(incoming, members=members, filter="data")
        if self._durable:
            fsync_tree(incoming)
        self._install(incoming, manifest["applied_index"])
        shutil.rmtree(incoming, ignore_errors=True)

    def _install(self, incoming: Path, applied_index: int) -> None:
        """Swaps the store for ``incoming/db`` at one position, under apply's lock, and
        hands over the OM snapshot checkpoints in ``incoming/om-snapshots``."""
        (incoming / CARRIED).mkdir(exist_ok=True)   # a snapshot of an older release
        machine = self._state_machine
        with machine.applying():
            machine.quiesce()
            self._carried.installing()
            machine.store.replace_with(incoming / "db")
            machine.reload()
            self._carried.installed(incoming / CARRIED)
        if self._durable:
            fsync_path(machine.store.path.parent)  # the rename of the database directory
        assert machine.applied_index == applied_index
        self.installed += 1
        logger.warning("installed a snapshot at position %d", applied_index)


def fsync_tree(path: Path) -> None:
    """fsyncs a file, or a directory with everything below it (children first)."""
    for each in ([path] if path.is_file() else [*path.rglob("*"), path]):
        fsync_path(each)




def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _read(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    assert member is not None, f"snapshot has no {name}"
    return member.read()
