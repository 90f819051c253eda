"""The leader's purges of deletedTable rows and of open keys never committed.

The handlers (PurgeKeys, DeleteOpenKeys) remove only what their cutoff allows and
skip rows already gone, so a step run twice removes nothing twice; the purger
finds the rows from applied state, in bounded steps, and leaves younger rows.
(The purge of deleted subtrees: tests/test_fso.py.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.fso.fs import FSO
from om.executor.keys import purge_keys
from om.flows.purge import PurgeConfig
from om.protocol import om_pb2
from om.schema import tables
from tests.leader_harness import LeaderUnderTest, config

V, OBS_B, FS_B = "vol", "obs", "fsb"


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config())
    await under_test.start()
    await under_test.ok(build.create_volume(V))
    await under_test.ok(build.create_bucket(V, OBS_B))
    await under_test.ok(build.create_bucket(V, FS_B, layout=FSO))
    yield under_test
    await under_test.close()


async def _put(leader: LeaderUnderTest, bucket: str, key: str, size: int = 10) -> None:
    opened = (await leader.ok(build.create_key(V, bucket, key, size))).create_key
    await leader.ok(build.commit_key(V, bucket, key, opened.client_session_id, size))


async def _deleted(leader: LeaderUnderTest, n: int) -> list[bytes]:
    """``n`` keys put, then deleted: their deletedTable keys."""
    for i in range(n):
        await _put(leader, OBS_B, f"k{i}")
        await leader.ok(build.delete_key(V, OBS_B, f"k{i}"))
    return [key for key, _ in leader.store.scan(om_pb2.DELETED, b"", None, 1000)]


def _purge(keys: list[bytes], cutoff_ms: int) -> om_pb2.OMRequest:
    return om_pb2.OMRequest(cmd_type=om_pb2.PurgeKeys, purge_keys=om_pb2.PurgeKeysRequest(
        keys=keys, retired_before_ms=cutoff_ms))


def _expire(refs: list[tuple[om_pb2.Table.ValueType, bytes]],
            cutoff_ms: int) -> om_pb2.OMRequest:
    return om_pb2.OMRequest(cmd_type=om_pb2.DeleteOpenKeys,
                            delete_open_keys=om_pb2.DeleteOpenKeysRequest(
                                open_keys=[om_pb2.OpenKeyRef(table=t, key=k) for t, k in refs],
                                created_before_ms=cutoff_ms))


def _now_ms() -> int:
    return int(time.time() * 1000)


async def test_purge_keys_removes_what_its_cutoff_allows_once(leader: LeaderUnderTest) -> None:
    keys = await _deleted(leader, 3)
    assert len(keys) == 3
    retired = om_pb2.RepeatedKeyInfo.FromString(leader.store.get(om_pb2.DELETED, keys[0])
                                                or b"").key_info[0]
    assert 0 < retired.deletion_time <= _now_ms(), "a retired version records when"
    too_early = await leader.call(_purge(keys, retired.deletion_time - 1))
    assert too_early.status == om_pb2.KEY_NOT_FOUND
    assert leader.store.count(om_pb2.DELETED) == 3
    done = await leader.ok(_purge([*keys[:2], keys[0], b"/vol/obs/never/1"], _now_ms()))
    assert done.purge_keys.purged == 2, "each row once; a missing row is skipped"
    again = await leader.call(_purge(keys[:2], _now_ms()))
    assert again.status == om_pb2.KEY_NOT_FOUND, "a rerun removes nothing twice"
    assert [k for k, _ in leader.store.scan(om_pb2.DELETED, b"", None, 10)] == keys[2:]


async def test_delete_open_keys_removes_only_old_open_rows(leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_key(V, OBS_B, "abandoned", 10))
    await leader.ok(build.create_file(V, FS_B, "dir/abandoned", 10, recursive=True))
    obs_row = leader.store.scan(om_pb2.OPEN_KEY, b"", None, 10)[0][0]
    fs_row = leader.store.scan(om_pb2.OPEN_FILE, b"", None, 10)[0][0]
    refs = [(om_pb2.OPEN_KEY, obs_row), (om_pb2.OPEN_FILE, fs_row)]
    assert (await leader.call(_expire(refs, 0))).status == om_pb2.KEY_NOT_FOUND
    answer = await leader.ok(_expire([*refs, refs[0]], _now_ms()))
    assert answer.delete_open_keys.deleted == 2
    assert leader.store.count(om_pb2.OPEN_KEY) == leader.store.count(om_pb2.OPEN_FILE) == 0
    assert (await leader.call(_expire(refs, _now_ms()))).status == om_pb2.KEY_NOT_FOUND


@pytest.mark.parametrize(("request_", "reason"), [
    (_purge([], 1), "a purge names 1 to"),
    (_purge([b"k"] * (purge_keys.ROWS_MAX + 1), 1), "a purge names 1 to"),
    (_expire([], 1), "a purge names 1 to"),
    (_expire([(om_pb2.KEY, b"/vol/obs/k")], 1), "only openKeyTable and openFileTable"),
    (_expire([(om_pb2.OPEN_KEY, b"k")] * (purge_keys.ROWS_MAX + 1), 1),
     "a purge names 1 to"),
])
async def test_malformed_steps_are_refused_and_write_nothing(
        leader: LeaderUnderTest, request_: om_pb2.OMRequest, reason: str) -> None:
    await _put(leader, OBS_B, "kept")
    before = leader.store.digests()
    answer = await leader.call(request_)
    assert answer.status == om_pb2.INVALID_REQUEST
    assert reason in answer.message
    assert leader.store.digests() == before


async def test_the_purger_removes_deleted_rows_past_retention_in_bounded_steps(
        leader: LeaderUnderTest) -> None:
    purger = leader.service.flow.purger
    await _deleted(leader, 5)
    purger.config = PurgeConfig(rows_max=2, deleted_retention_s=3600)
    assert await purger.purge_deleted_keys() == 0, "younger than the retention"
    purger.config = PurgeConfig(rows_max=2, deleted_retention_s=0)
    removed = [await purger.purge_deleted_keys() for _ in range(5)]
    assert max(removed) == 2, "at most rows_max a step"
    assert sum(removed) == 5
    assert leader.store.count(om_pb2.DELETED) == 0
    assert purger.keys_purged == 5


async def test_the_purger_expires_open_keys_and_files_never_committed(
        leader: LeaderUnderTest) -> None:
    purger = leader.service.flow.purger
    for i in range(3):
        await leader.ok(build.create_key(V, OBS_B, f"open{i}", 10))
    await leader.ok(build.create_file(V, FS_B, "d/open", 10, recursive=True))
    await _put(leader, OBS_B, "committed")
    assert await purger.expire_open_keys() == 0, "a week is far away"
    purger.config = PurgeConfig(rows_max=10, open_key_expire_s=0.001)
    await asyncio.sleep(0.01)
    assert await purger.expire_open_keys() == 4
    assert leader.store.count(om_pb2.OPEN_KEY) == leader.store.count(om_pb2.OPEN_FILE) == 0
    committed = await leader.call(build.lookup_key(V, OBS_B, "committed"))
    assert committed.status == om_pb2.OK, "committed keys are not touched"
    assert purger.open_keys_deleted == 4


async def test_a_commit_after_its_open_key_expired_is_refused(
        leader: LeaderUnderTest) -> None:
    opened = (await leader.ok(build.create_key(V, OBS_B, "late", 10))).create_key
    leader.service.flow.purger.config = PurgeConfig(open_key_expire_s=0.001)
    await asyncio.sleep(0.01)
    assert await leader.service.flow.purger.expire_open_keys() == 1
    late = await leader.call(build.commit_key(V, OBS_B, "late", opened.client_session_id, 10))
    assert late.status == om_pb2.KEY_NOT_FOUND
    assert leader.store.get(om_pb2.KEY, tables.key_key(V, OBS_B, "late")) is None


async def test_the_purger_aborts_uploads_never_completed(leader: LeaderUnderTest) -> None:
    purger = leader.service.flow.purger
    started = await leader.ok(build.initiate_multipart_upload(V, OBS_B, "mpu"))
    upload_id = started.initiate_multipart_upload.upload_id
    part = (await leader.ok(build.create_key(V, OBS_B, "mpu", 10, upload_id=upload_id))
            ).create_key
    await leader.ok(build.commit_multipart_upload(V, OBS_B, "mpu", upload_id, 1,
                                                  part.client_session_id, 10))
    assert await purger.expire_multipart_uploads() == 0, "a month is far away"
    purger.config = PurgeConfig(open_key_expire_s=0.001, multipart_expire_s=0.001)
    await asyncio.sleep(0.01)
    assert await purger.expire_open_keys() == 0, "an upload's own open row goes with it"
    assert await purger.expire_multipart_uploads() == 1
    assert leader.store.count(om_pb2.MULTIPART_INFO) == leader.store.count(om_pb2.OPEN_KEY) == 0
    assert leader.store.count(om_pb2.DELETED) == 1, "its part waits in deletedTable"
    bucket = om_pb2.BucketInfo.FromString(
        leader.store.get(om_pb2.BUCKET, tables.bucket_key(V, OBS_B)) or b"")
    assert bucket.used_bytes == 0, "the part's bytes are released"
    assert purger.uploads_aborted == 1
    late = await leader.call(build.complete_multipart_upload(V, OBS_B, "mpu", upload_id,
                                                             [(1, "")]))
    assert late.status == om_pb2.NO_SUCH_MULTIPART_UPLOAD_ERROR


async def test_the_purger_reads_the_services_clock_not_the_wall(
        leader: LeaderUnderTest) -> None:
    """The expiry cutoff rides in the replicated request, so it comes from the clock the
    service was given (a simulator's): a clock a week and a day ahead expires what the
    wall clock would keep."""
    purger = leader.service.flow.purger
    await leader.ok(build.create_key(V, OBS_B, "open", 10))
    assert await purger.expire_open_keys() == 0, "a week is far away"
    ahead_ms = int((PurgeConfig().open_key_expire_s + 86_400) * 1000)
    purger.clock_ms = lambda: _now_ms() + ahead_ms
    assert await purger.expire_open_keys() == 1
