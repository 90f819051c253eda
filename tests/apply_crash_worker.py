"""Applies synthetic batches forever, to be killed with SIGKILL by tests/test_apply.py.

Batch at position p writes ROWS rows "/v/b/p{p}-{i}" to keyTable, a +1 byte and +1
namespace delta to bucket /v/b, and one retry-cache row; so after a crash the
store shows whether any batch landed partially.
"""

from __future__ import annotations

import sys
from pathlib import Path

from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store

ROWS = 200
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


def seed(store: Store) -> None:
    if store.get(om_pb2.BUCKET, tables.bucket_key("v", "b")) is not None:
        return
    bucket = om_pb2.BucketInfo(volume_name="v", bucket_name="b", object_id=BUCKET_OBJECT_ID,
                               quota_in_bytes=-1, quota_in_namespace=-1)
    write = store.new_batch()
    store.batch_put(write, om_pb2.BUCKET, tables.bucket_key("v", "b"), bucket.SerializeToString())
    store.write(write)


def main(path: Path) -> None:
    store = Store(path)
    seed(store)
    machine = StateMachine(store)
    position = machine.applied_index
    print("ready", flush=True)
    while True:
        position += 1
        machine.apply(position, batch_for(position))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
