"""Compare and repair over real RocksDB stores, with the peers behind the Replica port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from om.integrity import compare, marker, merkle, repair, scan
from om.integrity.compare import ReplicaError
from om.integrity.merkle import KeyRange, MerkleTree, TreeParams
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.store import Store
from tests.integrity.populate import BUCKETS, VOLUME, populate

PARAMS = TreeParams(salt=b"repair-1", leaf_bits=2, fanout_bits=1)


@dataclass
class StoreReplica:
    """A peer answering from a store (a checkpoint, in the real thing)."""

    node_id: str
    store: Store
    broken: bool = False

    def tree(self, table: str) -> MerkleTree:
        return scan.compute_trees(self.store, PARAMS).trees[table]

    def rows(self, key_range: KeyRange) -> list[tuple[bytes, bytes]]:
        if self.broken:
            raise ReplicaError(f"{self.node_id} has no checkpoint at that position")
        return scan.read_range(self.store, key_range)


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[tuple[Store, Store, Store]]:
    stores = tuple(Store(tmp_path / name / "db") for name in ("om1", "om2", "om3"))
    for store in stores:
        populate(store, keys=40)
    yield stores  # type: ignore[misc]
    for store in stores:
        store.close()


def _damage(store: Store) -> dict[bytes, str]:
    """A changed bucket row, a deleted key and an extra key: what verify must name."""
    bucket = tables.bucket_key(VOLUME, BUCKETS[0])
    info = om_pb2.BucketInfo.FromString(store.get(om_pb2.BUCKET, bucket) or b"")
    info.used_bytes += 7
    deleted = tables.key_key(VOLUME, BUCKETS[1], "key021")
    extra = tables.key_key(VOLUME, BUCKETS[1], "ghost")
    batch = store.new_batch()
    store.batch_put(batch, om_pb2.BUCKET, bucket, info.SerializeToString())
    store.batch_delete(batch, om_pb2.KEY, deleted)
    store.batch_put(batch, om_pb2.KEY, extra, store.get(om_pb2.KEY, deleted) or b"")
    store.write(batch)
    return {bucket: "different", deleted: "missing", extra: "extra"}


def _roots(store: Store) -> dict[str, bytes]:
    return scan.compute_trees(store, PARAMS).roots()


def _halted(store: Store) -> Path:
    node_dir = store.path.parent
    position = store.transaction_info().applied_index
    marker.save(node_dir, marker.Marker(marker.HALTED, position, ("keyTable",), position))
    return node_dir


def _repair(store: Store, peers: list[StoreReplica],
            after_range: object = None) -> repair.RepairResult:
    majority = _roots(peers[0].store)
    hook = after_range if callable(after_range) else (lambda done: None)
    return repair.repair(store, store.path.parent, store.transaction_info().applied_index,
                         PARAMS, majority, peers[0].tree, {t: peers for t in majority}, hook)


# ---------------------------------------------------------------- compare ---

def test_compare_names_the_minoritys_rows_exactly(trio: tuple[Store, Store, Store]) -> None:
    expected = _damage(trio[1])
    replicas = {f"om{i + 1}": StoreReplica(f"om{i + 1}", s) for i, s in enumerate(trio)}
    found = compare.compare(9, {n: _roots(r.store) for n, r in replicas.items()}, replicas, 3)
    assert found.verdict.minority == {"om2"}
    assert {(d.node_id, d.row.key, d.row.kind) for d in found.differences} == {
        ("om2", key, kind) for key, kind in expected.items()}
    assert not found.problems
    assert set(found.majority_roots()) == set(tables.TABLE_NAMES.values())


def test_with_no_majority_nothing_is_named(trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    batch = trio[2].new_batch()
    trio[2].batch_delete(batch, om_pb2.KEY, tables.key_key(VOLUME, BUCKETS[0], "key010"))
    trio[2].write(batch)
    replicas = {f"om{i + 1}": StoreReplica(f"om{i + 1}", s) for i, s in enumerate(trio)}
    found = compare.compare(9, {n: _roots(r.store) for n, r in replicas.items()}, replicas, 3)
    assert found.verdict.no_majority == ["keyTable"]
    assert not found.differences
    assert found.majority_roots().get("keyTable") is None


def test_a_silent_node_counts_against_the_majority(trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    replicas = {"om1": StoreReplica("om1", trio[0]), "om2": StoreReplica("om2", trio[1])}
    found = compare.compare(9, {n: _roots(r.store) for n, r in replicas.items()}, replicas, 3)
    assert "keyTable" in found.verdict.no_majority       # 1 of 3 is no majority


# ----------------------------------------------------------------- repair ---

def test_repair_restores_the_majoritys_roots_and_clears_the_marker(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    node_dir = _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0]), StoreReplica("om3", trio[2])])
    assert result.cleared
    assert {r.table for r in result.planned} == {"bucketTable", "keyTable"}
    assert {source for _, source in result.repaired} == {"om1"}
    assert _roots(trio[1]) == _roots(trio[0])
    assert not list(node_dir.glob("repair-trees*")), "the node's own trees are streamed to a "\
        "file, which goes once the repair ends"
    assert trio[1].digests() == trio[0].digests()
    assert marker.load(node_dir) is None


def test_a_range_no_peer_can_supply_keeps_the_marker_and_says_why(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    node_dir = _halted(trio[1])
    corrupt_copy = trio[2]                        # its checkpoint lost a row of the range
    batch = corrupt_copy.new_batch()
    corrupt_copy.batch_delete(batch, om_pb2.KEY, tables.key_key(VOLUME, BUCKETS[1], "key021"))
    corrupt_copy.write(batch)
    good = StoreReplica("om1", trio[0])
    peers = [good, StoreReplica("om3", corrupt_copy)]
    majority = _roots(trio[0])
    sources = {t: peers[1:] for t in majority}    # only the bad copy may be used
    sources["bucketTable"] = peers
    result = repair.repair(trio[1], node_dir, trio[1].transaction_info().applied_index, PARAMS,
                           majority, good.tree, sources)
    assert not result.cleared
    assert [u.key_range.table for u in result.unrepairable] == ["keyTable"]
    assert "om3: its" in result.unrepairable[0].describe()
    assert "do not hash to the majority's tree" in result.unrepairable[0].describe()
    kept = marker.load(node_dir)
    assert kept is not None
    assert kept.state == marker.REPAIRING
    assert any("keyTable" in why for why in kept.unrepairable)
    assert _roots(trio[1])["bucketTable"] == majority["bucketTable"], "what verified is written"
    assert _roots(trio[1])["keyTable"] != majority["keyTable"]
    again = _repair(trio[1], peers)                # a good source: finishes the job
    assert again.cleared
    assert marker.load(node_dir) is None


def test_an_unreachable_source_is_named_and_the_next_one_used(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0], broken=True),
                               StoreReplica("om3", trio[2])])
    assert result.cleared
    assert {source for _, source in result.repaired} == {"om3"}


class Crash(BaseException):
    pass


def test_a_crash_mid_repair_leaves_it_stopped_and_repairable(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    node_dir = _halted(trio[1])
    peers = [StoreReplica("om1", trio[0])]

    def crash(done: int) -> None:
        raise Crash(f"crashed after {done} range")

    with pytest.raises(Crash):
        _repair(trio[1], peers, crash)
    kept = marker.load(node_dir)
    assert kept is not None
    assert kept.stops_start
    assert kept.repaired == 1
    assert _roots(trio[1]) != _roots(trio[0])
    assert _repair(trio[1], peers).cleared
    assert trio[1].digests() == trio[0].digests()


def test_a_large_difference_copies_the_whole_table(trio: tuple[Store, Store, Store]) -> None:
    keys = [key for key, _ in trio[1].iterate(om_pb2.KEY)]
    batch = trio[1].new_batch()
    for key in keys[: len(keys) * 3 // 4]:
        trio[1].batch_delete(batch, om_pb2.KEY, key)
    trio[1].write(batch)
    _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0])])
    assert result.planned == (KeyRange("keyTable", b"", None),)
    assert result.cleared


# ------------------------------------------------------------------ range ---

def test_range_matches_only_the_majoritys_exact_rows(trio: tuple[Store, Store, Store]) -> None:
    tree = scan.compute_trees(trio[0], PARAMS).trees["keyTable"]
    spans = [KeyRange("keyTable", b"", None)]
    spans += [KeyRange("keyTable", a.start, b.end) for a, b in zip(tree.leaves[1:],
                                                                  tree.leaves[2:], strict=False)]
    for span in spans[:4]:
        rows = scan.read_range(trio[0], span)
        assert len(rows) >= 2
        assert merkle.range_matches(tree, span, rows)
        assert not merkle.range_matches(tree, span, rows[1:])            # a row missing
        assert not merkle.range_matches(tree, span, [*rows, (b"\xff", b"x")])  # out of range
        assert not merkle.range_matches(tree, span, rows[::-1])          # out of order
        assert not merkle.range_matches(tree, span, [(rows[0][0], b"other"), *rows[1:]])


# ----------------------------------------------------------------- marker ---

def test_the_marker_persists_and_an_unreadable_one_stops_the_node(tmp_path: Path) -> None:
    assert marker.load(tmp_path) is None
    found = marker.Marker(marker.DIVERGED, 12, ("keyTable",), 12)
    marker.save(tmp_path, found)
    loaded = marker.load(tmp_path)
    assert loaded is not None
    assert (loaded.state, loaded.position, loaded.tables) == ("diverged", 12, ("keyTable",))
    assert not loaded.stops_start
    assert marker.load(tmp_path) == loaded
    halted = loaded.moved(marker.HALTED, position=15)
    assert halted.stops_start
    assert halted.detected_at == 12
    marker.marker_path(tmp_path).write_text("{not json")
    with pytest.raises(marker.ReplicaHalted, match="unreadable"):
        marker.load(tmp_path)
    marker.marker_path(tmp_path).write_text('{"state": "fine", "position": 3}')
    with pytest.raises(marker.ReplicaHalted, match="no valid state"):
        marker.load(tmp_path)
    marker.clear(tmp_path)
    assert marker.load(tmp_path) is None


def test_file_system_tables_are_verified_and_repaired(trio: tuple[Store, Store, Store]) -> None:
    """directoryTable and fileTable rows (an FSO bucket's) are compared and repaired like
    any other: a changed directory and a missing file row are named, then restored."""
    directory = tables.fs_key(1, 2, 2, "dir")
    file = tables.fs_key(1, 2, 3, "file")
    for store in trio:
        batch = store.new_batch()
        store.batch_put(batch, om_pb2.DIRECTORY, directory, om_pb2.DirectoryInfo(
            name="dir", object_id=3, parent_object_id=2).SerializeToString())
        store.batch_put(batch, om_pb2.FILE, file, om_pb2.KeyInfo(
            key_name="file", object_id=4, parent_object_id=3).SerializeToString())
        store.write(batch)
    batch = trio[1].new_batch()
    trio[1].batch_put(batch, om_pb2.DIRECTORY, directory, om_pb2.DirectoryInfo(
        name="dir", object_id=9, parent_object_id=2).SerializeToString())
    trio[1].batch_delete(batch, om_pb2.FILE, file)
    trio[1].write(batch)
    replicas = {f"om{i + 1}": StoreReplica(f"om{i + 1}", s) for i, s in enumerate(trio)}
    found = compare.compare(9, {n: _roots(r.store) for n, r in replicas.items()}, replicas, 3)
    assert {(d.row.key, d.row.kind) for d in found.differences} == {
        (directory, "different"), (file, "missing")}
    _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0]), StoreReplica("om3", trio[2])])
    assert result.cleared
    assert {r.table for r in result.planned} == {"directoryTable", "fileTable"}
    assert trio[1].digests() == trio[0].digests()


def test_every_table_is_named_so_verification_covers_it() -> None:
    assert set(tables.TABLE_NAMES) == set(om_pb2.Table.values()) - {om_pb2.TABLE_UNSPECIFIED}
