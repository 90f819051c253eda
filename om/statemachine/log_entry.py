"""The replicated log entry: a tag byte, then a protobuf message.

* ``M`` + MergedEntry: the leader flow's sealed batches of executed changes, one
  slice per batch (``om.protocol.merged_entry``: the Raft process merges the
  batches that reached it since its last append into one entry). With one shard
  (S = 1) every slice is shard 0's, and a store applies all of an entry's slices
  in one write batch at the entry's position (``om.statemachine.apply``).
* ``B`` + PersistDbBatch: one batch alone: a new leader's barrier, the old flow's
  expiry sweeps and read rounds, and every leader-flow batch of a store whose
  layout is below MERGED_ENTRIES (not finalized yet) or of journals written
  before ``M``.
* ``R`` + ReplicatedRequest: the old flow's single request, executed at apply.
* ``V`` + PersistDbBatch with ``verify`` set and no ops: a verify entry. Both
  flows apply it as an empty batch (its position, term and time); its own tag
  lets the node see it without decoding every batch, and checkpoint there
  (``om.integrity.verifier``).
"""

from __future__ import annotations

from om.protocol import merged_entry, om_pb2

MERGED = merged_entry.MERGED
SHARD = 0   # the coordinator's shard, and with S = 1 the only one (docs/SHARDS.md)
PERSIST_DB = b"B"
REPLICATED_REQUEST = b"R"
VERIFY = b"V"


def encode_batch(batch: om_pb2.PersistDbBatch) -> bytes:
    """A leader-flow log entry."""
    return PERSIST_DB + batch.SerializeToString(deterministic=True)


def encode_sealed(payload: bytes, merged: bool, shard: int = SHARD) -> bytes:
    """A leader-flow log entry from a batch already encoded (``BatchBuilder.seal``) by
    the pipeline of ``shard``: ``merged``, a merged entry of one slice of that shard,
    which the Raft process may merge with others; else a ``B`` entry, byte for byte
    what releases before ``M`` wrote (the store's layout is below MERGED_ENTRIES,
    ``om/executor/admin/upgrade.py``: a node of such a release may still be a
    follower, and would fail-stop on ``M``). A ``B`` entry is every shard's (the Raft
    process hands it whole to each), so only shard 0 may seal one: shards above 0
    exist only on a layout with ``M`` (``config._validate_shards``)."""
    if merged:
        return merged_entry.encode_slice(shard, payload)
    assert shard == SHARD, f"shard {shard} sealed a B entry: every shard would apply it"
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


def is_request(entry: bytes) -> bool:
    """Whether ``entry`` is an old-flow request (a one-byte check, no decoding)."""
    return entry[:1] == REPLICATED_REQUEST


def decode_batches(entry: bytes, shard: int = SHARD) -> list[om_pb2.PersistDbBatch]:
    """The batches a ``B``, ``V`` or ``M`` entry carries for the store of ``shard``, in
    log order: an ``M`` entry's slices, every one that shard's or every shard's (the
    Raft process hands each shard only those: ``om.consensus.pysyncobj.shard_forwarding``),
    any other's one batch."""
    if entry[:1] != MERGED:
        message = decode(entry)
        assert isinstance(message, om_pb2.PersistDbBatch), "an old-flow entry is no batch"
        return [message]
    parts = merged_entry.slices(entry)
    assert all(part.shard in (shard, merged_entry.EVERY_SHARD) for part in parts), \
        f"a slice not shard {shard}'s"
    return [om_pb2.PersistDbBatch.FromString(part.batch) for part in parts]


def decode(entry: bytes) -> om_pb2.PersistDbBatch | om_pb2.ReplicatedRequest:
    """The message a ``B``, ``V`` or ``R`` entry carries (``M``: ``decode_batches``). A
    malformed committed entry is a bug."""
    tag, payload = entry[:1], entry[1:]
    if tag in (PERSIST_DB, VERIFY):
        return om_pb2.PersistDbBatch.FromString(payload)
    assert tag == REPLICATED_REQUEST, f"unknown log entry tag {tag!r}"
    return om_pb2.ReplicatedRequest.FromString(payload)
