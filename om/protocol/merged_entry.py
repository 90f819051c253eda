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

With several shards (docs/SHARDS.md, step 2) the Raft process hands each shard
only its own slices of a committed entry: ``split_by_shard`` cuts the entry along its
slice records, without decoding a batch, into one merged entry per shard whose bytes
are those records in log order, so that what shard k applies is byte for byte the
merge of what shard k sealed (on the leader, the entry it rebuilds from its own
sub-batches).

A slice numbered ``EVERY_SHARD`` is applied by every shard (docs/SHARDS.md, *Rows every
shard needs*): shard 0 seals the writes whose rows every shard reads (volumes,
delegation-token keys and tokens, certificates and their revocations, the prepared
marker and the layout) as such a slice, so each shard's store holds them at the
entry's position. ``split_by_shard`` gives its record to every shard's part, and the
Raft process appends it alone (``om.consensus.pysyncobj.entry_merge``).

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
EVERY_SHARD = SHARD_MAX    # the slice every shard applies (no node runs 2^32 shards)


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


def _varint_at(entry: bytes, at: int) -> tuple[int, int]:
    """The varint at ``entry[at]`` and the offset after it. A malformed committed entry
    is a bug (an entry is checked by the shard that sealed it), hence asserts."""
    value, shift = 0, 0
    while True:
        assert at < len(entry), "a truncated varint in a merged entry"
        assert shift < 64, "a varint of more than 64 bits in a merged entry"
        byte = entry[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def slice_records(entry: bytes) -> list[tuple[int, int, int]]:
    """(shard, start, end) of each slice record of a merged entry (its field tag, length
    and body: ``entry[start:end]``), in order. Reads the headers only: a record's body
    starts with its shard field unless the shard is 0 (proto3 leaves a zero out, and
    fields are written in number order), so no batch is decoded."""
    assert entry[:1] == MERGED, f"not a merged entry: tag {entry[:1]!r}"
    records: list[tuple[int, int, int]] = []
    at = 1
    while at < len(entry):
        assert entry[at:at + 1] == _SLICES_FIELD, "a merged entry holds slices only"
        length, body = _varint_at(entry, at + 1)
        end = body + length
        assert end <= len(entry), "a slice runs past its entry"
        shard = 0
        if length and entry[body:body + 1] == _SHARD_FIELD:
            shard = _varint_at(entry, body + 1)[0]
            assert 0 < shard <= SHARD_MAX, "proto3 writes no zero shard; a uint32"
        records.append((shard, at, end))
        at = end
    assert records, "a merged entry carries at least one slice"
    return records


def split_by_shard(entry: bytes, shards: int) -> dict[int, bytes]:
    """Each of the ``shards`` shards' slices of a merged entry as a merged entry of them
    alone, by shard (only shards with a slice; an ``EVERY_SHARD`` slice is every
    shard's): the slice records copied as they are, in order, so ``merge`` of a shard's
    one-slice entries equals its part."""
    assert shards >= 1
    view = memoryview(entry)
    records: dict[int, list[memoryview]] = {}
    for shard, start, end in slice_records(entry):
        assert shard < shards or shard == EVERY_SHARD, f"a slice for shard {shard} of {shards}"
        for owner in range(shards) if shard == EVERY_SHARD else (shard,):
            records.setdefault(owner, []).append(view[start:end])
    return {shard: b"".join([MERGED, *parts]) for shard, parts in sorted(records.items())}


def is_every_shards(entry: bytes) -> bool:
    """Whether ``entry`` is a merged entry of one slice, ``EVERY_SHARD``'s (headers only)."""
    if not is_single_slice(entry):
        return False
    return slice_records(entry)[0][0] == EVERY_SHARD


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
