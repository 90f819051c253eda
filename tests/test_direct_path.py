"""The leader flow's direct path: what one read delivers runs with no task per request.

Each test checks which requests waited in a task (``service.waiting``) and
that the two paths keep the flow's rules: FIFO locks, exactly-once retries,
read rounds, quota and clean-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.consensus.port import ReplicateStatus
from om.protocol import om_pb2
from tests.leader_harness import LeaderUnderTest, config


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=5.0))
    await under_test.start()
    await under_test.ok(build.create_volume("vol"))
    await under_test.ok(build.create_bucket("vol", "bkt"))
    yield under_test
    under_test.replicator.gate.set()   # a failed test may leave batches held
    await under_test.close()


async def test_a_write_with_free_locks_runs_without_a_task(leader: LeaderUnderTest) -> None:
    answer = leader.service.submit(leader.stamp(build.create_key("vol", "bkt", "k", 10)))
    assert leader.service.waiting == 0
    assert leader.service.in_flight == 1, "executed and queued before submit returned"
    assert (await answer).status == om_pb2.OK
    leader.assert_idle()


async def test_a_write_behind_a_held_lock_waits_on_the_task_path_in_order(
        leader: LeaderUnderTest) -> None:
    sessions = [(await leader.ok(build.create_key("vol", "bkt", "k", size)))
                .create_key.client_session_id for size in (10, 20)]
    leader.replicator.gate.clear()
    first = leader.service.submit(leader.stamp(build.commit_key("vol", "bkt", "k", sessions[0],
                                                                10)))
    second = leader.service.submit(leader.stamp(build.commit_key("vol", "bkt", "k",
                                                                 sessions[1], 20)))
    assert leader.service.waiting == 1, "the key's lock is held: the second write waits"
    await asyncio.sleep(0.01)
    assert not second.done()
    leader.replicator.gate.set()
    assert (await first).status == om_pb2.OK
    assert (await second).status == om_pb2.OK
    info = await leader.ok(build.lookup_key("vol", "bkt", "k"))
    assert info.lookup_key.key_info.data_size == 20, "the second commit applied last"
    leader.assert_idle()


async def test_a_write_never_jumps_ahead_of_a_waiter(leader: LeaderUnderTest) -> None:
    """A bucket write queued behind readers makes later bucket readers wait too."""
    leader.replicator.gate.clear()
    reader = leader.service.submit(leader.stamp(build.create_key("vol", "bkt", "a", 1)))
    assert leader.service.waiting == 0
    writer = leader.service.submit(leader.stamp(build.set_bucket_property("vol", "bkt", 10_000)))
    assert leader.service.waiting == 1
    later = leader.service.submit(leader.stamp(build.create_key("vol", "bkt", "b", 1)))
    assert leader.service.waiting == 2, "a reader behind a waiting writer waits (FIFO)"
    assert leader.service.flow.locks.table.statistics().waiters == 2, "both queued on arrival"
    leader.replicator.gate.set()
    for answer in (reader, writer, later):
        assert (await answer).status == om_pb2.OK
    leader.assert_idle()


async def test_a_retry_of_a_direct_write_in_flight_gets_its_answer(
        leader: LeaderUnderTest) -> None:
    leader.replicator.gate.clear()
    request = leader.stamp(build.create_key("vol", "bkt", "k", 10))
    original = leader.service.submit(request)
    retry = leader.service.submit(request)
    assert leader.service.waiting == 1, "a retry of a write in flight waits for it"
    leader.replicator.gate.set()
    first, second = await original, await retry
    assert first.SerializeToString() == second.SerializeToString()
    assert leader.service.flow.retry_cache.hits == 0, "answered by the original, not the cache"
    replay = leader.service.submit(request)
    assert replay.done(), "a retry of a committed write is answered at once"
    assert (await replay).SerializeToString() == first.SerializeToString()
    leader.assert_idle()


async def test_an_error_status_releases_everything_at_once(leader: LeaderUnderTest) -> None:
    """Locks and reservations are released as the handler refuses, with no task; only
    the answer waits, for a read round confirming this node still leads (a deposed
    leader's refusal would come from stale state: om/flows/leader_flow.py,
    _end_refused)."""
    answer = leader.service.submit(leader.stamp(build.commit_key("vol", "bkt", "nope", 7, 1)))
    assert leader.service.waiting == 0, "an error status needs no task"
    stats = leader.service.flow.locks.table.statistics()
    assert (stats.resources, stats.holders, stats.waiters) == (0, 0, 0)
    assert len(leader.service.flow.reservations) == 0
    assert not answer.done(), "the refusal is answered after a read round"
    assert (await answer).status == om_pb2.KEY_NOT_FOUND
    leader.assert_idle()


async def test_a_lost_batch_fails_direct_writes_retryably(leader: LeaderUnderTest) -> None:
    leader.replicator.fail_with = ReplicateStatus.LEADER_CHANGED
    answer = leader.service.submit(leader.stamp(build.create_key("vol", "bkt", "k", 10)))
    assert leader.service.waiting == 0
    assert (await answer).status in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY)
    leader.assert_idle()
    leader.replicator.fail_with = None
    assert (await leader.call(build.lookup_key("vol", "bkt", "k"))).status == \
        om_pb2.KEY_NOT_FOUND, "nothing was written"


async def test_a_direct_read_waits_for_a_round_begun_after_it(leader: LeaderUnderTest) -> None:
    leader.replicator.gate.clear()
    write = leader.service.submit(leader.stamp(build.create_key("vol", "bkt", "k", 10)))
    read = leader.service.submit(leader.stamp(build.info_bucket("vol", "bkt")))
    assert leader.service.waiting == 0, "a read waits in its round's callback, not a task"
    await asyncio.sleep(0.01)
    assert not read.done(), "a read is answered only after its read round commits"
    leader.replicator.gate.set()
    assert (await write).status == om_pb2.OK
    assert (await read).status == om_pb2.OK
    assert leader.service.linearizable_reads >= 1
