"""File-system buckets under concurrency: the locks by object id, checked by the auditor.

Requests are submitted together, as one read of a connection delivers them, with
batches held back where a scenario needs writes in flight at once; afterwards the
tree must hold every invariant of ``om/integrity/fs_audit.py`` (no orphan, no cycle,
no name twice, unique ids, usage equal to the tree). The last tests seed broken
trees into a store and check that the same auditor reports each.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om.client import requests as build
from om.executor.errors import OMError
from om.executor.fso.fs import FSO, components, ids_of, resolve
from om.gatekeeper.fs_locks import plan_fs_locks
from om.gatekeeper.lock_plan import Level, Mode
from om.integrity import fs_audit
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import Parsed, parse_row
from om.schema.tables import TableId
from tests.leader_harness import LeaderUnderTest, config

V, B = "vol", "fsb"


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=10.0))
    await under_test.start()
    await under_test.ok(build.create_volume(V))
    await under_test.ok(build.create_bucket(V, B, quota_in_bytes=10**9, layout=FSO))
    yield under_test
    under_test.replicator.gate.set()
    await under_test.close()


def _clean(leader: LeaderUnderTest) -> None:
    assert fs_audit.fs_problems(leader.store) == []
    leader.assert_idle()


async def _all(leader: LeaderUnderTest, *requests: om_pb2.OMRequest) -> list[str]:
    answers = await asyncio.gather(*(leader.service.submit(leader.stamp(r)) for r in requests))
    return [om_pb2.Status.Name(a.status) for a in answers]


async def _put(leader: LeaderUnderTest, path: str, size: int = 10) -> None:
    opened = await leader.ok(build.create_file(V, B, path, size, recursive=True))
    await leader.ok(build.commit_key(V, B, path, opened.create_file.client_session_id, size))


def _directories(leader: LeaderUnderTest) -> list[str]:
    return sorted(om_pb2.DirectoryInfo.FromString(raw).name
                  for _, raw in leader.store.scan(om_pb2.DIRECTORY, b"", None, 10_000))


async def test_64_way_mkdir_p_on_overlapping_paths_makes_each_directory_once(
        leader: LeaderUnderTest) -> None:
    paths = [f"top/mid{n % 4}/leaf{n % 8}" for n in range(64)]
    statuses = await _all(leader, *(build.create_directory(V, B, p) for p in paths))
    assert set(statuses) <= {"OK", "DIRECTORY_ALREADY_EXISTS"}
    assert statuses.count("OK") == 8, "one creator for each distinct leaf"
    assert _directories(leader).count("top") == 1
    assert len(_directories(leader)) == 1 + 4 + 8
    _clean(leader)


@pytest.mark.parametrize("create_first", [True, False])
async def test_create_file_racing_rm_r(leader: LeaderUnderTest, create_first: bool) -> None:
    await _put(leader, "d/e/old")
    create = build.create_file(V, B, "d/e/new", 5, recursive=True)
    remove = build.delete_key(V, B, "d", recursive=True)
    statuses = await _all(leader, *((create, remove) if create_first else (remove, create)))
    assert statuses[1 if create_first else 0] == "OK", "the delete always succeeds"
    _clean(leader)


async def test_crossing_file_renames_do_not_deadlock(leader: LeaderUnderTest) -> None:
    await _put(leader, "x/a")
    await _put(leader, "y/b")
    statuses = await asyncio.wait_for(_all(
        leader, build.rename_key(V, B, "x/a", "y/a2"), build.rename_key(V, B, "y/b", "x/b2"),
        build.rename_key(V, B, "x/a", "x/a3"), build.rename_key(V, B, "y/b", "y/b3")), 10)
    assert statuses[:2] == ["OK", "OK"]
    _clean(leader)


async def test_crossing_directory_renames_make_no_cycle(leader: LeaderUnderTest) -> None:
    for name in ("a", "b"):
        await _put(leader, f"{name}/file")
    leader.replicator.gate.clear()   # both in flight at once: their locks must conflict
    first = leader.service.submit(leader.stamp(build.rename_key(V, B, "a", "b/x")))
    second = leader.service.submit(leader.stamp(build.rename_key(V, B, "b", "a/y")))
    await asyncio.sleep(0.05)
    leader.replicator.gate.set()
    statuses = sorted([om_pb2.Status.Name((await first).status),
                       om_pb2.Status.Name((await second).status)])
    assert statuses.count("OK") == 1, statuses
    assert set(statuses) - {"OK"} <= {"INVALID_REQUEST", "DIRECTORY_NOT_FOUND", "KEY_NOT_FOUND"}
    _clean(leader)


async def test_a_create_under_a_directory_being_renamed(leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_directory(V, B, "proj/src"))
    statuses = await _all(leader, build.rename_key(V, B, "proj", "renamed"),
                          build.create_file(V, B, "proj/src/main.py", 3))
    assert statuses[0] == "OK"
    assert statuses[1] in ("OK", "DIRECTORY_NOT_FOUND")
    _clean(leader)


async def test_delete_of_a_non_empty_directory_racing_a_create(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_directory(V, B, "tmp"))
    statuses = await _all(leader, build.create_file(V, B, "tmp/f", 1),
                          build.delete_key(V, B, "tmp"))
    assert statuses in (["OK", "DIRECTORY_NOT_EMPTY"], ["OK", "OK"])
    _clean(leader)


async def test_a_mixed_storm_keeps_the_tree_and_the_quota(leader: LeaderUnderTest) -> None:
    names = [f"n{n}" for n in range(4)]
    requests: list[om_pb2.OMRequest] = []
    for a, b in itertools.product(names, repeat=2):
        requests += [build.create_directory(V, B, f"{a}/{b}"),
                     build.create_file(V, B, f"{a}/{b}/f", 7, recursive=True),
                     build.rename_key(V, B, f"{a}/{b}", f"{b}/{a}-moved"),
                     build.delete_key(V, B, f"{b}/{a}", recursive=True)]
    for _ in range(3):
        statuses = await _all(leader, *requests)
        assert "INTERNAL_ERROR" not in statuses
        _clean(leader)


async def test_a_waiting_write_plans_again_when_its_path_moved(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_directory(V, B, "old/sub"))
    leader.replicator.gate.clear()
    rename = leader.service.submit(leader.stamp(build.rename_key(V, B, "old", "new")))
    create = leader.service.submit(leader.stamp(build.create_directory(V, B, "old/sub/x")))
    assert leader.service.waiting == 1, "the create waits for the rename's slot"
    leader.replicator.gate.set()
    assert (await rename).status == om_pb2.OK
    answer = await create
    assert answer.status == om_pb2.OK, "re-planned: /old is created afresh"
    assert sorted(_directories(leader)) == ["new", "old", "sub", "sub", "x"]
    _clean(leader)


# -- the lock planner ----------------------------------------------------------

async def test_the_planner_shares_ancestors_and_excludes_the_target(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_directory(V, B, "a/b"))
    request = leader.stamp(build.create_file(V, B, "a/b/c/d", recursive=True))
    plan = plan_fs_locks(request, leader.store, 1024)
    assert plan is not None
    slots = [lock for lock in plan if lock.level is Level.SLOT]
    assert [lock.mode for lock in slots].count(Mode.WRITE) == 1
    assert len(slots) == 3, "two ancestors shared, the first missing name exclusive"
    assert list(plan) == sorted(plan), "one total order"


class _Rows:
    """An in-memory ReadView of a bucket's directories (for the planner's properties)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, bytes], bytes] = {}
        self.rows[(om_pb2.BUCKET, tables.bucket_key(V, B))] = _BUCKET.SerializeToString()
        self.rows[(om_pb2.VOLUME, tables.volume_key(V))] = _VOLUME.SerializeToString()

    def get(self, table: int, key: bytes) -> bytes | None:
        return self.rows.get((table, key))

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)

    def scan(self, table: int, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        found = sorted((k, v) for (t, k), v in self.rows.items()
                       if t == table and k.startswith(prefix)
                       and (start_after is None or k > start_after))
        return found[:limit]

    def mkdir(self, parts: tuple[str, ...]) -> None:
        parent = _BUCKET.object_id
        for name in parts:
            key = tables.fs_key(_VOLUME.object_id, _BUCKET.object_id, parent, name)
            raw = self.rows.get((om_pb2.DIRECTORY, key))
            if raw is None:
                row = om_pb2.DirectoryInfo(name=name, object_id=10_000 + len(self.rows),
                                           parent_object_id=parent)
                raw = self.rows[(om_pb2.DIRECTORY, key)] = row.SerializeToString()
            parent = om_pb2.DirectoryInfo.FromString(raw).object_id


_VOLUME = om_pb2.VolumeInfo(volume=V, object_id=7)
_BUCKET = om_pb2.BucketInfo(volume_name=V, bucket_name=B, object_id=9, layout=FSO)
_NAMES = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(tuple)


@settings(max_examples=120, deadline=None)
@given(st.lists(_NAMES, max_size=6), _NAMES, _NAMES)
def test_a_write_conflicts_with_any_write_whose_path_runs_through_its_target(
        existing: list[tuple[str, ...]], first: tuple[str, ...],
        second: tuple[str, ...]) -> None:
    """The planner's argument (om/gatekeeper/fs_locks.py), checked on random trees: the
    slot a write changes is locked, shared or exclusive, by every write whose path runs
    through it, so the two never run at once."""
    view = _Rows()
    for parts in existing:
        view.mkdir(parts)
    ids = ids_of(_VOLUME, _BUCKET)

    def plan(path: tuple[str, ...]) -> dict[tuple[Level, str], Mode]:
        request = build.create_directory(V, B, "/".join(path))
        found = plan_fs_locks(request, view, 1024)
        assert found is not None
        return {lock.resource: lock.mode for lock in found}

    def slots_along(path: tuple[str, ...]) -> set[str]:
        resolved = resolve(view, ids, path)
        parent, names = _BUCKET.object_id, set()
        for name, found in zip(path, (*resolved.parents, None), strict=False):
            names.add(f"{_BUCKET.object_id}/{parent}/{name}")
            if found is None:
                break
            parent = found.object_id
        return names

    one, two = plan(first), plan(second)
    (target,) = [name for (level, name), mode in one.items() if mode is Mode.WRITE
                 and level is Level.SLOT]
    if target in slots_along(second):
        assert (Level.SLOT, target) in two, "the other write locks the target too"


def _components(path: str) -> tuple[str, ...] | OMError:
    try:
        return components(path, 1024)
    except OMError as error:
        return error


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="ab/.\x01", max_size=12))
def test_the_path_rules_accept_exactly_clean_paths(path: str) -> None:
    parts = _components(path)
    if isinstance(parts, OMError):
        assert parts.status == om_pb2.INVALID_KEY_NAME
        return
    assert all(part not in ("", ".", "..") and "\x01" not in part for part in parts)
    assert "/".join(parts) == path.strip("/") or "/".join(parts) == path[1:].rstrip("/")


