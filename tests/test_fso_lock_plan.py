"""``[fso] lock_plan``: the object-id plan against Ozone mainline's bucket lock.

The setting is validated and reaches the leader; in ``"bucket"`` mode every FSO
write plans its bucket's exclusive lock and nothing else, in ``"object-id"`` mode
none does (they take the bucket's read lock and slot locks), and on an object-store
bucket the setting changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from om import config as om_config
from om.client import requests as build
from om.config import FSO_LOCK_BUCKET, FSO_LOCK_OBJECT_ID, ConfigError, Fso, ServerConfig
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, NoReservations
from om.executor.fso.fs import FSO
from om.executor.registry import dispatch
from om.gatekeeper.fs_locks import plan_fs, plan_fs_locks
from om.gatekeeper.lock_plan import Level, LockRequest, Mode, bucket_lock, key_lock
from om.node.parts import leader_config
from om.protocol import om_pb2
from om.schema.read_view import Parsed, parse_row
from om.schema.tables import TableId
from tests.leader_harness import LeaderUnderTest, config

V, B, OBS = "vol", "fsb", "obs"


def test_the_lock_plan_defaults_to_object_ids_and_is_read_from_the_toml(
        tmp_path: Path) -> None:
    assert ServerConfig().fso.lock_plan == FSO_LOCK_OBJECT_ID
    toml = tmp_path / "om.toml"
    toml.write_text('[fso]\nlock_plan = "bucket"\n')
    loaded = om_config.load(toml)
    assert loaded.fso.lock_plan == FSO_LOCK_BUCKET
    assert leader_config(loaded).fso_lock_plan == FSO_LOCK_BUCKET, "it reaches the leader"
    assert leader_config(ServerConfig()).fso_lock_plan == FSO_LOCK_OBJECT_ID


@pytest.mark.parametrize(("toml", "message"), [
    ('[fso]\nlock_plan = "path"\n', "lock_plan must be one of"),
    ('[fso]\nlock_plan = "Bucket"\n', "lock_plan must be one of"),
    ('[fso]\nlocks = "bucket"\n', "unknown keys in [fso]"),
])
def test_a_bad_lock_plan_is_refused(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "om.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        om_config.load(path)
    with pytest.raises(ConfigError):
        ServerConfig(fso=Fso(lock_plan="")).validate()


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=10.0))
    await under_test.start()
    await under_test.ok(build.create_volume(V))
    await under_test.ok(build.create_bucket(V, B, layout=FSO))
    await under_test.ok(build.create_bucket(V, OBS))
    await under_test.ok(build.create_directory(V, B, "a/b"))
    opened = await under_test.ok(build.create_file(V, B, "a/b/f", 1))
    await under_test.ok(build.commit_key(V, B, "a/b/f", opened.create_file.client_session_id, 1))
    yield under_test
    under_test.replicator.gate.set()
    await under_test.close()


def _writes(bucket: str) -> dict[str, om_pb2.OMRequest]:
    """One write of every type the FSO planner handles."""
    return {
        "CreateDirectory": build.create_directory(V, bucket, "a/b/new"),
        "CreateFile": build.create_file(V, bucket, "a/b/g", 1, recursive=True),
        "CreateKey": build.create_key(V, bucket, "a/b/h", 1),
        "CommitKey": build.commit_key(V, bucket, "a/b/h", 12345, 1),
        "DeleteKey": build.delete_key(V, bucket, "a/b/f"),
        "RenameKey": build.rename_key(V, bucket, "a/b", "a/c"),
        "CompleteMultiPartUpload": build.complete_multipart_upload(V, bucket, "a/b/m", "123",
                                                                   [(1, "")]),
    }


def _plan(leader: LeaderUnderTest, request: om_pb2.OMRequest,
          lock_plan: str) -> tuple[LockRequest, ...] | None:
    return plan_fs_locks(leader.stamp(request), leader.store, 1024, lock_plan)


@pytest.mark.parametrize("write", sorted(_writes(B)))
async def test_the_bucket_plan_takes_the_buckets_exclusive_lock_for_every_fso_write(
        leader: LeaderUnderTest, write: str) -> None:
    request = _writes(B)[write]
    assert _plan(leader, request, FSO_LOCK_BUCKET) == (bucket_lock(V, B, Mode.WRITE),)
    object_ids = _plan(leader, request, FSO_LOCK_OBJECT_ID)
    assert object_ids is not None
    assert bucket_lock(V, B, Mode.WRITE) not in object_ids
    assert object_ids[0] == bucket_lock(V, B, Mode.READ), "the object-id plan shares the bucket"
    assert any(lock.level is Level.SLOT and lock.mode is Mode.WRITE for lock in object_ids)


@pytest.mark.parametrize("write", sorted(_writes(OBS)))
async def test_neither_plan_touches_an_object_store_bucket(
        leader: LeaderUnderTest, write: str) -> None:
    for lock_plan in (FSO_LOCK_BUCKET, FSO_LOCK_OBJECT_ID):
        assert _plan(leader, _writes(OBS)[write], lock_plan) is None


async def _two_creates_in_other_directories(tmp_path: Path, lock_plan: str) -> int:
    """Writes waiting for a lock while the first of two creates in unrelated
    directories is held back in replication."""
    under_test = LeaderUnderTest(tmp_path / lock_plan, config(lock_timeout_s=10.0,
                                                              fso_lock_plan=lock_plan))
    await under_test.start()
    try:
        await under_test.ok(build.create_volume(V))
        await under_test.ok(build.create_bucket(V, B, layout=FSO))
        await under_test.ok(build.create_directory(V, B, "x"))
        await under_test.ok(build.create_directory(V, B, "y"))
        under_test.replicator.gate.clear()
        first = under_test.service.submit(under_test.stamp(
            build.create_file(V, B, "x/1", 1)))
        second = under_test.service.submit(under_test.stamp(
            build.create_file(V, B, "y/1", 1)))
        waiting = under_test.service.waiting
        under_test.replicator.gate.set()
        answers = await asyncio.gather(first, second)
        assert [a.status for a in answers] == [om_pb2.OK, om_pb2.OK]
        under_test.assert_idle()
        return waiting
    finally:
        under_test.replicator.gate.set()
        await under_test.close()


async def test_the_bucket_plan_serialises_creates_the_object_id_plan_runs_together(
        tmp_path: Path) -> None:
    assert await _two_creates_in_other_directories(tmp_path, FSO_LOCK_OBJECT_ID) == 0
    assert await _two_creates_in_other_directories(tmp_path, FSO_LOCK_BUCKET) == 1


class _CountingView:
    """The store, counting the directory and file rows read."""

    def __init__(self, leader: LeaderUnderTest) -> None:
        self.store = leader.store
        self.path_reads = 0

    def get(self, table: TableId, key: bytes) -> bytes | None:
        if table in (om_pb2.DIRECTORY, om_pb2.FILE):
            self.path_reads += 1
        return self.store.get(table, key)

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        return self.store.scan(table, prefix, start_after, limit)


@pytest.mark.parametrize("write", sorted(_writes(B)))
async def test_a_handler_uses_the_paths_its_lock_plan_resolved(
        leader: LeaderUnderTest, write: str) -> None:
    """Executed at once after its plan, a write reads no directory or file row again
    (the plan's resolution is the handler's), and answers what it answers alone."""
    request = leader.stamp(_writes(B)[write])
    found = plan_fs(request, leader.store, 1024, FSO_LOCK_OBJECT_ID)
    assert found is not None
    locks, planned = found
    assert locks == plan_fs_locks(request, leader.store, 1024)
    paths = {request.rename_key.to_key} if write == "RenameKey" else set()
    assert {path for (_, _, path) in planned} == {_path(request)} | paths
    answers = []
    for given in (planned, {}):
        view = _CountingView(leader)
        ctx = ExecContext("alice", 1000, 1, NoReservations(), planned=given)
        answers.append(dispatch(request, view, ChangeRecorder(), ctx))
        if given:
            assert view.path_reads == 0, "resolved once, by the plan"
    assert answers[0].status == answers[1].status
    assert answers[0] == answers[1] or write in ("CreateFile", "CreateKey")   # session ids


def _path(request: om_pb2.OMRequest) -> str:
    """The request's (first) path."""
    return str(getattr(request, request.WhichOneof("body") or "").key)


async def test_the_bucket_plan_resolves_nothing(leader: LeaderUnderTest) -> None:
    found = plan_fs(leader.stamp(_writes(B)["CreateFile"]), leader.store, 1024,
                    FSO_LOCK_BUCKET)
    assert found == ((bucket_lock(V, B, Mode.WRITE),), {})


async def test_a_multipart_complete_locks_its_path_and_the_upload_a_part_only_the_bucket(
        leader: LeaderUnderTest) -> None:
    """The complete creates the file as a CommitKey does, and removes the upload's row,
    which a part's commit and the abort change under the key's write lock; a part's
    CreateKey writes a row keyed by a fresh id, in no directory."""
    complete = _plan(leader, _writes(B)["CompleteMultiPartUpload"], FSO_LOCK_OBJECT_ID)
    assert complete is not None
    assert key_lock(V, B, "a/b/m") in complete
    assert any(lock.level is Level.SLOT and lock.mode is Mode.WRITE for lock in complete)
    assert list(complete) == sorted(complete), "in the global lock order"
    part = build.create_key(V, B, "a/b/m", 5, upload_id="123")
    assert _plan(leader, part, FSO_LOCK_OBJECT_ID) is None, "planned as in an OBS bucket"
