"""The replicated log entry: a tag byte, then a protobuf message.

* ``B`` + PersistDbBatch: the leader flow's batch of executed changes.
* ``R`` + ReplicatedRequest: the old flow's single request, executed at apply.
* ``V`` + PersistDbBatch with ``verify`` set and no ops: a verify entry. Both
  flows apply it as an empty batch (its position, term and time); its own tag
  lets the node see it without decoding every batch, and checkpoint there
  (``om.integrity.verifier``).
"""

from __future__ import annotations

from om.protocol import om_pb2

PERSIST_DB = b"B"
REPLICATED_REQUEST = b"R"
VERIFY = b"V"


def encode_batch(batch: om_pb2.PersistDbBatch) -> bytes:
    """A leader-flow log entry."""
    return PERSIST_DB + batch.SerializeToString(deterministic=True)


def encode_sealed(payload: bytes) -> bytes:
    """A leader-flow log entry from a batch already encoded (``BatchBuilder.seal``)."""
    return PERSIST_DB + payload


def encode_verify(batch: om_pb2.PersistDbBatch) -> bytes:
    """A verify entry: an empty batch carrying the verify marker."""
    assert batch.HasField("verify"), "a verify entry carries its marker"
    assert not batch.ops, "a verify entry changes no row"
    assert not batch.quota_deltas, "a verify entry changes no row"
    assert not batch.replies, "a verify entry changes no row"
    assert not batch.reply_rows, "a verify entry changes no row"
    assert not batch.retry_expiry, "a verify entry changes no row"
    return VERIFY + batch.SerializeToString(deterministic=True)


def is_verify(entry: bytes) -> bool:
    """Whether ``entry`` is a verify entry (a one-byte check, no decoding)."""
    return entry[:1] == VERIFY


def encode_request(request: om_pb2.ReplicatedRequest) -> bytes:
    """An old-flow log entry."""
    return REPLICATED_REQUEST + request.SerializeToString(deterministic=True)


def decode(entry: bytes) -> om_pb2.PersistDbBatch | om_pb2.ReplicatedRequest:
    """The message a log entry carries. A malformed committed entry is a bug."""
    tag, payload = entry[:1], entry[1:]
    if tag in (PERSIST_DB, VERIFY):
        return om_pb2.PersistDbBatch.FromString(payload)
    assert tag == REPLICATED_REQUEST, f"unknown log entry tag {tag!r}"
    return om_pb2.ReplicatedRequest.FromString(payload)
