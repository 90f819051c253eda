"""The merged log entry, tag ``M``: the shards' sealed sub-batches at one log position.

``b"M"`` + a serialized ``MergedEntry`` (``om.proto``): one ``ShardSlice`` per
sub-batch, each a shard number and that shard's sealed ``PersistDbBatch``, as
sealed. A shard's pipeline submits one slice at a time (``encode_slice``); the
Raft process merges what reached it since its last append into one entry
(``om.consensus.pysyncobj.entry_merge``), and every node hands each shard its
slices of every committed entry (``om.statemachine.log_entry``), which apply in
one write batch with the entry's position (docs/SHARDS.md, step 1).

Merging is concatenation, which is why the format lives here, in the leaf package
both the Raft process (``consensus``) and apply (``statemachine``) may import:
``MergedEntry`` has one repeated field, so the payloads of several entries, joined,
are byte for byte the deterministic serialization of the entry holding all their
slices in order. Neither side decodes to merge, and the leader, which keeps its
submitted sub-batches, rebuilds the merged entry the Raft process appended from
them (``merge``) instead of receiving its bytes back.

Invariants: an entry carries at least one slice; a slice's batch bytes are never
re-encoded between the shard that sealed them and apply, on any node.
"""

from __future__ import annotations

from collections.abc import Sequence

from om.protocol import om_pb2

MERGED = b"M"
_SLICES_FIELD = b"\x0a"    # field 1 (MergedEntry.slices), wire type 2 (length-delimited)
_SHARD_FIELD = b"\x08"     # field 1 (ShardSlice.shard), wire type 0 (varint)
_BATCH_FIELD = b"\x12"     # field 2 (ShardSlice.batch), wire type 2
SHARD_MAX = (1 << 32) - 1  # a uint32


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative ``value``."""
    assert value >= 0
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_slice(shard: int, batch: bytes) -> bytes:
    """An entry of one slice: ``shard``'s sealed ``batch``, copied once (one join).

    Byte for byte what ``om_pb2.MergedEntry(slices=[ShardSlice(shard, batch)])``
    serializes to deterministically (proto3 leaves a zero shard and an empty batch
    out), without building the message: the batch may be a megabyte, and this runs
    once per batch on the leader's event loop."""
    assert 0 <= shard <= SHARD_MAX, "a shard number is a uint32"
    shard_part = _SHARD_FIELD + _varint(shard) if shard else b""
    batch_head = _BATCH_FIELD + _varint(len(batch)) if batch else b""
    slice_length = len(shard_part) + len(batch_head) + len(batch)
    return b"".join((MERGED, _SLICES_FIELD, _varint(slice_length), shard_part,
                     batch_head, batch))


def is_single_slice(entry: bytes) -> bool:
    """Whether ``entry`` is a merged entry of exactly one slice (what a shard submits):
    its first slice's length covers the rest. Reads at most 12 bytes."""
    if entry[:1] != MERGED or entry[1:2] != _SLICES_FIELD:
        return False
    length, shift, at = 0, 0, 2
    while at < min(len(entry), 12):
        byte = entry[at]
        length |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return at + length == len(entry)
        shift += 7
    return False


def merge(entries: Sequence[bytes]) -> bytes:
    """The one entry whose slices are those of ``entries``, in order (one entry: itself)."""
    assert entries, "a merged entry carries at least one slice"
    if len(entries) == 1:
        return entries[0]
    assert all(entry[:1] == MERGED for entry in entries), "only merged entries merge"
    return b"".join([MERGED, *(memoryview(entry)[1:] for entry in entries)])


def slices(entry: bytes) -> list[om_pb2.ShardSlice]:
    """The slices of a merged entry, in order. A malformed committed entry is a bug."""
    assert entry[:1] == MERGED, f"not a merged entry: tag {entry[:1]!r}"
    decoded = list(om_pb2.MergedEntry.FromString(entry[1:]).slices)
    assert decoded, "a merged entry carries at least one slice"
    return decoded
