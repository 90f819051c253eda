"""BatchBuilder: byte and count caps, index order, and what a sealed batch carries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from om.executor.batcher import BatchBuilder, PendingWrite
from om.executor.change_recorder import ChangeRecorder
from om.gatekeeper.retry_cache import encode_reply
from om.protocol import om_pb2
from om.schema import tables


def _write(index: int, value_bytes: int = 10) -> PendingWrite:
    recorder = ChangeRecorder()
    recorder.put(om_pb2.KEY, f"/k{index}".encode(), b"v" * value_bytes)
    recorder.quota_delta(om_pb2.BUCKET, b"/v/b", 9, value_bytes, 1)
    reply = om_pb2.ClientRequestReply(client_id="c", call_id=index or 1, timestamp_ms=1234)
    return PendingWrite.of(index, recorder, encode_reply(reply) if index else None)


def _fill(builder: BatchBuilder, writes: list[PendingWrite]) -> list[PendingWrite]:
    taken = []
    for write in writes:
        if not builder.fits(write):
            break
        builder.add(write)
        taken.append(write)
    return taken


@given(st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=60),
       st.integers(min_value=50, max_value=3000), st.integers(min_value=1, max_value=20))
def test_a_batch_stays_under_its_caps_and_keeps_order(sizes: list[int], bytes_max: int,
                                                      writes_max: int) -> None:
    writes = [_write(i + 1, size) for i, size in enumerate(sizes)]
    builder = BatchBuilder(bytes_max, writes_max)
    taken = _fill(builder, writes)
    assert taken, "an empty batch takes any write"
    assert len(taken) <= writes_max
    if len(taken) > 1:
        assert sum(w.size for w in taken) <= bytes_max
    batch = om_pb2.PersistDbBatch.FromString(builder.seal(7, 1234, "om1", 3))
    assert (batch.batch_id, batch.timestamp_ms, batch.leader_id, batch.term) == (
        7, 1234, "om1", 3)
    assert batch.managed_index == taken[-1].managed_index
    assert batch.request_count == len(taken)
    assert [op.key for op in batch.ops] == [f"/k{w.managed_index}".encode() for w in taken]
    assert [d.bytes_delta for d in batch.quota_deltas] == [sizes[w.managed_index - 1]
                                                            for w in taken]
    replies = [om_pb2.ClientRequestReply.FromString(r.row) for r in batch.reply_rows]
    assert [r.call_id for r in replies] == [w.managed_index for w in taken]
    assert all(r.timestamp_ms == 1234 for r in replies)


def test_a_sealed_batch_is_the_batch_its_parts_describe() -> None:
    """Concatenated parts parse as the one message a field-by-field build gives."""
    builder = BatchBuilder(bytes_max=10_000, writes_max=10)
    writes = [_write(1), _write(2, 30)]
    for write in writes:
        builder.add(write)
    expected = om_pb2.PersistDbBatch(batch_id=1, timestamp_ms=5, managed_index=2,
                                     leader_id="om1", request_count=2, term=4)
    for write in writes:
        expected.MergeFrom(om_pb2.PersistDbBatch.FromString(write.encoded))
    assert om_pb2.PersistDbBatch.FromString(builder.seal(1, 5, "om1", 4)) == expected


def test_a_reply_rows_keys_are_the_tables() -> None:
    reply = om_pb2.ClientRequestReply(client_id="cl", call_id=12, timestamp_ms=99)
    row = encode_reply(reply)
    assert row.key == tables.reply_key("cl", 12)
    assert row.expiry_key == tables.expiry_key(99, "cl", 12)
    assert om_pb2.ClientRequestReply.FromString(row.row) == reply


def test_an_oversized_write_travels_alone() -> None:
    builder = BatchBuilder(bytes_max=100, writes_max=10)
    big = _write(1, 500)
    assert builder.fits(big)
    builder.add(big)
    assert not builder.fits(_write(2))


def test_system_writes_do_not_move_the_managed_index() -> None:
    builder = BatchBuilder(bytes_max=10_000, writes_max=10)
    builder.add(_write(5))
    builder.add(_write(0))          # an expiry sweep carries no managed index
    builder.add(_write(6))
    assert om_pb2.PersistDbBatch.FromString(builder.seal(1, 1, "om1", 1)).managed_index == 6


def test_out_of_order_indexes_are_a_programming_error() -> None:
    builder = BatchBuilder(bytes_max=10_000, writes_max=10)
    builder.add(_write(5))
    with pytest.raises(AssertionError, match="index order"):
        builder.add(_write(5))


def test_size_is_the_encoded_parts() -> None:
    write = _write(1)
    assert write.size == len(write.encoded) > 0
