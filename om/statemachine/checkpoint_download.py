"""A follower's download of a checkpoint's files into a staging directory.

The staging directory outlives the process: a download cut short (the node killed,
the leader gone) resumes where it stopped, each file from the bytes it holds. A file
whose bytes are all staged is checked against the manifest's sha256 before it
counts; one that does not match (a corrupted disk, a torn write) is fetched again
from its start, once, and a second mismatch fails the download. A file whose hash
was already staged under another path (the store's checkpoint and an OM snapshot's
share most SST files) is hard-linked, not fetched again. Synced when durable.

The transfer itself is the caller's ``ReadChunk`` (``om/node/catchup.py`` asks the
node that keeps the checkpoint); it raises ``CheckpointGone`` when that node no
longer keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from om.disk.durable_files import fsync_path
from om.statemachine.checkpoint_shelf import FileEntry, Manifest, file_sha256, link_or_copy

# (path, offset, length) -> the bytes from offset (fewer only at the file's end)
ReadChunk = Callable[[str, int, int], bytes]


class DownloadFailed(Exception):
    """A checkpoint could not be staged (a file kept failing its checksum, or the
    source sent a file of another size than its manifest says)."""


@dataclass
class DownloadStats:
    """What one call of ``download`` did."""

    files: int = 0
    bytes_fetched: int = 0
    chunks: int = 0
    files_resumed: int = 0          # staged in full already (checksum verified)
    bytes_resumed: int = 0          # staged by an earlier attempt and kept
    files_linked: int = 0           # same bytes as another file: hard-linked
    refetched: int = 0              # failed their checksum: fetched again


def download(manifest: Manifest, staging: Path, read: ReadChunk, chunk_bytes: int,
             durable: bool) -> DownloadStats:
    """Stages every file of ``manifest`` under ``staging`` (see the module docstring)."""
    assert chunk_bytes > 0
    staging.mkdir(parents=True, exist_ok=True)
    stats = DownloadStats(files=len(manifest.files))
    staged: dict[str, Path] = {}      # sha256 -> a verified file holding those bytes
    for entry in manifest.files:
        target = staging / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not _verified_in_place(entry, target, staged, stats):
            _fetch_verified(entry, target, read, chunk_bytes, stats)
        staged.setdefault(entry.sha256, target)
        if durable:
            fsync_path(target)
    if durable:
        for directory in sorted({p for p in staging.rglob("*") if p.is_dir()} | {staging},
                                key=lambda p: -len(p.parts)):
            fsync_path(directory)
    return stats


def _verified_in_place(entry: FileEntry, target: Path, staged: dict[str, Path],
                       stats: DownloadStats) -> bool:
    """Whether ``target`` holds the file already (checked), or was linked to a staged
    copy of the same bytes."""
    if target.is_file() and target.stat().st_size == entry.size:
        if file_sha256(target) == entry.sha256:
            stats.files_resumed += 1
            stats.bytes_resumed += entry.size
            return True
        target.unlink()
        stats.refetched += 1
    same = staged.get(entry.sha256)
    if same is not None:
        target.unlink(missing_ok=True)
        link_or_copy(same, target)
        stats.files_linked += 1
        return True
    return False


def _fetch_verified(entry: FileEntry, target: Path, read: ReadChunk, chunk_bytes: int,
                    stats: DownloadStats) -> None:
    for attempt in range(2):
        _fetch(entry, target, read, chunk_bytes, stats)
        if file_sha256(target) == entry.sha256:
            return
        target.unlink()
        if attempt == 0:
            stats.refetched += 1
    raise DownloadFailed(f"{entry.path} failed its sha256 twice: the source's file differs "
                         "from its manifest")


def _fetch(entry: FileEntry, target: Path, read: ReadChunk, chunk_bytes: int,
           stats: DownloadStats) -> None:
    """Appends the bytes ``target`` lacks (a longer file starts over)."""
    if target.is_file() and target.stat().st_size > entry.size:
        target.unlink()
    with open(target, "ab") as out:
        offset = out.tell()
        stats.bytes_resumed += offset
        while offset < entry.size:
            data = read(entry.path, offset, min(chunk_bytes, entry.size - offset))
            if not data:
                raise DownloadFailed(f"{entry.path} ended at {offset} bytes; its manifest "
                                     f"says {entry.size}")
            out.write(data)
            out.flush()
            offset += len(data)
            stats.bytes_fetched += len(data)
            stats.chunks += 1