# -- the auditor's FSO invariants, red ------------------------------------------

def _seed(leader: LeaderUnderTest, table: om_pb2.Table.ValueType, key: bytes,
          row: om_pb2.DirectoryInfo | om_pb2.KeyInfo) -> None:
    batch = leader.store.new_batch()
    leader.store.batch_put(batch, table, key, row.SerializeToString())
    leader.store.write(batch)


async def _ids(leader: LeaderUnderTest) -> tuple[int, int]:
    volume = om_pb2.VolumeInfo.FromString(leader.store.get(om_pb2.VOLUME,
                                                           tables.volume_key(V)) or b"")
    return volume.object_id, leader.bucket(V, B).object_id


@pytest.mark.parametrize("broken", ["orphan", "cycle", "duplicate_name", "usage"])
async def test_the_auditor_reports_a_broken_tree(leader: LeaderUnderTest, broken: str) -> None:
    await _put(leader, "a/f")
    assert fs_audit.fs_problems(leader.store) == []
    volume_id, bucket_id = await _ids(leader)
    resolved = resolve(leader.store, ids_of(om_pb2.VolumeInfo(object_id=volume_id),
                                            leader.bucket(V, B)), ("a", "f"))
    a = resolved.parents[0]
    category = {"orphan": fs_audit.FS_ORPHAN, "cycle": fs_audit.FS_CYCLE,
                "duplicate_name": fs_audit.FS_DUPLICATE_NAME, "usage": fs_audit.FS_USAGE}[broken]
    if broken == "orphan":
        row = om_pb2.DirectoryInfo(name="lost", object_id=a.object_id + 9999,
                                   parent_object_id=a.object_id + 5555)
        _seed(leader, om_pb2.DIRECTORY, tables.fs_key(volume_id, bucket_id,
                                                      row.parent_object_id, "lost"), row)
    elif broken == "cycle":
        one = om_pb2.DirectoryInfo(name="p", object_id=a.object_id + 1001,
                                   parent_object_id=a.object_id + 1002)
        two = om_pb2.DirectoryInfo(name="q", object_id=a.object_id + 1002,
                                   parent_object_id=a.object_id + 1001)
        for row in (one, two):
            _seed(leader, om_pb2.DIRECTORY, tables.fs_key(volume_id, bucket_id,
                                                          row.parent_object_id, row.name), row)
    elif broken == "duplicate_name":
        file_row = om_pb2.KeyInfo(key_name="a", parent_object_id=bucket_id,
                                  object_id=a.object_id + 77, replication_factor=3)
        _seed(leader, om_pb2.FILE, tables.fs_key(volume_id, bucket_id, bucket_id, "a"),
              file_row)
    else:
        bucket = leader.bucket(V, B)
        bucket.used_namespace += 1
        batch = leader.store.new_batch()
        leader.store.batch_put(batch, om_pb2.BUCKET, tables.bucket_key(V, B),
                               bucket.SerializeToString())
        leader.store.write(batch)
    categories = {found[0] for found in fs_audit.fs_problems(leader.store)}
    assert category in categories, categories
