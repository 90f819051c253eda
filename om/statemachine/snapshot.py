"""Raft snapshots of the RocksDB store, through pysyncobj's serializer hooks.

pysyncobj's default snapshot pickles the SyncObj's Python attributes: it would
not contain the RocksDB data, and a follower catching up by snapshot would
silently diverge. Here the dump file is an uncompressed tar of:

* ``db/``: a RocksDB checkpoint, taken under apply's lock together with the
  positions of the manifest, so it is exactly the applied state at those
  positions (retry cache, managed index and applied position included). The
  server writes snapshots on a worker thread while Raft keeps running and
  apply continues: the checkpoint may hold entries past the position pysyncobj
  compacts to, which a node installing it skips as already applied;
* ``manifest.json``: the applied position, managed index and term;
* ``raft.pickle``: pysyncobj's own data (last entries, cluster members);
* ``om-snapshots/<id>/``: the node's OM snapshot checkpoints, hard-linked under
  apply's lock beside the store's checkpoint (so they match its snapshotInfoTable),
  so that a follower catching up by snapshot serves the OM snapshots taken before
  it too, as Ozone's checkpoint download carries snapshot data. A checkpoint shares
  most SST files with the store's: tar stores a file met twice as a link to the
  first, so each costs only the files that differ.

pysyncobj ships the dump file in chunks to followers that fell behind
compaction. When durable, the dump is fsynced before pysyncobj renames it into
place (the Raft journal syncs the rename before it compacts), and an installed
checkpoint's files and directories are fsynced before the node acknowledges
the snapshot, so a power loss can never leave a compacted journal beside a
snapshot or database that is not on disk.

``deserialize`` installs the data only when the snapshot is ahead of the local
store (a wiped or lagging node); on an ordinary restart the store
is already ahead, is kept, and the journal replay skips what it has applied.
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


CARRIED = "om-snapshots"


class Snapshotter:
    """Writes and installs snapshots of one node's store."""

    def __init__(self, state_machine: SnapshotSource, work_dir: Path, durable: bool,
                 unsafe_delay_s: float = 0.0,
                 unsafe_delay_if: Callable[[], bool] = lambda: True,
                 carried: CarriedCheckpoints | None = None) -> None:
        """``carried``: the OM snapshot checkpoints each snapshot carries and each
        install brings (none: ``NoCheckpoints``)."""
        assert unsafe_delay_s >= 0
        self._state_machine = state_machine
        self._work_dir = work_dir
        self._durable = durable
        self._unsafe_delay_s = unsafe_delay_s
        self._unsafe_delay_if = unsafe_delay_if
        self._carried = carried if carried is not None else NoCheckpoints()
        self.installed = 0
        self.written = 0

    def serialize(self, tmp_file: str, raft_data: Any) -> None:
        """Writes the snapshot to ``tmp_file`` (pysyncobj renames it into place)."""
        started = time.perf_counter()
        checkpoint = self._work_dir / "snapshot-checkpoint"
        carried = self._work_dir / "snapshot-carried"
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(carried, ignore_errors=True)
        machine = self._state_machine
        if self._unsafe_delay_s and self._unsafe_delay_if():
            time.sleep(self._unsafe_delay_s)   # test-only: a slow disk, or a huge store
        with machine.applying():
            machine.quiesce()
            manifest = {"applied_index": machine.applied_index,
                        "managed_index": machine.managed_index, "term": machine.term}
            machine.store.checkpoint(checkpoint)
            self._carried.link_into(carried)
        try:
            with tarfile.open(tmp_file, "w") as archive:
                archive.add(checkpoint, arcname="db")
                archive.add(carried, arcname=CARRIED)
                _add_bytes(archive, "manifest.json", json.dumps(manifest).encode())
                _add_bytes(archive, "raft.pickle", pickle.dumps(raft_data))
            if self._durable:
                fsync_tree(Path(tmp_file))
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
            shutil.rmtree(carried, ignore_errors=True)
        self.written += 1
        logger.info("snapshot at position %d written in %.3f s", manifest["applied_index"],
                    time.perf_counter() - started)

    def deserialize(self, file_name: str) -> Any:
        """Installs the snapshot's data when it is ahead; returns pysyncobj's data."""
        if self._durable:  # a received snapshot was written and renamed unsynced
            fsync_path(Path(file_name))
            fsync_path(Path(file_name).parent)
        with tarfile.open(file_name, "r") as archive:
            manifest = json.loads(_read(archive, "manifest.json"))
            raft_data = pickle.loads(_read(archive, "raft.pickle"))
            if manifest["applied_index"] > self._state_machine.applied_index:
                self._install(archive, manifest)
        return raft_data

    def _install(self, archive: tarfile.TarFile, manifest: dict[str, int]) -> None:
        incoming = self._work_dir / "snapshot-incoming"
        shutil.rmtree(incoming, ignore_errors=True)
        members = [m for m in archive.getmembers()
                   if m.name.split("/", 1)[0] in ("db", CARRIED)]
        archive.extractall(incoming, members=members, filter="data")
        (incoming / CARRIED).mkdir(exist_ok=True)   # a snapshot of an older release
        if self._durable:
            fsync_tree(incoming)
        machine = self._state_machine
        with machine.applying():
            machine.quiesce()
            self._carried.installing()
            machine.store.replace_with(incoming / "db")
            machine.reload()
            self._carried.installed(incoming / CARRIED)
        if self._durable:
            fsync_path(machine.store.path.parent)  # the rename of the database directory
        shutil.rmtree(incoming, ignore_errors=True)
        assert machine.applied_index == manifest["applied_index"]
        self.installed += 1
        logger.warning("installed a snapshot at position %d", manifest["applied_index"])


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
