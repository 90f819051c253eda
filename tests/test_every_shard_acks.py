"""om/consensus/pysyncobj/every_shard_acks.py: the leader's answer to a write every shard
applies waits until each of its shards applied it (or for wait_s at most).

Red cases: a result released when only its submitter applied (a client could create a
bucket and find its shard without it); one held forever by a stalled shard; a held
result lost when too many wait; an entry no one asked acks for held.
"""

from __future__ import annotations

from om.consensus.pysyncobj.every_shard_acks import EveryShardAcks
from om.protocol.channel import Message

RESULT: dict[int, Message] = {0: ("result", (7,), 0, 5)}


def test_held_until_every_channel_applied_and_committed() -> None:
    acks = EveryShardAcks(3)
    assert acks.expect(5, 0.0) == []
    assert acks.applied(0, 5) is None
    assert acks.result(5, RESULT) is None, "shards 1 and 2 have not applied it"
    assert acks.applied(2, 5) is None
    assert acks.applied(1, 5) == RESULT
    assert acks.applied(1, 5) is None, "answered once"


def test_the_acks_may_come_before_the_result() -> None:
    acks = EveryShardAcks(2)
    acks.expect(9, 0.0)
    assert acks.applied(0, 9) is None
    assert acks.applied(1, 9) is None
    assert acks.result(9, RESULT) == RESULT


def test_a_stalled_shard_holds_the_answer_wait_s_at_most() -> None:
    acks = EveryShardAcks(2, wait_s=2.0)
    acks.expect(5, 10.0)
    acks.expect(6, 11.0)
    assert acks.result(5, RESULT) is None
    assert acks.due(11.9) == []
    assert acks.due(12.0) == [RESULT], "position 5 only: 6 is younger"
    assert acks.applied(1, 5) is None, "already answered"


def test_a_result_that_came_after_its_timeout_is_sent_at_once() -> None:
    acks = EveryShardAcks(2, wait_s=1.0)
    acks.expect(5, 0.0)
    assert acks.due(1.0) == [{}]
    assert acks.result(5, RESULT) == RESULT


def test_past_held_max_the_oldest_goes_out() -> None:
    acks = EveryShardAcks(2, held_max=2)
    for position in (1, 2):
        acks.expect(position, 0.0)
        acks.result(position, {0: ("result", (position,), 0, position)})
    assert acks.expect(3, 0.0) == [{0: ("result", (1,), 0, 1)}]


def test_a_position_no_one_awaits_is_answered_at_once() -> None:
    acks = EveryShardAcks(2)
    assert acks.result(4, RESULT) == RESULT
    assert acks.applied(1, 4) is None
