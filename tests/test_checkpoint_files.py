"""Catch-up from checkpoint files, below the network: the shelf a node keeps its
checkpoints on (what it lists, hashes, serves and refuses) and the follower's
download into a staging directory (resumes what a cut transfer staged, refetches a
file that fails its checksum, links files of the same bytes). The reads go to a real
shelf over real files; a cut or a corruption is injected, nothing is mocked."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from om.config import Catchup, ConfigError, Limits, ServerConfig
from om.node.parts import MACHINE_SEAM
from om.protocol import om_pb2
from om.statemachine.checkpoint_download import DownloadFailed, download
from om.statemachine.checkpoint_shelf import (
    MANIFEST,
    BadChunkRequest,
    CheckpointGone,
    CheckpointShelf,
    Manifest,
    safe_relative,
)
from om.statemachine.store import Store

CHUNK = 4096
SIZES = {"db/000012.sst": 50_000, "db/MANIFEST-000005": 9_000, "db/OPTIONS-000007": 4096,
         "db/CURRENT": 16, "db/empty.log": 0}


class Cut(Exception):
    """The transfer broke (a test's fault)."""


def fill(directory: Path) -> None:
    """Files of the sizes above, and an OM snapshot checkpoint sharing the SST's bytes."""
    for name, size in SIZES.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    shared = directory / "om-snapshots" / "00000000000000000001" / "000012.sst"
    shared.parent.mkdir(parents=True)
    os.link(directory / "db" / "000012.sst", shared)


def sealed(shelf: CheckpointShelf, position: int = 10) -> Manifest:
    checkpoint_id, directory = shelf.begin(position)
    fill(directory)
    return shelf.seal(checkpoint_id, position, 3, 2)


@pytest.fixture
def shelf(tmp_path: Path) -> CheckpointShelf:
    return CheckpointShelf(tmp_path / "leader" / "checkpoints", 2, "om1", durable=False,
                           seam=MACHINE_SEAM)


def reader(shelf: CheckpointShelf, manifest: Manifest,
           chunks_max: int | None = None) -> Callable[[str, int, int], bytes]:
    """Reads from the shelf as the RPC would; raises Cut after ``chunks_max`` chunks."""
    served = 0

    def read(path: str, offset: int, length: int) -> bytes:
        nonlocal served
        if chunks_max is not None and served >= chunks_max:
            raise Cut(f"transfer cut after {served} chunks")
        served += 1
        return shelf.read(manifest.checkpoint_id, path, offset, length, CHUNK)[0]
    return read


def same_files(shelf: CheckpointShelf, manifest: Manifest, staging: Path) -> None:
    for entry in manifest.files:
        source = shelf.root / manifest.checkpoint_id / entry.path
        assert (staging / entry.path).read_bytes() == source.read_bytes(), entry.path


def test_the_shelf_lists_every_file_with_its_size_and_hash(shelf: CheckpointShelf) -> None:
    manifest = sealed(shelf)
    paths = {f.path: f for f in manifest.files}
    assert set(paths) == {*SIZES, "om-snapshots/00000000000000000001/000012.sst"}
    assert all(paths[name].size == size for name, size in SIZES.items())
    assert paths["db/000012.sst"].sha256 == \
        paths["om-snapshots/00000000000000000001/000012.sst"].sha256
    assert shelf.manifest() == manifest == shelf.manifest(manifest.checkpoint_id)
    stored = json.loads((shelf.root / manifest.checkpoint_id / MANIFEST).read_bytes())
    assert Manifest.from_json(stored) == manifest


def test_a_download_stages_the_checkpoint_and_links_shared_files(
        shelf: CheckpointShelf, tmp_path: Path) -> None:
    manifest = sealed(shelf)
    staging = tmp_path / "staging"
    stats = download(manifest, staging, reader(shelf, manifest), CHUNK, durable=True)
    same_files(shelf, manifest, staging)
    assert stats.files_linked == 1
    assert stats.bytes_fetched == sum(SIZES.values())
    assert stats.chunks == sum(-(-size // CHUNK) for size in SIZES.values())
    assert (stats.files_resumed, stats.bytes_resumed, stats.refetched) == (0, 0, 0)


def test_an_interrupted_transfer_resumes_from_the_bytes_staged(
        shelf: CheckpointShelf, tmp_path: Path) -> None:
    manifest = sealed(shelf)
    staging = tmp_path / "staging"
    with pytest.raises(Cut):
        download(manifest, staging, reader(shelf, manifest, chunks_max=5), CHUNK, False)
    assert 0 < (staging / "db" / "000012.sst").stat().st_size < SIZES["db/000012.sst"]
    stats = download(manifest, staging, reader(shelf, manifest), CHUNK, False)
    same_files(shelf, manifest, staging)
    assert stats.bytes_resumed == 5 * CHUNK
    assert stats.bytes_fetched == sum(SIZES.values()) - 5 * CHUNK


def test_a_corrupted_staged_file_is_detected_and_refetched(
        shelf: CheckpointShelf, tmp_path: Path) -> None:
    manifest = sealed(shelf)
    staging = tmp_path / "staging"
    download(manifest, staging, reader(shelf, manifest), CHUNK, False)
    flip(staging / "db" / "MANIFEST-000005", 4_000)           # whole, same size
    stats = download(manifest, staging, reader(shelf, manifest), CHUNK, False)
    assert stats.refetched == 1
    assert stats.bytes_fetched == SIZES["db/MANIFEST-000005"]
    same_files(shelf, manifest, staging)


def test_a_corrupted_partial_file_is_refetched_once_complete(
        shelf: CheckpointShelf, tmp_path: Path) -> None:
    manifest = sealed(shelf)
    staging = tmp_path / "staging"
    with pytest.raises(Cut):
        download(manifest, staging, reader(shelf, manifest, chunks_max=3), CHUNK, False)
    flip(staging / "db" / "000012.sst", 100)                  # the bytes kept are bad
    stats = download(manifest, staging, reader(shelf, manifest), CHUNK, False)
    assert stats.refetched == 1
    same_files(shelf, manifest, staging)


def test_a_source_whose_file_differs_from_its_manifest_fails_the_download(
        shelf: CheckpointShelf, tmp_path: Path) -> None:
    manifest = sealed(shelf)
    flip(shelf.root / manifest.checkpoint_id / "db" / "OPTIONS-000007", 10)
    with pytest.raises(DownloadFailed, match="failed its sha256 twice"):
        download(manifest, tmp_path / "staging", reader(shelf, manifest), CHUNK, False)


@pytest.mark.parametrize("path", ["../x", "db/../manifest.json", "/etc/passwd", MANIFEST,
                                  "db/", "db/./CURRENT", "db/nope.sst", ""])
def test_the_shelf_serves_only_the_files_it_lists(shelf: CheckpointShelf, path: str) -> None:
    manifest = sealed(shelf)
    with pytest.raises(BadChunkRequest, match="has no file"):
        shelf.read(manifest.checkpoint_id, path, 0, CHUNK, CHUNK)


def test_the_shelf_refuses_bad_offsets_lengths_and_unknown_checkpoints(
        shelf: CheckpointShelf) -> None:
    manifest = sealed(shelf)
    size = SIZES["db/CURRENT"]
    assert shelf.read(manifest.checkpoint_id, "db/CURRENT", size, CHUNK, CHUNK) == (b"", size)
    with pytest.raises(BadChunkRequest, match="past the end"):
        shelf.read(manifest.checkpoint_id, "db/CURRENT", size + 1, CHUNK, CHUNK)
    for length in (0, CHUNK + 1):
        with pytest.raises(BadChunkRequest, match="length"):
            shelf.read(manifest.checkpoint_id, "db/CURRENT", 0, length, CHUNK)
    for unknown in ("", "00000000000000000010-00000000", "../../etc"):
        with pytest.raises(CheckpointGone):
            shelf.read(unknown, "db/CURRENT", 0, CHUNK, CHUNK)


def test_the_shelf_keeps_the_newest_and_drops_cut_checkpoints(tmp_path: Path) -> None:
    shelf = CheckpointShelf(tmp_path / "checkpoints", 2, "om1", durable=False, seam=MACHINE_SEAM)
    first, second, third = (sealed(shelf, position) for position in (10, 20, 30))
    assert not (shelf.root / first.checkpoint_id).exists()
    with pytest.raises(CheckpointGone):
        shelf.manifest(first.checkpoint_id)
    assert shelf.manifest() == third
    cut_id, _ = shelf.begin(40)                      # a kill before its manifest
    reopened = CheckpointShelf(tmp_path / "checkpoints", 2, "om1", durable=False, seam=MACHINE_SEAM)
    assert not (reopened.root / cut_id).exists()
    assert {reopened.manifest(m.checkpoint_id) for m in (second, third)} == {second, third}


def test_a_store_checkpoint_downloads_and_opens(shelf: CheckpointShelf, tmp_path: Path) -> None:
    """The files of a real RocksDB checkpoint, staged, open as the same store."""
    store = Store(tmp_path / "store")
    batch = store.new_batch()
    for i in range(1000):
        store.batch_put(batch, om_pb2.VOLUME, f"/v{i}".encode(), os.urandom(100))
    store.write(batch)
    checkpoint_id, directory = shelf.begin(1)
    store.checkpoint(directory / "db")
    manifest = shelf.seal(checkpoint_id, 1, 0, 1)
    staging = tmp_path / "staging"
    download(manifest, staging, reader(shelf, manifest), CHUNK, False)
    same_files(shelf, manifest, staging)
    reopened = Store(staging / "db")
    assert reopened.digests() == store.digests()
    reopened.close()
    store.close()


@pytest.mark.parametrize(("lease_s", "first_kept"), [(60.0, True), (0.0, False)])
def test_a_checkpoint_being_read_outlives_kept_for_its_lease(
        tmp_path: Path, lease_s: float, first_kept: bool) -> None:
    shelf = CheckpointShelf(tmp_path / "checkpoints", 1, "om1", durable=False,
                            seam=MACHINE_SEAM, lease_s=lease_s)
    first = sealed(shelf, 10)
    shelf.read(first.checkpoint_id, "db/CURRENT", 0, CHUNK, CHUNK)
    second, third = sealed(shelf, 20), sealed(shelf, 30)
    assert (shelf.root / first.checkpoint_id).exists() == first_kept
    assert not (shelf.root / second.checkpoint_id).exists()
    assert shelf.manifest() == third


@pytest.mark.parametrize("bad", ["../a", "a/../../b", "/a", "a//b", "a\\b", "", "."])
def test_a_manifest_with_an_unsafe_path_is_refused(shelf: CheckpointShelf, bad: str) -> None:
    assert not safe_relative(bad)
    values = sealed(shelf).to_json()
    values["files"].append([bad, 1, "0" * 64])
    with pytest.raises(ValueError, match="unsafe"):
        Manifest.from_json(values)


def flip(path: Path, offset: int) -> None:
    """Inverts one byte of ``path`` in place."""
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0xFF]))


def test_a_smaller_frame_limit_bounds_the_chunk_without_another_setting() -> None:
    """A node whose frames are 8 KiB asks for and serves 4 KiB chunks with the default
    ``[catchup] chunk_bytes`` (it was refused at start: verify's small-frame test)."""
    config = ServerConfig(limits=Limits(max_frame_bytes=8192)).validate()
    assert config.catchup_chunk_bytes == 4096
    assert ServerConfig().validate().catchup_chunk_bytes == Catchup().chunk_bytes
    with pytest.raises(ConfigError, match="chunk_bytes"):
        ServerConfig(catchup=Catchup(chunk_bytes=1000)).validate()
