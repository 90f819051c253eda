"""The leader pipeline in-process: quota under concurrency, locks, retry cache, ids."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.consensus.port import ReplicateStatus
from om.executor import registry
from om.flows.async_locks import AsyncLocks
from om.flows.batch_pipeline import BatchConfig
from om.gatekeeper.lock_plan import Level, LockRequest, Mode
from om.gatekeeper.retry_cache import ForgetfulRetryKeys, RetryCacheConfig
from om.protocol import om_pb2
from om.schema import tables
from tests.leader_harness import LeaderUnderTest, config

KEY_SIZE = 1000          # bytes; charged 3x (replication)
CHARGE = 3 * KEY_SIZE


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=5.0))
    await under_test.start()
    yield under_test
    await under_test.close()


async def _bucket(leader: LeaderUnderTest, quota: int = 0, namespace: int = 0) -> None:
    await leader.ok(build.create_volume("vol"))
    await leader.ok(build.create_bucket("vol", "bkt", quota, namespace))


async def _open(leader: LeaderUnderTest, key: str) -> int:
    response = await leader.ok(build.create_key("vol", "bkt", key, KEY_SIZE))
    return response.create_key.client_session_id


async def _wait_until(condition: object, timeout_s: float = 5.0) -> None:
    assert callable(condition)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


async def _all_executed(leader: LeaderUnderTest, count: int) -> None:
    """Waits until each of ``count`` writes has executed with the replicator's gate
    shut: all are in flight (a refused one waits for a read round, which the gate holds
    back too: om/flows/leader_flow.py, _end_refused) and none waits for a lock."""
    await _wait_until(lambda: leader.service.in_flight == count
                      and leader.service.waiting == 0)


# -- quota -----------------------------------------------------------------------


@pytest.mark.parametrize("held_back", [False, True])
async def test_concurrent_commits_fill_the_quota_exactly(leader: LeaderUnderTest,
                                                         held_back: bool) -> None:
    fits = 37
    await _bucket(leader, quota=fits * CHARGE)
    sessions = [await _open(leader, f"k{i}") for i in range(100)]
    if held_back:  # every commit executes while the others are still in flight
        leader.replicator.gate.clear()
    commits = [asyncio.create_task(leader.call(build.commit_key("vol", "bkt", f"k{i}", s,
                                                                 KEY_SIZE)))
               for i, s in enumerate(sessions)]
    if held_back:
        await _all_executed(leader, 100)
        assert leader.service.flow.reservations.reserved(
            om_pb2.BUCKET, tables.bucket_key("vol", "bkt")) == (fits * CHARGE, fits)
        leader.replicator.gate.set()
    statuses = [r.status for r in await asyncio.gather(*commits)]
    assert statuses.count(om_pb2.OK) == fits
    assert statuses.count(om_pb2.QUOTA_EXCEEDED) == 100 - fits
    bucket = leader.bucket("vol", "bkt")
    assert bucket.used_bytes == fits * CHARGE
    assert bucket.used_namespace == fits
    leader.assert_idle()


async def test_namespace_quota_holds_under_concurrency(leader: LeaderUnderTest) -> None:
    await _bucket(leader, namespace=5)
    sessions = [await _open(leader, f"k{i}") for i in range(20)]
    leader.replicator.gate.clear()
    commits = [asyncio.create_task(leader.call(build.commit_key("vol", "bkt", f"k{i}", s, 1)))
               for i, s in enumerate(sessions)]
    await _all_executed(leader, 20)
    assert leader.service.flow.reservations.reserved(
        om_pb2.BUCKET, tables.bucket_key("vol", "bkt"))[1] == 5
    leader.replicator.gate.set()
    statuses = [r.status for r in await asyncio.gather(*commits)]
    assert statuses.count(om_pb2.OK) == 5
    assert leader.bucket("vol", "bkt").used_namespace == 5


# -- locks -----------------------------------------------------------------------


async def test_locks_are_free_after_success_and_error(leader: LeaderUnderTest) -> None:
    await _bucket(leader)
    session = await _open(leader, "k")
    await leader.ok(build.commit_key("vol", "bkt", "k", session, KEY_SIZE))
    leader.assert_idle()
    missing = await leader.call(build.commit_key("vol", "bkt", "k", session, KEY_SIZE))
    assert missing.status == om_pb2.KEY_NOT_FOUND
    leader.assert_idle()


async def test_locks_are_free_after_executor_failure(leader: LeaderUnderTest,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    await _bucket(leader)

    def explode(*args: object) -> om_pb2.OMResponse:
        raise RuntimeError("handler bug")

    kind = registry.KINDS[om_pb2.DeleteKey]
    monkeypatch.setitem(registry.KINDS, om_pb2.DeleteKey,
                        registry.RequestKind(kind.name, kind.body_field, True, explode))
    response = await leader.call(build.delete_key("vol", "bkt", "k"))
    assert response.status == om_pb2.INTERNAL_ERROR
    leader.assert_idle()


async def test_cancelled_lock_waiter_leaves_the_table_clean() -> None:
    locks = AsyncLocks(timeout_s=5.0)
    plan = (LockRequest(Level.VOLUME, "v", Mode.WRITE),)
    holder = await locks.acquire(plan)
    waiter = asyncio.create_task(locks.acquire(plan))
    await asyncio.sleep(0.01)
    assert locks.table.statistics().waiters == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    locks.release(holder)
    assert locks.table.statistics().resources == 0


async def test_lock_wait_is_bounded_and_released(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=0.2))
    await leader.start()
    await _bucket(leader)
    session = await _open(leader, "k")
    leader.replicator.gate.clear()
    first = asyncio.create_task(leader.call(build.commit_key("vol", "bkt", "k", session, 1)))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    second = await leader.call(build.delete_key("vol", "bkt", "k"))
    assert second.status == om_pb2.TIMEOUT
    leader.replicator.gate.set()
    assert (await first).status == om_pb2.OK
    leader.assert_idle()
    await leader.close()


async def test_a_cancelled_client_does_not_abandon_its_write(leader: LeaderUnderTest) -> None:
    await _bucket(leader)
    session = await _open(leader, "k")
    leader.replicator.gate.clear()
    request = build.commit_key("vol", "bkt", "k", session, KEY_SIZE)
    caller = asyncio.create_task(leader.call(request))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    caller.cancel()
    leader.replicator.gate.set()
    await _wait_until(lambda: leader.service.in_flight == 0)
    leader.assert_idle()
    assert leader.bucket("vol", "bkt").used_bytes == CHARGE
    retry = await leader.service.handle(request)
    assert retry.status == om_pb2.OK, "the retry finds the committed answer"
    assert leader.bucket("vol", "bkt").used_bytes == CHARGE


# -- no write cache ----------------------------------------------------------------


async def test_writes_are_invisible_until_applied(leader: LeaderUnderTest) -> None:
    leader.replicator.gate.clear()
    create = asyncio.create_task(leader.call(build.create_volume("vol")))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    local = build.info_volume("vol")
    local.local_read = True       # no read round: what the store holds right now
    info = await leader.call(local)
    assert info.status == om_pb2.VOLUME_NOT_FOUND
    leader.replicator.gate.set()
    assert (await create).status == om_pb2.OK
    assert (await leader.call(build.info_volume("vol"))).status == om_pb2.OK


# -- linearizable reads ------------------------------------------------------------


async def test_a_read_waits_for_a_round_proposed_after_it_arrived(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_volume("vol"))
    leader.replicator.gate.clear()
    writing = asyncio.create_task(leader.call(build.create_volume("vol2")))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    entries = leader.replicator.entries
    reads = [asyncio.create_task(leader.call(build.info_volume(name)))
             for name in ("vol", "vol2", "vol", "vol2")]
    await asyncio.sleep(0.05)
    assert not any(read.done() for read in reads), "a read was answered without a round"
    leader.replicator.gate.set()
    assert (await writing).status == om_pb2.OK
    answers = await asyncio.gather(*reads)
    assert [a.status for a in answers] == [om_pb2.OK] * 4, "they see the write before them"
    assert leader.replicator.entries == entries + 2, "the write's batch, then one read round"
    assert leader.service.linearizable_reads == 4


async def test_a_read_whose_round_fails_is_refused_retryably(leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_volume("vol"))
    leader.replicator.fail_with = ReplicateStatus.LEADER_CHANGED
    refused = await leader.call(build.info_volume("vol"))
    assert refused.status in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY)
    leader.replicator.fail_with = None
    assert (await leader.call(build.info_volume("vol"))).status == om_pb2.OK


async def test_a_refused_write_whose_round_fails_is_refused_retryably(
        leader: LeaderUnderTest) -> None:
    """A handler's refusal is read from this node's state, so it is answered only once a
    read round confirms this node still leads; a deposed leader that did not know it
    would otherwise tell a retry of a write the new leader committed KEY_NOT_FOUND
    (om/sim seed 1). Round failed: the client hears a retryable status instead."""
    await leader.ok(build.create_volume("vol"))
    leader.replicator.fail_with = ReplicateStatus.LEADER_CHANGED
    refused = await leader.call(build.delete_volume("nope"))
    assert refused.status in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY), refused
    leader.replicator.fail_with = None
    entries = leader.replicator.entries
    assert (await leader.call(build.delete_volume("nope"))).status == om_pb2.VOLUME_NOT_FOUND
    assert leader.replicator.entries == entries + 1, "one read round, no write"
    leader.assert_idle()


async def test_local_reads_take_no_round(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(read_mode="local"))
    await leader.start()
    await leader.ok(build.create_volume("vol"))
    entries = leader.replicator.entries
    leader.replicator.gate.clear()
    assert (await leader.call(build.info_volume("vol"))).status == om_pb2.OK
    assert leader.replicator.entries == entries
    assert leader.service.linearizable_reads == 0
    leader.replicator.gate.set()
    await leader.close()


# -- retry cache -------------------------------------------------------------------


async def test_committed_duplicate_gets_the_original_response(leader: LeaderUnderTest) -> None:
    await _bucket(leader)
    create = leader.stamp(build.create_key("vol", "bkt", "k", KEY_SIZE))
    first = await leader.service.handle(create)
    again = await leader.service.handle(create)
    assert again.SerializeToString() == first.SerializeToString(), "same generated ids"
    assert leader.store.count(om_pb2.OPEN_KEY) == 1, "the duplicate CreateKey opened nothing"
    commit = leader.stamp(build.commit_key("vol", "bkt", "k",
                                           first.create_key.client_session_id, KEY_SIZE))
    committed = await leader.service.handle(commit)
    assert (await leader.service.handle(commit)).SerializeToString() == \
        committed.SerializeToString()
    assert leader.bucket("vol", "bkt").used_bytes == CHARGE, "charged once"
    assert leader.service.flow.retry_cache.hits == 2


async def test_in_flight_duplicate_waits_for_the_original(leader: LeaderUnderTest) -> None:
    await _bucket(leader)
    session = await _open(leader, "k")
    commit = leader.stamp(build.commit_key("vol", "bkt", "k", session, KEY_SIZE))
    leader.replicator.gate.clear()
    original = asyncio.create_task(leader.service.handle(commit))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    duplicate = asyncio.create_task(leader.service.handle(commit))
    await asyncio.sleep(0.05)
    assert not duplicate.done(), "the duplicate waits while the original is in flight"
    leader.replicator.gate.set()
    first, second = await asyncio.gather(original, duplicate)
    assert first.status == om_pb2.OK
    assert second.SerializeToString() == first.SerializeToString()
    assert leader.replicator.entries == 4, "volume, bucket, open, one commit"
    assert leader.bucket("vol", "bkt").used_bytes == CHARGE


async def test_expired_entries_are_swept_and_forgotten(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(
        retry=RetryCacheConfig(expiry_ms=150, memory_entries=100)))
    await leader.start()
    create = leader.stamp(build.create_volume("vol"))
    assert (await leader.service.handle(create)).status == om_pb2.OK
    assert leader.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 1
    await asyncio.sleep(0.3)
    assert leader.service.flow.sweep_expired() == 1
    await _wait_until(lambda: leader.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 0)
    assert leader.store.count(om_pb2.CLIENT_REQUEST_EXPIRY) == 0
    replay = await leader.service.handle(create)
    assert replay.status == om_pb2.VOLUME_ALREADY_EXISTS, "an expired entry re-executes"
    await leader.close()


async def test_a_new_leader_sweeps_at_once_not_after_its_interval(tmp_path: Path) -> None:
    """Leaderships shorter than the sweep interval must not starve the sweep: a node
    sweeps when it becomes the leader (the soak's expired rows outlived the auditor's
    grace without it)."""
    leader = LeaderUnderTest(tmp_path / "db", config(
        sweep_interval_s=3600.0, retry=RetryCacheConfig(expiry_ms=100, memory_entries=100)))
    leading = [True]
    inner_role = leader.replicator.role
    leader.replicator.role = lambda: dataclasses.replace(  # type: ignore[method-assign]
        inner_role(), ready=leading[0])
    await leader.start()
    assert (await leader.service.handle(leader.stamp(build.create_volume("vol")))).status \
        == om_pb2.OK
    leading[0] = False
    await asyncio.sleep(1.5)            # a sweeper tick sees this node not leading
    assert leader.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 1
    leading[0] = True                   # leads again: an hour before its next interval
    await _wait_until(lambda: leader.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 0)
    await leader.close()


async def test_a_sweep_behind_the_writes_catches_up_at_the_next_tick(tmp_path: Path) -> None:
    """A full page of expired rows is followed by another sweep a tick later, not an
    interval later: a page per interval is slower than a busy leader writes rows (a
    fault-free soak ended with 470,000 expired rows unswept)."""
    leader = LeaderUnderTest(tmp_path / "db", config(
        sweep_interval_s=3600.0, sweep_rows_max=2,
        retry=RetryCacheConfig(expiry_ms=100, memory_entries=100)))
    await leader.start()
    for n in range(5):
        assert (await leader.service.handle(leader.stamp(build.create_volume(f"vol{n}")))
                ).status == om_pb2.OK
    await _wait_until(lambda: leader.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 0,
                      timeout_s=8.0)
    assert leader.store.count(om_pb2.CLIENT_REQUEST_EXPIRY) == 0
    await leader.close()


async def test_retry_cache_survives_restart(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config())
    await leader.start()
    await _bucket(leader)
    create = leader.stamp(build.create_key("vol", "bkt", "k", KEY_SIZE))
    first = await leader.service.handle(create)
    await leader.close()

    reopened = LeaderUnderTest(tmp_path / "db", config())
    await reopened.start()
    again = await reopened.service.handle(create)
    assert again.SerializeToString() == first.SerializeToString()
    assert reopened.store.count(om_pb2.OPEN_KEY) == 1
    await reopened.close()


async def test_call_id_reused_for_another_request_is_refused(leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_volume("vol"))
    reused = leader.stamp(build.create_bucket("vol", "bkt"))
    reused.call_id = 1
    response = await leader.service.handle(reused)
    assert response.status == om_pb2.INVALID_REQUEST
    assert (await leader.call(build.info_bucket("vol", "bkt"))).status == om_pb2.BUCKET_NOT_FOUND


async def test_call_id_reused_with_another_body_of_the_same_type_is_refused(
        tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config())
    await leader.start()
    first = leader.stamp(build.create_volume("vol-a"))
    answered = await leader.service.handle(first)
    assert answered.status == om_pb2.OK
    other = leader.stamp(build.create_volume("vol-b"))
    other.call_id = first.call_id
    refused = await leader.service.handle(other)
    assert refused.status == om_pb2.INVALID_REQUEST
    assert f"call id {first.call_id}" in refused.message
    assert (await leader.call(build.info_volume("vol-b"))).status == om_pb2.VOLUME_NOT_FOUND
    other_user = leader.stamp(build.create_volume("vol-a"), user="mallory")
    other_user.call_id = first.call_id
    assert (await leader.service.handle(other_user)).status == om_pb2.INVALID_REQUEST
    same = await leader.service.handle(first)
    assert same.SerializeToString() == answered.SerializeToString(), "a true retry is answered"
    await leader.close()

    reopened = LeaderUnderTest(tmp_path / "db", config())   # from the table, not memory
    await reopened.start()
    assert (await reopened.service.handle(other)).status == om_pb2.INVALID_REQUEST
    again = await reopened.service.handle(first)
    assert again.SerializeToString() == answered.SerializeToString()
    await reopened.close()


async def test_call_id_reused_while_the_original_is_in_flight_is_refused(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_volume("vol"))
    leader.replicator.gate.clear()
    original = leader.stamp(build.create_bucket("vol", "bkt-one"))
    first = asyncio.create_task(leader.service.handle(original))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    impostor = leader.stamp(build.create_bucket("vol", "bkt-two"))
    impostor.call_id = original.call_id
    assert (await leader.service.handle(impostor)).status == om_pb2.INVALID_REQUEST
    retry = asyncio.create_task(leader.service.handle(original))
    leader.replicator.gate.set()
    answered, retried = await asyncio.gather(first, retry)
    assert answered.status == om_pb2.OK
    assert retried.SerializeToString() == answered.SerializeToString()
    missing = await leader.call(build.info_bucket("vol", "bkt-two"))
    assert missing.status == om_pb2.BUCKET_NOT_FOUND


async def test_retry_cache_memory_is_bounded(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(
        retry=RetryCacheConfig(expiry_ms=600_000, memory_entries=10)))
    await leader.start()
    requests = [leader.stamp(build.create_volume(f"vol{i:03d}")) for i in range(50)]
    firsts = [await leader.service.handle(r) for r in requests]
    assert leader.service.flow.retry_cache.statistics()["recent"] == 10
    again = await leader.service.handle(requests[0])
    assert again.SerializeToString() == firsts[0].SerializeToString(), "answered from the table"
    await leader.close()


# -- leadership and back-pressure ----------------------------------------------------


async def test_lost_leadership_fails_retryably_and_writes_nothing(
        leader: LeaderUnderTest) -> None:
    await _bucket(leader)
    session = await _open(leader, "k")
    before = leader.store.digests()
    leader.replicator.fail_with = ReplicateStatus.LEADER_CHANGED
    commit = leader.stamp(build.commit_key("vol", "bkt", "k", session, KEY_SIZE))
    failed = await leader.service.handle(commit)
    assert failed.status in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY)
    leader.assert_idle()
    assert leader.store.digests() == before
    leader.replicator.fail_with = None
    assert (await leader.service.handle(commit)).status == om_pb2.OK, "the retry executes"
    assert leader.bucket("vol", "bkt").used_bytes == CHARGE


async def test_full_queue_answers_server_busy(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(
        batch=BatchConfig(inflight_batches_max=1, queue_max=1)))
    await leader.start()
    leader.replicator.gate.clear()
    sealed = asyncio.create_task(leader.call(build.create_volume("vol1")))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    queued = asyncio.create_task(leader.call(build.create_volume("vol2")))
    await _wait_until(lambda: leader.service.in_flight == 2)
    refused = await leader.call(build.create_volume("vol3"))
    assert refused.status == om_pb2.SERVER_BUSY
    leader.replicator.gate.set()
    assert [r.status for r in await asyncio.gather(sealed, queued)] == [om_pb2.OK, om_pb2.OK]
    leader.assert_idle()
    await leader.close()


async def test_group_commit_batches_what_queued_meanwhile(leader: LeaderUnderTest) -> None:
    leader.replicator.gate.clear()
    creates = [asyncio.create_task(leader.call(build.create_volume(f"vol{i:02d}")))
               for i in range(40)]
    await _wait_until(lambda: leader.service.in_flight == 40)
    leader.replicator.gate.set()
    assert all(r.status == om_pb2.OK for r in await asyncio.gather(*creates))
    assert leader.service.flow.pipeline.batches < 40
    assert leader.service.flow.pipeline.writes == 40


@pytest.mark.parametrize("in_flight", [1, 3])
async def test_batches_in_flight_are_capped_by_config(tmp_path: Path, in_flight: int) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(
        batch=BatchConfig(inflight_batches_max=in_flight)))
    await leader.start()
    leader.replicator.gate.clear()
    creates = []
    for i in range(6):
        creates.append(asyncio.create_task(leader.call(build.create_volume(f"vol{i}"))))
        await _wait_until(lambda n=i + 1: leader.service.in_flight == n)
    await _wait_until(lambda: leader.replicator.waiting == in_flight)
    await asyncio.sleep(0.05)
    assert leader.replicator.waiting == in_flight, "never more batches than the cap"
    leader.replicator.gate.set()
    assert all(r.status == om_pb2.OK for r in await asyncio.gather(*creates))
    leader.assert_idle()
    await leader.close()


# -- managed index -------------------------------------------------------------------


async def test_object_ids_unique_and_increasing_across_restart(tmp_path: Path) -> None:
    ids: list[int] = []
    for _ in range(2):
        leader = LeaderUnderTest(tmp_path / "db", config())
        await leader.start()
        if not ids:
            await _bucket(leader)
        for i in range(5):
            opened = await leader.ok(build.create_key("vol", "bkt", f"k{len(ids)}-{i}", 1))
            ids.append(opened.create_key.key_info.object_id)
            ids.append(opened.create_key.client_session_id)
        await leader.close()
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


async def test_failed_requests_skip_indexes_without_reusing_them(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_volume("vol"))
    assert (await leader.call(build.create_volume("vol"))).status == om_pb2.VOLUME_ALREADY_EXISTS
    second = await leader.ok(build.create_volume("vol2"))
    assert second.create_volume.volume_info.update_id == 3
    raw = leader.store.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
    assert raw is not None
    assert om_pb2.TransactionInfo.FromString(raw).managed_index == 3


async def test_disabled_retry_cache_executes_a_retry_again(tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(retry_keys=ForgetfulRetryKeys()))
    await leader.start()
    await _bucket(leader)
    session = await _open(leader, "k")
    commit = leader.stamp(build.commit_key("vol", "bkt", "k", session, KEY_SIZE))
    assert (await leader.service.handle(commit)).status == om_pb2.OK
    retry = await leader.service.handle(commit)
    assert retry.status == om_pb2.KEY_NOT_FOUND, "the retry ran again (its open key is gone)"
    leader.assert_idle()
    await leader.close()
