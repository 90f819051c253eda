"""The replicated log entry: a tag byte, then a protobuf message.

* ``B`` + PersistDbBatch: the leader flow's batch of executed changes.
* ``R`` + ReplicatedRequest: the old flow's single request, executed at apply.
"""

from __future__ import annotations

from om.protocol import om_pb2

PERSIST_DB = b"B"
REPLICATED_REQUEST = b"R"


def encode_batch(batch: om_pb2.PersistDbBatch) -> bytes:
    """A leader-flow log entry."""
    return PERSIST_DB + batch.SerializeToString(deterministic=True)


def encode_request(request: om_pb2.ReplicatedRequest) -> bytes:
    """An old-flow log entry."""
    return REPLICATED_REQUEST + request.SerializeToString(deterministic=True)


def decode(entry: bytes) -> om_pb2.PersistDbBatch | om_pb2.ReplicatedRequest:
    """The message a log entry carries. A malformed committed entry is a bug."""
    tag, payload = entry[:1], entry[1:]
    if tag == PERSIST_DB:
        return om_pb2.PersistDbBatch.FromString(payload)
    assert tag == REPLICATED_REQUEST, f"unknown log entry tag {tag!r}"
    return om_pb2.ReplicatedRequest.FromString(payload)
