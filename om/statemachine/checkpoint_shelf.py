"""The checkpoints a node keeps for followers to download (catch-up from files).

A Raft snapshot's dump names a checkpoint instead of holding it (``snapshot.py``):
the writer keeps ``<root>/<id>/`` with ``db/`` (a RocksDB checkpoint: SST, MANIFEST,
OPTIONS, CURRENT files, hard links to the store's) and ``om-snapshots/`` (the OM
snapshot checkpoints it carries), and ``manifest.json`` beside them, written last:
a directory without one is a checkpoint a kill cut short, removed at start. Only the
``kept`` newest stay, and an older one while a follower read it within the last
``lease_s`` (a download in progress is not pulled from under it: it would start
over); a follower that asks for one dropped is told it is gone
(``CheckpointGone``) and fetches the newest instead.

Every file is listed with its size and sha256; SST files never change, so a hash is
remembered by inode (consecutive checkpoints share most files) and computed once.
``read`` serves a chunk of a listed file only: a path the manifest does not list (an
absolute one, ``..``) is refused, never opened.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from om.disk.durable_files import fsync_path, write_synced
from om.schema.seam import Randomness, Seam

MANIFEST = "manifest.json"
_ID = re.compile(r"^[0-9]{20}-[0-9a-f]{8}$")
_HASH_BLOCK = 1 << 20
_HASHES_REMEMBERED_MAX = 100_000


class CheckpointGone(Exception):
    """The checkpoint asked for is not (or no longer) kept by this node."""


class BadChunkRequest(Exception):
    """A chunk request no file of the checkpoint can answer (a path it does not list,
    an offset past the end, a length over the limit)."""


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint: its path below the checkpoint, size and sha256 (hex)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What a follower needs to fetch and install a checkpoint."""

    checkpoint_id: str
    applied_index: int
    managed_index: int
    term: int
    source: str                       # the node id of the node that keeps it
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        """The size of every file together."""
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """The manifest as JSON-able values (``from_json`` reads them back)."""
        return {"checkpoint_id": self.checkpoint_id, "applied_index": self.applied_index,
                "managed_index": self.managed_index, "term": self.term,
                "source": self.source,
                "files": [[f.path, f.size, f.sha256] for f in self.files]}

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> Manifest:
        """Reads a manifest; ValueError when it is malformed or lists an unsafe path."""
        try:
            files = tuple(FileEntry(str(p), int(n), str(h)) for p, n, h in values["files"])
            manifest = cls(str(values["checkpoint_id"]), int(values["applied_index"]),
                           int(values["managed_index"]), int(values["term"]),
                           str(values["source"]), files)
        except (KeyError, TypeError) as error:
            raise ValueError(f"malformed checkpoint manifest: {error}") from None
        if not _ID.match(manifest.checkpoint_id):
            raise ValueError(f"malformed checkpoint id {manifest.checkpoint_id!r}")
        for entry in files:
            if not safe_relative(entry.path) or entry.size < 0 or len(entry.sha256) != 64:
                raise ValueError(f"unsafe or malformed file entry {entry}")
        return manifest


