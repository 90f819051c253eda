"""The store's parsed rows (``Store.parsed``): shared between readers until the next
write, never served after the write that changed them, and never changed by a reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.rows import read_bucket
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.store import Store
from tests.handler_harness import Harness

BUCKET_KEY = tables.bucket_key("vol1", "bucket1")


def _bucket(used_bytes: int) -> bytes:
    return om_pb2.BucketInfo(volume_name="vol1", bucket_name="bucket1", object_id=7,
                             used_bytes=used_bytes).SerializeToString(deterministic=True)


def _put(store: Store, value: bytes) -> None:
    batch = store.new_batch()
    store.batch_put(batch, om_pb2.BUCKET, BUCKET_KEY, value)
    store.write(batch)


def _parse(store: Store) -> om_pb2.BucketInfo | None:
    return store.parsed(om_pb2.BUCKET, BUCKET_KEY, om_pb2.BucketInfo.FromString)


def test_readers_share_a_row_until_a_write_changes_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    assert _parse(store) is None
    _put(store, _bucket(1))
    first = _parse(store)
    assert first is not None
    assert first.used_bytes == 1
    assert _parse(store) is first            # parsed once, shared
    _put(store, _bucket(2))                  # the write drops it: never served again
    second = _parse(store)
    assert second is not None
    assert second.used_bytes == 2
    assert second is not first


def test_a_missing_row_is_found_after_the_write_that_adds_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    assert _parse(store) is None
    assert _parse(store) is None
    _put(store, _bucket(5))
    found = _parse(store)
    assert found is not None
    assert found.used_bytes == 5


def test_a_snapshots_store_swap_drops_the_rows(tmp_path: Path) -> None:
    other = Store(tmp_path / "other")
    _put(other, _bucket(9))
    other.checkpoint(tmp_path / "checkpoint")
    other.close()
    store = Store(tmp_path / "db")
    _put(store, _bucket(1))
    assert (_parse(store) or om_pb2.BucketInfo()).used_bytes == 1
    store.replace_with(tmp_path / "checkpoint")
    assert (_parse(store) or om_pb2.BucketInfo()).used_bytes == 9


def test_a_reader_that_changes_a_shared_row_is_caught_at_the_next_write(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    _put(store, _bucket(1))
    shared = _parse(store)
    assert shared is not None
    shared.used_bytes = 1000     # a bug: every later reader would see it
    with pytest.raises(AssertionError, match="mutated"):
        _put(store, _bucket(2))


def test_a_quota_check_sees_the_usage_the_last_apply_charged(tmp_path: Path) -> None:
    """A bucket row read (and kept parsed) by a handler, then charged by an applied
    batch: the next handler's quota check counts the charge (a stale row would let
    the second key past a namespace quota of one)."""
    harness = Harness(Store(tmp_path / "db"))
    harness.create_volume("vol1")
    harness.create_bucket("vol1", "bucket1", quota_in_namespace=1)
    first = harness.open_key("vol1", "bucket1", "k1")
    second = harness.open_key("vol1", "bucket1", "k2")
    assert read_bucket(harness.store, "vol1", "bucket1").used_namespace == 0
    harness.commit("vol1", "bucket1", "k1", first.client_session_id, 0)
    assert read_bucket(harness.store, "vol1", "bucket1").used_namespace == 1
    refused = harness.run(build.commit_key("vol1", "bucket1", "k2",
                                           second.client_session_id, 0))
    assert refused.status == om_pb2.QUOTA_EXCEEDED, refused
