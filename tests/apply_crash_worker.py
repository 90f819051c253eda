"""Applies synthetic entries forever, to be killed with SIGKILL by tests/test_apply.py.

Batch at position p writes ROWS rows "/v/b/p{p}-{i}" to keyTable, a +1 byte and +1
namespace delta to bucket /v/b, and one retry-cache row; so after a crash the
store shows whether any batch landed partially. With ``merged`` each position is a
merged entry ("M") of SLICES such batches (``slices_for``), so the store shows
whether any entry landed partially.
"""

from __future__ import annotations

import sys
from pathlib import Path

from om.protocol import merged_entry, om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store

ROWS = 200
SLICES = 3
BUCKET_OBJECT_ID = 7


def batch_for(position: int) -> om_pb2.PersistDbBatch:
    batch = om_pb2.PersistDbBatch(batch_id=position, timestamp_ms=1000 + position,
                                  managed_index=position, request_count=1)
    for i in range(ROWS):
        batch.ops.add(table=om_pb2.KEY, key=f"/v/b/p{position}-{i}".encode(), value=b"x" * 100)
    batch.quota_deltas.add(table=om_pb2.BUCKET, key=tables.bucket_key("v", "b"),
                           object_id=BUCKET_OBJECT_ID, bytes_delta=1, namespace_delta=1)
    batch.replies.add(client_id="c", call_id=position, timestamp_ms=1000 + position,
                      response=b"r")
    return batch


def slices_for(position: int) -> list[om_pb2.PersistDbBatch]:
    """SLICES batches for one merged entry at ``position``: the first is
    ``batch_for(position)``, the others write rows "/v/b/p{p}-s{slice}-{i}" and charge
    the same bucket, each with a retry-cache row of its own."""
    batches = [batch_for(position)]
    for part in range(1, SLICES):
        batch = batch_for(position)
        for i, op in enumerate(batch.ops):
            op.key = f"/v/b/p{position}-s{part}-{i}".encode()
        batch.replies[0].call_id = position * SLICES + part + 1_000_000
        batches.append(batch)
    return batches


def merged_for(position: int) -> bytes:
    """The merged entry of ``slices_for(position)``, as the Raft process appends it."""
    return merged_entry.merge([
        log_entry.encode_sealed(b.SerializeToString(deterministic=True), merged=True)
        for b in slices_for(position)])


def seed(store: Store) -> None:
    if store.get(om_pb2.BUCKET, tables.bucket_key("v", "b")) is not None:
        return
    bucket = om_pb2.BucketInfo(volume_name="v", bucket_name="b", object_id=BUCKET_OBJECT_ID,
                               quota_in_bytes=-1, quota_in_namespace=-1)
    write = store.new_batch()
    store.batch_put(write, om_pb2.BUCKET, tables.bucket_key("v", "b"), bucket.SerializeToString())
    store.write(write)


def main(path: Path, merged: bool) -> None:
    store = Store(path)
    seed(store)
    machine = StateMachine(store)
    position = machine.applied_index
    print("ready", flush=True)
    while True:
        position += 1
        if merged:
            machine.apply_entry(position, merged_for(position))
        else:
            machine.apply(position, batch_for(position))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] == ["merged"])