def safe_relative(path: str) -> bool:
    """Whether ``path`` stays below the directory it is relative to (no absolute path,
    no ``..``, no empty or ``.`` part)."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and "\\" not in path and all(
        part not in ("", ".", "..") for part in parts)


def new_id(applied_index: int, randomness: Randomness) -> str:
    """A fresh checkpoint id: sortable by position, unique by its random tail."""
    assert applied_index >= 0
    return f"{applied_index:020d}-{randomness(4).hex()}"


class CheckpointShelf:
    """The checkpoints this node keeps: made by ``snapshot.py``, read by followers.

    ``seam``: the node's randomness names each checkpoint, its elapsed clock times the
    leases (read on the snapshot thread and the catch-up server's)."""

    def __init__(self, root: Path, kept: int, node_id: str, durable: bool, seam: Seam,
                 lease_s: float = 30.0) -> None:
        assert kept >= 1
        assert lease_s >= 0
        self._lease_s = lease_s
        self._seam = seam
        self.root = root
        self._kept = kept
        self._node_id = node_id
        self._durable = durable
        self._lock = threading.Lock()
        self._hashes: dict[tuple[int, int, int, int], str] = {}
        self._manifests: dict[str, Manifest] = {}
        self._read_at: dict[str, float] = {}     # checkpoint id -> when last read
        root.mkdir(parents=True, exist_ok=True)
        self._recover()

    def _recover(self) -> None:
        """Drops the checkpoints a kill cut short (no manifest) and loads the others."""
        for entry in sorted(self.root.iterdir()):
            manifest_file = entry / MANIFEST
            if not (_ID.match(entry.name) and manifest_file.is_file()):
                shutil.rmtree(entry, ignore_errors=True)
                continue
            self._manifests[entry.name] = Manifest.from_json(
                json.loads(manifest_file.read_bytes()))
        self._prune()

    def begin(self, applied_index: int) -> tuple[str, Path]:
        """A new checkpoint's id and its empty directory, for the caller to fill (under
        apply's lock) with ``db/`` and ``om-snapshots/``."""
        checkpoint_id = new_id(applied_index, self._seam.randomness)
        directory = self.root / checkpoint_id
        directory.mkdir()
        return checkpoint_id, directory

    def seal(self, checkpoint_id: str, applied_index: int, managed_index: int,
             term: int) -> Manifest:
        """Lists and hashes the filled checkpoint, writes its manifest (synced when
        durable, with every file), then drops all but the ``kept`` newest."""
        directory = self.root / checkpoint_id
        assert directory.is_dir()
        assert not (directory / MANIFEST).exists()
        files = tuple(self._entry(directory, path) for path in sorted(directory.rglob("*"))
                      if path.is_file())
        manifest = Manifest(checkpoint_id, applied_index, managed_index, term,
                            self._node_id, files)
        if self._durable:
            for path in [*directory.rglob("*"), directory]:
                fsync_path(path)
        write_synced(directory / MANIFEST, json.dumps(manifest.to_json()).encode(),
                     self._durable)
        with self._lock:
            self._manifests[checkpoint_id] = manifest
            self._prune()
        return manifest

    def discard(self, checkpoint_id: str) -> None:
        """Removes a checkpoint that was begun but will not be sealed."""
        assert _ID.match(checkpoint_id)
        shutil.rmtree(self.root / checkpoint_id, ignore_errors=True)

    def _entry(self, directory: Path, path: Path) -> FileEntry:
        stat = path.stat()
        key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        digest = self._hashes.get(key)
        if digest is None:
            digest = file_sha256(path)
            if len(self._hashes) >= _HASHES_REMEMBERED_MAX:
                self._hashes.clear()
            self._hashes[key] = digest
        return FileEntry(path.relative_to(directory).as_posix(), stat.st_size, digest)

    def _prune(self) -> None:
        now = self._seam.elapsed_ns() / 1e9
        for checkpoint_id in sorted(self._manifests)[:-self._kept]:
            read_at = self._read_at.get(checkpoint_id)
            if read_at is not None and now - read_at < self._lease_s:
                continue
            del self._manifests[checkpoint_id]
            self._read_at.pop(checkpoint_id, None)
            shutil.rmtree(self.root / checkpoint_id, ignore_errors=True)

    def manifest(self, checkpoint_id: str = "") -> Manifest:
        """The manifest of ``checkpoint_id`` ("": the newest); CheckpointGone if none."""
        with self._lock:
            if not checkpoint_id and self._manifests:
                checkpoint_id = max(self._manifests)
            found = self._manifests.get(checkpoint_id)
        if found is None:
            raise CheckpointGone(f"checkpoint {checkpoint_id or '(newest)'} is not kept by "
                                 f"OM:{self._node_id}")
        return found

    def read(self, checkpoint_id: str, path: str, offset: int, length: int,
             length_max: int) -> tuple[bytes, int]:
        """``length`` bytes of a listed file from ``offset`` (fewer at its end) and the
        file's size. CheckpointGone or BadChunkRequest when it cannot be served."""
        manifest = self.manifest(checkpoint_id) if checkpoint_id else None
        if manifest is None:
            raise CheckpointGone("a chunk needs a checkpoint id")
        if not 0 < length <= length_max:
            raise BadChunkRequest(f"length {length} is not in [1, {length_max}]")
        entry = next((f for f in manifest.files if f.path == path), None)
        if entry is None:
            raise BadChunkRequest(f"checkpoint {checkpoint_id} has no file {path!r}")
        if offset > entry.size:
            raise BadChunkRequest(f"offset {offset} is past the end of {path} "
                                  f"({entry.size} bytes)")
        with self._lock:
            self._read_at[checkpoint_id] = self._seam.elapsed_ns() / 1e9
        try:
            with open(self.root / checkpoint_id / path, "rb") as source:
                source.seek(offset)
                data = source.read(min(length, entry.size - offset))
        except FileNotFoundError:   # pruned while being read
            raise CheckpointGone(f"checkpoint {checkpoint_id} was dropped") from None
        return data, entry.size


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while block := source.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link of ``source`` at ``target`` (a copy across file systems)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
