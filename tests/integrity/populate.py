"""Real rows for the integrity tests, written through the real handlers and apply."""

from __future__ import annotations

from om.client import requests as build
from om.schema.tables import TableId
from om.statemachine.digests import Digests
from om.statemachine.store import Store
from tests.handler_harness import LEADER, Harness

VOLUME = "vol"
BUCKETS = ("bkt1", "bkt2")


def populate(store: Store, keys: int = 30, flow: str = LEADER) -> Harness:
    """A volume, two buckets, committed, overwritten, deleted and open keys.

    Key i of ``keys`` goes to bucket ``BUCKETS[i % 2]`` as ``key<i>`` with 10 + i
    bytes at replication 3; key001 is overwritten (a deletedTable row), key000
    deleted, and one key left open. ``flow`` picks the harness's execution flow
    (close an old-flow harness when done).
    """
    assert keys >= 2
    harness = Harness(store, flow=flow)
    harness.create_volume(VOLUME)
    for bucket in BUCKETS:
        harness.create_bucket(VOLUME, bucket)
    for i in range(keys):
        harness.put_key(VOLUME, BUCKETS[i % 2], f"key{i:03d}", data_size=10 + i)
    harness.put_key(VOLUME, BUCKETS[1], "key001", data_size=99)
    harness.ok(build.delete_key(VOLUME, BUCKETS[0], "key000"))
    harness.open_key(VOLUME, BUCKETS[0], "still-open", data_size=5)
    return harness


def write_through(store: Store, changes: dict[tuple[TableId, bytes], bytes | None]) -> None:
    """Rows changed as a (wrong) apply changes them: the digests follow, so the replica
    differs from the others in its digests too (a lost or an extra write)."""
    with Digests.attach(store).changes() as digest:
        batch = store.new_batch()
        for (table, key), value in changes.items():
            if value is None:
                store.batch_delete(batch, table, key)
                digest.delete(table, key)
            else:
                store.batch_put(batch, table, key, value)
                digest.put(table, key, value)
        digest.write(batch)
