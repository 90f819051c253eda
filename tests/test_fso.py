"""File-system buckets (FILE_SYSTEM_OPTIMIZED) in-process: rows, requests, statuses.

The leader flow on a real store (``tests/leader_harness.py``): directories are rows,
missing parents are created in the same request, a directory rename moves one row,
a recursive delete leaves one tombstone, and bad paths write nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.fso.fs import FSO
from om.flows.purge import PurgeConfig
from om.integrity import fs_audit
from om.protocol import om_pb2
from tests.leader_harness import LeaderUnderTest, config

V, B = "vol", "fsb"


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=5.0))
    await under_test.start()
    await under_test.ok(build.create_volume(V))
    await under_test.ok(build.create_bucket(V, B, layout=FSO))
    yield under_test
    under_test.replicator.gate.set()
    await under_test.close()


def _rows(leader: LeaderUnderTest, table: om_pb2.Table.ValueType) -> int:
    return leader.store.count(table)


async def _status(leader: LeaderUnderTest, request: om_pb2.OMRequest) -> str:
    return om_pb2.Status.Name((await leader.call(request)).status)


async def _put(leader: LeaderUnderTest, path: str, size: int = 10,
               recursive: bool = True) -> om_pb2.KeyInfo:
    opened = await leader.ok(build.create_file(V, B, path, size, recursive=recursive))
    session = opened.create_file.client_session_id
    return (await leader.ok(build.commit_key(V, B, path, session, size))).commit_key.key_info


async def test_mkdir_p_creates_every_missing_parent_in_one_request(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_directory(V, B, "a/b/c"))
    assert _rows(leader, om_pb2.DIRECTORY) == 3
    assert leader.bucket(V, B).used_namespace == 3, "directories count in the namespace"
    again = await _status(leader, build.create_directory(V, B, "a/b/c"))
    assert again == "DIRECTORY_ALREADY_EXISTS"
    await leader.ok(build.create_directory(V, B, "/a/b/d/"))
    assert _rows(leader, om_pb2.DIRECTORY) == 4
    found = (await leader.ok(build.get_file_status(V, B, "a/b"))).get_file_status.status
    assert found.is_directory
    assert found.path == "a/b"


async def test_files_live_in_their_directory(leader: LeaderUnderTest) -> None:
    info = await _put(leader, "logs/2026/app.log", 100)
    assert info.key_name == "logs/2026/app.log", "answers carry the whole path"
    assert _rows(leader, om_pb2.DIRECTORY) == 2
    assert _rows(leader, om_pb2.FILE) == 1
    assert _rows(leader, om_pb2.OPEN_FILE) == 0
    looked = (await leader.ok(build.lookup_key(V, B, "logs/2026/app.log"))).lookup_key
    assert looked.key_info.data_size == 100
    assert await _status(leader, build.lookup_file(V, B, "logs/2026")) == "NOT_A_FILE"
    assert await _status(leader, build.lookup_file(V, B, "logs/nope")) == "FILE_NOT_FOUND"
    bucket = leader.bucket(V, B)
    assert (bucket.used_namespace, bucket.used_bytes) == (3, 300)


async def test_create_file_flags(leader: LeaderUnderTest) -> None:
    assert await _status(leader, build.create_file(V, B, "x/y/f")) == "DIRECTORY_NOT_FOUND"
    await _put(leader, "x/f")
    assert await _status(leader, build.create_file(V, B, "x/f")) == "FILE_ALREADY_EXISTS"
    await leader.ok(build.create_file(V, B, "x/f", 5, overwrite=True))
    assert await _status(leader, build.create_file(V, B, "x")) == "NOT_A_FILE"
    assert await _status(leader, build.create_directory(V, B, "x/f/g")) == \
        "FILE_ALREADY_EXISTS", "a file where a directory is expected"


@pytest.mark.parametrize("path", ["a//b", "a/./b", "a/../b", "..", "/", "a/\x01"])
async def test_bad_paths_are_refused_and_write_nothing(leader: LeaderUnderTest,
                                                       path: str) -> None:
    def rows() -> dict[str, str]:
        """Every table's digest but the applied position's: each refusal waits for a
        read round, whose empty batch moves it (om/flows/leader_flow.py, _end_refused)."""
        return {name: digest for name, digest in leader.store.digests().items()
                if name != "transactionInfoTable"}

    before = rows()
    for request in (build.create_directory(V, B, path), build.create_file(V, B, path),
                    build.create_key(V, B, path, 1)):
        assert await _status(leader, request) == "INVALID_KEY_NAME"
    assert rows() == before


async def test_list_status_pages_in_tree_order(leader: LeaderUnderTest) -> None:
    for path in ("d/b", "d/a/2", "d/a/1", "d/c/3", "top"):
        await _put(leader, path)
    flat = (await leader.ok(build.list_status(V, B, "d"))).list_status
    assert [s.path for s in flat.statuses] == ["d/a", "d/b", "d/c"]
    assert [s.is_directory for s in flat.statuses] == [True, False, True]
    everything = []
    start = ""
    while True:
        page = (await leader.ok(build.list_status(V, B, "", recursive=True,
                                                  start_key=start, num_entries=2))).list_status
        everything += [s.path for s in page.statuses]
        if not page.truncated:
            break
        start = page.statuses[-1].path
    assert everything == ["d", "d/a", "d/a/1", "d/a/2", "d/b", "d/c", "d/c/3", "top"]
    keys = (await leader.ok(build.list_keys(V, B, prefix="d/a"))).list_keys
    assert [k.key_name for k in keys.key_info] == ["d/a/", "d/a/1", "d/a/2"]


async def test_directory_rename_moves_one_row_and_never_into_itself(
        leader: LeaderUnderTest) -> None:
    for n in range(20):
        await _put(leader, f"src/deep/f{n}")
    await leader.ok(build.create_directory(V, B, "dst"))
    before_files = leader.store.count(om_pb2.FILE)
    await leader.ok(build.rename_key(V, B, "src", "dst/moved"))
    assert leader.store.count(om_pb2.FILE) == before_files
    assert (await leader.ok(build.lookup_key(V, B, "dst/moved/deep/f7"))).lookup_key
    assert await _status(leader, build.lookup_key(V, B, "src/deep/f7")) == "KEY_NOT_FOUND"
    assert await _status(leader, build.rename_key(V, B, "dst", "dst/moved/deep/x")) == \
        "INVALID_REQUEST", "a directory cannot move into itself"
    assert await _status(leader, build.rename_key(V, B, "dst/moved", "dst")) == \
        "FILE_ALREADY_EXISTS"


async def test_delete_file_directory_and_subtree(leader: LeaderUnderTest) -> None:
    await _put(leader, "p/q/f", 10)
    await leader.ok(build.create_directory(V, B, "p/empty"))
    assert await _status(leader, build.delete_key(V, B, "p")) == "DIRECTORY_NOT_EMPTY"
    await leader.ok(build.delete_key(V, B, "p/empty"))
    await leader.ok(build.delete_key(V, B, "p/q/f"))
    assert leader.bucket(V, B).used_bytes == 0
    await _put(leader, "p/q/g", 10)
    await leader.ok(build.delete_key(V, B, "p", recursive=True))
    assert _rows(leader, om_pb2.DELETED_DIRECTORY) == 1, "one tombstone, whatever the subtree"
    assert await _status(leader, build.get_file_status(V, B, "p/q/g")) == "FILE_NOT_FOUND"
    assert await _status(leader, build.delete_bucket(V, B)) == "BUCKET_NOT_EMPTY", \
        "the subtree waits for its purge"


async def test_one_purge_step_takes_many_small_deleted_subtrees(
        leader: LeaderUnderTest) -> None:
    """As Ozone's DirectoryDeletingService, a step empties deleted directories until
    its row budget is spent, not one directory a step (the soak's backlog grew
    faster than one a step could drain)."""
    for n in range(6):
        await _put(leader, f"t{n}/f", 10)
        await leader.ok(build.delete_key(V, B, f"t{n}", recursive=True))
    purger = leader.service.flow.purger
    purger.config = PurgeConfig(interval_s=1.0, rows_max=4)
    assert await purger.step()
    assert purger.pending_directories == 6, "the step saw six waiting"
    assert await purger.step()
    assert purger.pending_directories == 2, "four one-file subtrees in one step of four rows"
    assert not await purger.step()
    assert purger.pending_directories == 0
    bucket = leader.bucket(V, B)
    assert (bucket.used_namespace, bucket.used_bytes) == (0, 0), "every count released"
    assert fs_audit.fs_problems(leader.store) == []


async def test_object_store_buckets_refuse_file_system_requests(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.create_bucket(V, "obs"))
    assert await _status(leader, build.create_directory(V, "obs", "a")) == \
        "NOT_SUPPORTED_OPERATION"
    assert await _status(leader, build.delete_key(V, "obs", "a", recursive=True)) == \
        "NOT_SUPPORTED_OPERATION"
    assert await _status(leader, build.create_bucket(V, "bad", layout="LEGACY")) == \
        "INVALID_REQUEST"


async def test_the_purge_empties_a_deleted_subtree_in_bounded_steps(
        leader: LeaderUnderTest) -> None:
    for n in range(5):
        await _put(leader, f"big/sub{n % 2}/f{n}", 10)
    await leader.ok(build.create_directory(V, B, "big/sub1/deeper/deepest"))
    await leader.ok(build.delete_key(V, B, "big", recursive=True))
    purger = leader.service.flow.purger
    assert purger.count_pending() is not None
    assert purger.pending_directories == 1
    purger.config = PurgeConfig(interval_s=1.0, rows_max=2)
    steps = 0
    while await purger.step():
        steps += 1
        assert steps < 50, "the purge ends"
    assert purger.pending_directories == 0
    assert leader.store.count(om_pb2.DIRECTORY) == 0
    assert leader.store.count(om_pb2.FILE) == 0
    bucket = leader.bucket(V, B)
    assert (bucket.used_namespace, bucket.used_bytes) == (0, 0), "every count released"
    assert steps > 3, "bounded steps"
    assert fs_audit.fs_problems(leader.store) == []
    await leader.ok(build.delete_bucket(V, B))
