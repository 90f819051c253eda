"""Scans of real RocksDB stores: trees, checkpoints, the trees file, the rate limit."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.integrity import merkle, scan
from om.integrity.merkle import KeyRange, RowDiff, TreeParams
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.store import Store
from tests.integrity.populate import BUCKETS, VOLUME, populate

PARAMS = TreeParams(salt=b"verify-1", leaf_bits=2, fanout_bits=1)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    yield a, b
    a.close()
    b.close()


def row_diffs(a: Store, b: Store, forest_a: merkle.Forest,
              forest_b: merkle.Forest) -> list[RowDiff]:
    """What b holds differently from a, found the way verify finds it: trees, ranges, rows."""
    found: list[RowDiff] = []
    for name in sorted(forest_a.trees):
        for key_range in merkle.diff(forest_a.trees[name], forest_b.trees[name]):
            found += merkle.compare_rows(name, scan.read_range(a, key_range),
                                         scan.read_range(b, key_range))
    return found


def test_replicas_that_applied_the_same_requests_have_equal_trees(
        stores: tuple[Store, Store]) -> None:
    a, b = stores
    harness = populate(a)
    populate(b)
    forest_a, forest_b = scan.compute_trees(a, PARAMS), scan.compute_trees(b, PARAMS)
    assert forest_a.roots() == forest_b.roots()
    assert set(forest_a.trees) == set(tables.TABLE_NAMES.values())
    assert (forest_a.applied_index, forest_a.term) == (harness.position, 1)
    assert forest_a.trees["keyTable"].rows == a.count(om_pb2.KEY) == 29
    assert len(forest_a.trees["keyTable"].leaves) > 1


def test_a_row_changed_deleted_or_added_offline_is_named_exactly(
        stores: tuple[Store, Store]) -> None:
    a, b = stores
    populate(a)
    populate(b)
    changed_key = tables.key_key(VOLUME, BUCKETS[0], "key010")
    deleted_key = tables.bucket_key(VOLUME, BUCKETS[1])
    added_key = tables.open_key_key(VOLUME, BUCKETS[0], "ghost", 77)
    batch = b.new_batch()
    b.batch_put(batch, om_pb2.KEY, changed_key, b"tampered")
    b.batch_delete(batch, om_pb2.BUCKET, deleted_key)
    b.batch_put(batch, om_pb2.OPEN_KEY, added_key, b"ghost")
    b.write(batch)
    found = row_diffs(a, b, scan.compute_trees(a, PARAMS), scan.compute_trees(b, PARAMS))
    assert [(d.table, d.key, d.kind) for d in found] == [
        ("bucketTable", deleted_key, "missing"),
        ("keyTable", changed_key, "different"),
        ("openKeyTable", added_key, "extra"),
    ]
    assert found[1].expected == a.get(om_pb2.KEY, changed_key)
    assert found[1].actual == b"tampered"


def test_a_checkpoint_keeps_the_position_it_was_taken_at(
        stores: tuple[Store, Store], tmp_path: Path) -> None:
    a, _ = stores
    harness = populate(a, keys=10)
    before = scan.compute_trees(a, PARAMS)
    checkpoint = scan.take_checkpoint(a, tmp_path / "verify-checkpoint")
    harness.put_key(VOLUME, BUCKETS[0], "later", data_size=1)     # applied after the verify entry
    at_checkpoint = scan.compute_checkpoint_trees(checkpoint, PARAMS)
    assert at_checkpoint == before
    assert scan.compute_trees(a, PARAMS).applied_index == before.applied_index + 2
    assert scan.compute_trees(a, PARAMS).roots() != before.roots()


def test_read_range_is_half_open_and_pages(stores: tuple[Store, Store],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = stores
    populate(a, keys=12)
    monkeypatch.setattr(scan, "PAGE_ROWS", 3)
    every = [key for key, _ in a.iterate(om_pb2.KEY)]
    assert [k for k, _ in scan.read_range(a, KeyRange("keyTable", b"", None))] == every
    middle = KeyRange("keyTable", every[2], every[9])
    assert [k for k, _ in scan.read_range(a, middle)] == every[2:9]
    between = KeyRange("keyTable", every[2] + b"\x00", every[9] + b"\x00")
    assert [k for k, _ in scan.read_range(a, between)] == every[3:10]


# ------------------------------------------------------------ the trees file ---

def test_trees_persist_beside_the_database_and_load_back(
        stores: tuple[Store, Store]) -> None:
    a, _ = stores
    populate(a, keys=5)
    forest = scan.compute_trees(a, PARAMS)
    path = scan.trees_path(a.path)
    assert path.parent == a.path.parent
    assert scan.load_trees(path) is None
    scan.save_trees(path, forest)
    assert scan.load_trees(path) == forest
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_torn_tmp_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    forest = merkle.Forest(3, 1, {"keyTable": merkle.build("keyTable", [(b"k", b"v")])})
    path = tmp_path / "db.merkle"
    scan.save_trees(path, forest)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(path.read_bytes()[:20])          # a crash mid-write of the next one
    assert scan.load_trees(path) == forest
    newer = merkle.Forest(4, 1, forest.trees)
    scan.save_trees(path, newer)
    assert scan.load_trees(path) == newer


def test_a_corrupt_trees_file_loads_as_none(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    forest = merkle.Forest(3, 1, {"keyTable": merkle.build("keyTable", [(b"k", b"v")])})
    path = tmp_path / "db.merkle"
    scan.save_trees(path, forest)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert scan.load_trees(path) is None
    assert "checksum" in caplog.text
    path.write_bytes(b"something else entirely")
    assert scan.load_trees(path) is None


# ------------------------------------------------------------ the rate limit ---

class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_rate_limit_paces_rows_and_bytes() -> None:
    fake = FakeTime()
    limit = scan.RateLimit(rows_per_s=100, clock=fake.clock, sleep=fake.sleep)
    for _ in range(1000):
        limit.charge(1, 10)
    assert fake.now - 100 == pytest.approx(10, abs=0.011)
    assert all(s >= 0.01 for s in fake.sleeps)        # short waits are batched
    assert len(fake.sleeps) < 1000
    fake = FakeTime()
    limit = scan.RateLimit(rows_per_s=1000, bytes_per_s=1000, clock=fake.clock, sleep=fake.sleep)
    for _ in range(50):
        limit.charge(1, 100)
    assert fake.now - 100 == pytest.approx(5, abs=0.011)   # bytes bind, not rows


def test_a_scan_keeps_to_its_rate(stores: tuple[Store, Store]) -> None:
    a, _ = stores
    populate(a, keys=40)
    rows = sum(a.count(table) for table in tables.TABLE_NAMES)
    rate = rows / 0.2                                   # the scan must take 0.2 s
    started = time.monotonic()
    limited = scan.compute_trees(a, PARAMS, scan.RateLimit(rows_per_s=rate))
    elapsed = time.monotonic() - started
    assert 0.18 <= elapsed < 2.0
    assert limited == scan.compute_trees(a, PARAMS)


def test_a_throttled_view_charges_what_it_reads(stores: tuple[Store, Store]) -> None:
    a, _ = stores
    populate(a, keys=4)
    fake = FakeTime()
    limit = scan.RateLimit(rows_per_s=1e9, clock=fake.clock, sleep=fake.sleep)
    view = scan.ThrottledView(a, limit)
    assert view.get(om_pb2.VOLUME, tables.volume_key(VOLUME)) is not None
    assert len(view.scan(om_pb2.KEY, b"", None, 100)) == 3   # key000 was deleted
    assert limit.rows == 4
    assert limit.bytes > 0
