"""The merged entry's format and the Raft process's merge plan (docs/SHARDS.md step 1).

* ``encode_slice`` is byte for byte protobuf's deterministic serialization, and
  merging is concatenation: the merged bytes are those of the message holding every
  slice in order, so the leader's rebuilt entry equals the one the Raft process
  appended and every replica applies the same bytes.
* The plan merges runs of one-slice entries under the byte and slice caps, keeps
  every other entry alone and in its place, and names each request id once, at the
  slot of its slice.
"""

from __future__ import annotations

import pytest

from om.consensus.pysyncobj.entry_merge import SLICES_MAX, plan_appends
from om.consensus.pysyncobj.process import SliceApplied, slice_outcome
from om.protocol import merged_entry, om_pb2
from om.statemachine import log_entry


def _protobuf(*parts: tuple[int, bytes]) -> bytes:
    message = om_pb2.MergedEntry(slices=[om_pb2.ShardSlice(shard=s, batch=b) for s, b in parts])
    return merged_entry.MERGED + message.SerializeToString(deterministic=True)


@pytest.mark.parametrize("shard", [0, 1, 300, merged_entry.SHARD_MAX])
@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 1 << 20])
def test_a_slice_is_encoded_as_protobuf_would(shard: int, size: int) -> None:
    batch = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    entry = merged_entry.encode_slice(shard, batch)
    assert entry == _protobuf((shard, batch))
    assert merged_entry.is_single_slice(entry)
    (decoded,) = merged_entry.slices(entry)
    assert (decoded.shard, decoded.batch) == (shard, batch)


def test_merging_is_concatenation_and_keeps_the_order() -> None:
    parts = [(0, b"first"), (0, b""), (0, b"third" * 1000)]
    merged = merged_entry.merge([merged_entry.encode_slice(s, b) for s, b in parts])
    assert merged == _protobuf(*parts)
    assert not merged_entry.is_single_slice(merged)
    assert [(s.shard, s.batch) for s in merged_entry.slices(merged)] == parts
    alone = merged_entry.encode_slice(0, b"alone")
    assert merged_entry.merge([alone]) is alone, "one entry is appended as it came"


def test_only_a_merged_entry_of_one_slice_is_single() -> None:
    assert not merged_entry.is_single_slice(b"")
    assert not merged_entry.is_single_slice(log_entry.encode_batch(om_pb2.PersistDbBatch()))
    assert not merged_entry.is_single_slice(merged_entry.encode_slice(0, b"x")[:-1])
    assert not merged_entry.is_single_slice(merged_entry.encode_slice(0, b"x") + b"\x0a\x00")


def test_log_entry_hands_every_slice_to_apply_in_order() -> None:
    batches = [om_pb2.PersistDbBatch(batch_id=i, term=2, managed_index=i) for i in (1, 2, 3)]
    entry = merged_entry.merge([log_entry.encode_sealed(b.SerializeToString(), merged=True)
                                for b in batches])
    assert log_entry.decode_batches(entry) == batches
    barrier = om_pb2.PersistDbBatch(term=2)
    assert log_entry.decode_batches(log_entry.encode_batch(barrier)) == [barrier]


def _slice(size: int) -> bytes:
    return log_entry.encode_sealed(b"b" * size, merged=True)


def test_a_run_is_merged_under_the_byte_cap_and_the_rest_starts_the_next_entry() -> None:
    entries = [(id_, _slice(900)) for id_ in range(1, 6)]
    appends = plan_appends(entries, 2000)
    assert [a.request_ids for a in appends] == [(1, 2), (3, 4), (5,)]
    assert all(len(a.entry) <= 2000 for a in appends)
    assert appends[0].entry == merged_entry.merge([entries[0][1], entries[1][1]])
    assert appends[2].entry is entries[4][1]
    big = _slice(5000)
    assert [a.request_ids for a in plan_appends([(1, big), (2, _slice(10))], 2000)] \
        == [(1,), (2,)], "a slice over the cap travels alone"


def test_the_slice_cap_bounds_a_merged_entry() -> None:
    entries = [(id_, _slice(1)) for id_ in range(SLICES_MAX + 1)]
    appends = plan_appends(entries, 1 << 20)
    assert [len(a.request_ids) for a in appends] == [SLICES_MAX, 1]


def test_other_entries_go_alone_and_keep_their_place() -> None:
    barrier = log_entry.encode_batch(om_pb2.PersistDbBatch(term=3))
    verify = log_entry.encode_verify(om_pb2.PersistDbBatch(
        verify=om_pb2.VerifyMarker(verify_id=b"v")))
    two = merged_entry.merge([_slice(1), _slice(2)])
    entries = [(1, _slice(10)), (2, barrier), (3, _slice(10)), (4, _slice(10)),
               (5, verify), (6, two), (7, _slice(10))]
    appends = plan_appends(entries, 1 << 20)
    assert [a.request_ids for a in appends] == [(1,), (2,), (3, 4), (5,), (6,), (7,)]
    assert [a.entry for a in appends if len(a.request_ids) == 1] \
        == [entries[0][1], barrier, verify, two, entries[6][1]]
    assert plan_appends([], 100) == []


def test_each_merged_caller_gets_its_own_slices_outcome() -> None:
    entry = SliceApplied(position=7, applied=False, batches_applied=(True, False, True))
    outcomes = [slice_outcome((entry, 50), slot, 3) for slot in range(3)]
    assert [(o[0].position, o[0].applied, o[1]) for o in outcomes if o is not None] \
        == [(7, True, 50), (7, False, 50), (7, True, 50)]
    replayed = SliceApplied(position=7, applied=False)
    assert [o[0].applied for o in (slice_outcome((replayed, 0), s, 2) for s in (0, 1))
            if o is not None] == [False, False], "a replayed position commits no caller"
    alone = (SliceApplied(position=8, applied=True, batches_applied=(True,)), 1)
    assert slice_outcome(alone, 0, 1) is alone
    assert slice_outcome(None, 1, 2) is None
