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
* ``raft.pickle``: pysyncobj's own data (last entries, cluster members).

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


class Snapshotter:
    """Writes and installs snapshots of one node's store."""

    def __init__(self, state_machine: SnapshotSource, work_dir: Path, durable: bool,
                 unsafe_delay_s: float = 0.0,
                 unsafe_delay_if: Callable[[], bool] = lambda: True,
                 installing: Callable[[], None] = lambda: None,
                 installed: Callable[[], None] = lambda: None) -> None:
        """``installing`` / ``installed``: called before an install replaces the store
        and after, under apply's lock (the node's OM snapshot checkpoints)."""
        assert unsafe_delay_s >= 0
        self._state_machine = state_machine
        self._work_dir = work_dir
        self._durable = durable
        self._unsafe_delay_s = unsafe_delay_s
        self._unsafe_delay_if = unsafe_delay_if
        self._installing = installing
        self._installed = installed
        self.installed = 0
        self.written = 0

    def serialize(self, tmp_file: str, raft_data: Any) -> None:
        """Writes the snapshot to ``tmp_file`` (pysyncobj renames it into place)."""
        started = time.perf_counter()
        checkpoint = self._work_dir / "snapshot-checkpoint"
        shutil.rmtree(checkpoint, ignore_errors=True)
        machine = self._state_machine
        if self._unsafe_delay_s and self._unsafe_delay_if():
            time.sleep(self._unsafe_delay_s)   # test-only: a slow disk, or a huge store
        with machine.applying():
            machine.quiesce()
            manifest = {"applied_index": machine.applied_index,
                        "managed_index": machine.managed_index, "term": machine.term}
            machine.store.checkpoint(checkpoint)
        try:
            with tarfile.open(tmp_file, "w") as archive:
                archive.add(checkpoint, arcname="db")
                _add_bytes(archive, "manifest.json", json.dumps(manifest).encode())
                _add_bytes(archive, "raft.pickle", pickle.dumps(raft_data))
            if self._durable:
                fsync_tree(Path(tmp_file))
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
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
        members = [m for m in archive.getmembers() if m.name == "db" or m.name.startswith("db/")]
        archive.extractall(incoming, members=members, filter="data")
        if self._durable:
            fsync_tree(incoming)
        machine = self._state_machine
        with machine.applying():
            machine.quiesce()
            self._installing()
            machine.store.replace_with(incoming / "db")
            machine.reload()
            self._installed()
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
