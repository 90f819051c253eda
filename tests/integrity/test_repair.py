"""Compare and repair over real RocksDB stores and their digests, peers behind the port.

A divergence is made as a wrong apply would make it: rows changed through the
digests (``Digests.changes``), so the replica's digests describe its own rows
and differ from the others'. A row changed behind the store's back leaves the
digests alone: no verify sees it (the scrub does, tests/integrity/test_scrub.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from om.integrity import compare, digest_tree, marker, repair
from om.integrity.compare import ReplicaError
from om.integrity.digest_tree import Shape
from om.integrity.scan import TABLE_IDS
from om.integrity.store_digests import StoreTree
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import digests
from om.statemachine.digests import Digests
from om.statemachine.store import Store
from tests.integrity.populate import BUCKETS, VOLUME, populate, write_through

POSITION = 9


@dataclass
class StoreReplica:
    """A peer answering from a store (a checkpoint at the position, in the real thing)."""

    node_id: str
    store: Store
    broken: bool = False

    def tree(self, table: str) -> StoreTree:
        meta = Digests.attach(self.store).meta
        return StoreTree(self.store, TABLE_IDS[table], Shape(meta.leaf_bits, meta.fanout_bits))

    def leaf_rows(self, table: str, leaves: Sequence[int],
                  values: bool) -> list[tuple[int, bytes, int, bytes]]:
        if self.broken:
            raise ReplicaError(f"{self.node_id} has no checkpoint at that position")
        hasher = Digests.attach(self.store).hasher
        found = []
        for leaf in sorted(leaves):
            for key in digests.leaf_keys(self.store, TABLE_IDS[table], leaf, None, 1 << 20):
                value = self.store.get(TABLE_IDS[table], key) or b""
                found.append((leaf, key, hasher.digest(key, value), value if values else b""))
        return found


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
    write_through(store, {(om_pb2.BUCKET, bucket): info.SerializeToString(),
                          (om_pb2.KEY, deleted): None,
                          (om_pb2.KEY, extra): store.get(om_pb2.KEY, deleted) or b""})
    return {bucket: "different", deleted: "missing", extra: "extra"}


def _roots(store: Store) -> dict[str, bytes]:
    return compare.root_bytes(repair.local_roots(store))


def _compare(trio: tuple[Store, ...], answering: int = 3) -> compare.Comparison:
    replicas = {f"om{i + 1}": StoreReplica(f"om{i + 1}", s) for i, s in enumerate(trio)}
    chosen = dict(list(replicas.items())[:answering])
    return compare.compare(POSITION, {n: _roots(r.store) for n, r in chosen.items()},
                           chosen, 3)


def _halted(store: Store) -> Path:
    node_dir = store.path.parent
    position = store.transaction_info().applied_index
    marker.save(node_dir, marker.Marker(marker.HALTED, position, ("keyTable",), position))
    return node_dir


def _repair(store: Store, peers: list[StoreReplica],
            after_chunk: object = None) -> repair.RepairResult:
    majority = _roots(peers[0].store)
    node_dir = store.path.parent
    hook = after_chunk if callable(after_chunk) else (lambda done: None)
    return repair.repair(store, lambda: marker.load(node_dir),
                         lambda found: marker.save(node_dir, found),
                         store.transaction_info().applied_index, majority, peers[0].tree,
                         {t: peers for t in majority}, hook)


# ---------------------------------------------------------------- compare ---

def test_equal_replicas_have_equal_roots_and_compare_clean(
        trio: tuple[Store, Store, Store]) -> None:
    assert _roots(trio[0]) == _roots(trio[1]) == _roots(trio[2])
    assert _compare(trio).clean


def test_compare_names_the_minoritys_rows_exactly(trio: tuple[Store, Store, Store]) -> None:
    expected = _damage(trio[1])
    found = _compare(trio)
    assert found.verdict.minority == {"om2"}
    assert found.diverged == {"om2"}
    assert {d.row.key: d.row.kind for d in found.differences} == expected
    assert all(d.node_id == "om2" and d.reference == "om1" for d in found.differences)
    assert not found.drift


def test_the_descent_reads_only_the_differing_subtrees(
        trio: tuple[Store, Store, Store]) -> None:
    """One changed row: a level request a level, each naming only the differing parent."""
    key = tables.key_key(VOLUME, BUCKETS[0], "key010")
    write_through(trio[1], {(om_pb2.KEY, key): b"changed"})
    asked: list[tuple[int, list[int]]] = []
    tree = StoreReplica("om1", trio[0]).tree("keyTable")

    class Counting:
        shape = tree.shape

        def root(self) -> digest_tree.Digest:
            return tree.root()

        def children(self, level: int, parents: Sequence[int]) -> dict[int, digest_tree.Digest]:
            asked.append((level, list(parents)))
            return tree.children(level, parents)

    leaves = digest_tree.differing_leaves(Counting(), StoreReplica("om2", trio[1]).tree(
        "keyTable"))
    meta = Digests.attach(trio[1]).meta
    assert leaves == [digests.hasher_of(meta).leaf(key)]
    assert [level for level, _ in asked] == list(range(tree.shape.depth - 1, -1, -1))
    assert all(len(parents) == 1 for _, parents in asked)


def test_with_no_majority_nothing_is_named(trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    write_through(trio[2], {(om_pb2.KEY, tables.key_key(VOLUME, BUCKETS[0], "other")): b"x"})
    found = _compare(trio)
    assert found.verdict.no_majority == ["keyTable"]
    assert not found.differences
    assert not found.clean


def test_a_silent_node_counts_against_the_majority(trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    found = _compare(trio, answering=2)      # om3 silent: om1 and om2 each hold one of 3
    assert found.verdict.no_majority
    assert not found.differences


def test_a_leaf_digest_changed_alone_is_drift_not_divergence(
        trio: tuple[Store, Store, Store]) -> None:
    key = tables.key_key(VOLUME, BUCKETS[0], "key010")
    kept = Digests.attach(trio[2])
    leaf = kept.hasher.leaf(key)
    batch = trio[2].new_batch()          # bit rot in a digest row, behind the store's back
    trio[2].batch_put(batch, om_pb2.DIGESTS, digests.leaf_key(om_pb2.KEY, leaf), bytes(39) + b"\1")
    trio[2].write(batch)
    trio[2].close()
    store = Store(trio[2].path)
    found = _compare((trio[0], trio[1], store))
    assert found.verdict.minority == {"om3"}
    assert found.drift == (compare.Drift("om3", "keyTable", leaf),)
    assert found.diverged == frozenset()
    assert not found.differences
    store.close()


# ----------------------------------------------------------------- repair ---

def test_repair_restores_the_majoritys_roots_and_clears_the_marker(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    node_dir = _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0]), StoreReplica("om3", trio[2])])
    assert result.cleared
    assert set(result.planned) == {"bucketTable", "keyTable"}
    assert result.repaired == result.planned
    assert result.rows_written == 3
    assert _roots(trio[1]) == _roots(trio[0])
    assert trio[1].digests() == trio[0].digests()
    assert marker.load(node_dir) is not None     # the caller clears it (om admin repair)


def test_a_leaf_no_peer_can_supply_keeps_the_marker_and_says_why(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    _damage(trio[2])        # the only other source holds the same damage
    node_dir = _halted(trio[1])
    majority = _roots(trio[0])
    result = repair.repair(trio[1], lambda: marker.load(node_dir),
                           lambda found: marker.save(node_dir, found),
                           trio[1].transaction_info().applied_index, majority,
                           StoreReplica("om1", trio[0]).tree,
                           {t: [StoreReplica("om3", trio[2])] for t in majority})
    assert not result.cleared
    assert result.unrepairable
    assert "do not add up to the majority's digests" in result.unrepairable[0].describe()
    kept = marker.load(node_dir)
    assert kept is not None
    assert kept.state == marker.REPAIRING
    assert kept.unrepairable


def test_an_unreachable_source_is_named_and_the_next_one_used(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0], broken=True),
                               StoreReplica("om3", trio[2])])
    assert result.cleared
    assert result.sources == ("om3",)


def test_a_crash_mid_repair_leaves_it_stopped_and_repairable(
        trio: tuple[Store, Store, Store]) -> None:
    _damage(trio[1])
    node_dir = _halted(trio[1])

    def crash(done: int) -> None:
        raise KeyboardInterrupt("killed after the first chunk")

    with pytest.raises(KeyboardInterrupt):
        _repair(trio[1], [StoreReplica("om1", trio[0])], crash)
    kept = marker.load(node_dir)
    assert kept is not None
    assert kept.stops_start
    result = _repair(trio[1], [StoreReplica("om1", trio[0])])
    assert result.cleared
    assert _roots(trio[1]) == _roots(trio[0])


def test_file_system_tables_are_verified_and_repaired(trio: tuple[Store, Store, Store]) -> None:
    directory = tables.fs_key(1, 2, 2, "dir")
    file = tables.fs_key(1, 2, 3, "file")
    for store in trio:
        write_through(store, {
            (om_pb2.DIRECTORY, directory): om_pb2.DirectoryInfo(
                name="dir", object_id=3, parent_object_id=2).SerializeToString(),
            (om_pb2.FILE, file): om_pb2.KeyInfo(
                key_name="file", object_id=4, parent_object_id=3).SerializeToString()})
    write_through(trio[1], {(om_pb2.DIRECTORY, directory): om_pb2.DirectoryInfo(
        name="dir", object_id=9, parent_object_id=2).SerializeToString(),
        (om_pb2.FILE, file): None})
    found = _compare(trio)
    assert {(d.row.key, d.row.kind) for d in found.differences} == {
        (directory, "different"), (file, "missing")}
    _halted(trio[1])
    result = _repair(trio[1], [StoreReplica("om1", trio[0]), StoreReplica("om3", trio[2])])
    assert result.cleared
    assert set(result.planned) == {"directoryTable", "fileTable"}
    assert trio[1].digests() == trio[0].digests()


# ----------------------------------------------------------------- marker ---

def test_the_marker_persists_and_an_unreadable_one_stops_the_node(tmp_path: Path) -> None:
    assert marker.load(tmp_path) is None
    found = marker.Marker(marker.DIVERGED, 12, ("keyTable",), 12)
    marker.save(tmp_path, found)
    loaded = marker.load(tmp_path)
    assert loaded is not None
    assert (loaded.state, loaded.position, loaded.tables) == ("diverged", 12, ("keyTable",))
    assert not loaded.stops_start
    halted = loaded.moved(marker.HALTED, position=15)
    assert halted.stops_start
    assert halted.detected_at == 12
    marker.marker_path(tmp_path).write_text("{not json")
    with pytest.raises(marker.ReplicaHalted, match="unreadable"):
        marker.load(tmp_path)
    marker.clear(tmp_path)
    assert marker.load(tmp_path) is None


def test_a_node_marked_by_two_writers_at_once_is_marked(tmp_path: Path) -> None:
    """The continuous self-check (a thread) and an admin's MarkDiverged (the loop) may
    save the marker together; each save lands whole. Red: writers sharing one
    temporary file rename it from under each other (FileNotFoundError, node unmarked)."""
    errors: list[BaseException] = []

    def mark(position: int) -> None:
        try:
            for _ in range(40):
                marker.save(tmp_path, marker.Marker(marker.DIVERGED, position, ("keyTable",),
                                                    position))
        except BaseException as error:   # reported by the assert below
            errors.append(error)

    writers = [threading.Thread(target=mark, args=(n,)) for n in range(1, 7)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=60)
    assert errors == []
    loaded = marker.load(tmp_path)
    assert loaded is not None
    assert loaded.state == marker.DIVERGED


def test_every_table_is_digested_so_verification_covers_it() -> None:
    assert set(tables.TABLE_NAMES) == (set(om_pb2.Table.values())
                                       - {om_pb2.TABLE_UNSPECIFIED, om_pb2.DIGESTS})
