"""What the Raft process hands each shard's channel (docs/SHARDS.md step 2,
``om/consensus/pysyncobj/shard_forwarding.py``), and the split it relies on.

* ``split_by_shard`` cuts a merged entry into each shard's slices, bytes untouched:
  a shard's part is the merge of the one-slice entries it sealed, in order.
* Over any run of passes (sub-batches and barriers from any channel, merged by the
  plan), every channel gets one message per log position; on the leader a channel
  rebuilds from its ids exactly the bytes a follower's same channel receives, which
  are its shard's slices in log order and nothing else; each id's result reaches only
  the channel that gave it, once.

Red cases: forwarding the whole entry to each channel hands shard 0 shard 1's slices;
skipping a channel with no slice leaves a hole in its positions; a result sent to
channel 0 for every id answers channel 1's ids there (its own request ids collide).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om.consensus.pysyncobj import shard_forwarding
from om.consensus.pysyncobj.entry_merge import plan_appends
from om.protocol import merged_entry, om_pb2
from om.protocol.channel import Message
from om.statemachine import log_entry


def _slice(shard: int, batch: bytes) -> bytes:
    return merged_entry.encode_slice(shard, batch)


EVERY = merged_entry.EVERY_SHARD


@given(st.lists(st.tuples(st.one_of(st.integers(0, 300), st.just(EVERY)),
                          st.binary(max_size=300)), min_size=1, max_size=12))
def test_a_shards_part_is_the_merge_of_its_slices_bytes_untouched(
        parts: list[tuple[int, bytes]]) -> None:
    """Each shard's part holds its own slices and every slice every shard applies, in
    log order; a shard with neither has no part."""
    entry = merged_entry.merge([_slice(shard, batch) for shard, batch in parts])
    split = merged_entry.split_by_shard(entry, 301)
    named = {shard for shard, _ in parts}
    assert sorted(split) == (list(range(301)) if EVERY in named else sorted(named))
    for shard, part in split.items():
        own = [_slice(s, b) for s, b in parts if s in (shard, EVERY)]
        assert part == merged_entry.merge(own)
        assert [(s.shard, s.batch) for s in merged_entry.slices(part)] \
            == [(s, b) for s, b in parts if s in (shard, EVERY)]
    assert [record[0] for record in merged_entry.slice_records(entry)] \
        == [shard for shard, _ in parts]


def test_a_record_that_runs_past_its_entry_is_a_bug() -> None:
    entry = _slice(1, b"batch")
    with pytest.raises(AssertionError, match="runs past"):
        merged_entry.slice_records(entry[:-1])
    with pytest.raises(AssertionError, match="slices only"):
        merged_entry.slice_records(entry + b"\x12\x00")


@dataclass(frozen=True)
class Submitted:
    """One submit: the channel, its request id there, the entry."""

    channel: int
    request: int
    entry: bytes


def _barrier(term: int) -> bytes:
    return log_entry.encode_batch(om_pb2.PersistDbBatch(term=term, leader_id="n1"))


@st.composite
def _passes(draw: st.DrawFn) -> tuple[int, list[list[Submitted]]]:
    """Channels, and passes of submits: each a sub-batch of its channel's shard, a
    barrier, or (channel 0's, with shards) a sub-batch every shard applies; request ids
    count up per channel from 1, as each driver's do."""
    channels = draw(st.integers(1, 4))
    next_request = [1] * channels
    passes: list[list[Submitted]] = []
    for _ in range(draw(st.integers(1, 5))):
        submits: list[Submitted] = []
        for channel, barrier, size in draw(st.lists(st.tuples(
                st.integers(0, channels - 1), st.booleans(), st.integers(0, 700)),
                min_size=1, max_size=8)):
            every = channels > 1 and channel == 0 and size % 3 == 0
            entry = _barrier(size) if barrier and size % 5 == 0 else _slice(
                EVERY if every else channel, bytes([channel]) * size)
            submits.append(Submitted(channel, next_request[channel], entry))
            next_request[channel] += 1
        passes.append(submits)
    return channels, passes


def _rebuilt(message: Message, submitted: dict[tuple[int, int], bytes],
             channel: int) -> tuple[str, int, bytes | None]:
    """What a channel applies from a message: (kind, position, bytes or None)."""
    if message[0] == "apply_own":
        return "apply", message[1], merged_entry.merge(
            [submitted[(channel, request)] for request in message[2]])
    if message[0] == "apply":
        return "apply", message[1], message[2]
    assert message[0] == "position"
    return "position", message[1], None


@settings(max_examples=300)
@given(_passes())
def test_every_channel_gets_its_shards_slices_and_every_position(
        run: tuple[int, list[list[Submitted]]]) -> None:
    channels, passes = run
    submitted = {(s.channel, s.request): s.entry for p in passes for s in p}
    seen: list[list[tuple[str, int, bytes | None]]] = [[] for _ in range(channels)]
    answered: list[list[int]] = [[] for _ in range(channels)]
    position = 0
    for submits in passes:
        for append in plan_appends([((s.channel, s.request), s.entry) for s in submits],
                                   2000):
            position += 1
            leader = shard_forwarding.forwards(position, append.entry, append.request_ids,
                                               channels)
            follower = shard_forwarding.forwards(position, append.entry, None, channels)
            assert len(leader) == len(follower) == channels, "one message a channel"
            for channel in range(channels):
                applied = _rebuilt(leader[channel], submitted, channel)
                assert applied == _rebuilt(follower[channel], submitted, channel)
                seen[channel].append(applied)
            for channel, message in shard_forwarding.results(
                    append.request_ids, 0, position).items():
                assert message[0] == "result"
                assert message[3] == position
                answered[channel].extend(message[1])
    for channel in range(channels):
        assert [p for _, p, _ in seen[channel]] == list(range(1, position + 1))
        slices = [(s.shard, s.batch) for kind, _, entry in seen[channel]
                  if entry is not None and entry[:1] == merged_entry.MERGED
                  for s in merged_entry.slices(entry)]
        sent = [merged_entry.slices(s.entry)[0] for p in passes for s in p
                if s.entry[:1] == merged_entry.MERGED]
        assert slices == [(part.shard, part.batch) for part in sent
                          if part.shard in (channel, EVERY)], "its own, and every shard's"
        barriers = [entry for kind, _, entry in seen[channel]
                    if entry is not None and entry[:1] != merged_entry.MERGED]
        assert barriers == [s.entry for p in passes for s in p
                            if s.entry[:1] != merged_entry.MERGED], "B goes to every shard"
        assert sorted(answered[channel]) == sorted(
            request for c, request in submitted if c == channel), "each id once, its own"


def test_one_channel_gets_todays_messages() -> None:
    entry = merged_entry.merge([_slice(0, b"a"), _slice(0, b"b")])
    assert shard_forwarding.forwards(7, entry, ((0, 3), (0, 4)), 1) \
        == [("apply_own", 7, (3, 4))]
    assert shard_forwarding.forwards(7, entry, None, 1) == [("apply", 7, entry)]
    assert shard_forwarding.results(((0, 3), (0, 4)), 0, 7) == {0: ("result", (3, 4), 0, 7)}


def test_a_slice_every_shard_applies_is_appended_alone_and_reaches_every_channel() -> None:
    every = _slice(EVERY, b"volume")
    appends = plan_appends([((1, 1), _slice(1, b"k")), ((0, 1), every),
                            ((0, 2), _slice(0, b"k"))], 2000)
    assert [a.request_ids for a in appends] == [((1, 1),), ((0, 1),), ((0, 2),)]
    assert shard_forwarding.forwards(5, every, ((0, 1),), 3) == [
        ("apply_own", 5, (1,)), ("apply", 5, every), ("apply", 5, every)]
    assert shard_forwarding.forwards(5, every, None, 2) == [("apply", 5, every)] * 2


def test_a_barrier_goes_to_every_channel_and_its_submitter_rebuilds_it() -> None:
    barrier = _barrier(4)
    assert shard_forwarding.forwards(9, barrier, ((1, 2),), 3) == [
        ("apply", 9, barrier), ("apply_own", 9, (2,)), ("apply", 9, barrier)]
    assert shard_forwarding.forwards(9, barrier, None, 2) == [("apply", 9, barrier)] * 2
