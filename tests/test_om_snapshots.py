"""OM snapshots on one in-process node (its real store, apply, checkpoints and leader flow):
create, info, list, reads of ``.snapshot/NAME/``, diff, delete, the purge that spares what a
snapshot holds, a restart, a checkpoint a kill cut short; and the red cases, each with
Ozone's status and nothing written. Three-node clusters: tests/test_om_snapshots_cluster.py.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from om import config as om_config
from om.client import requests as build
from om.executor.errors import OMError
from om.executor.om_snapshots import snapshots
from om.flows.leader_flow import LeaderFlow
from om.flows.template import RequestService
from om.node.node import Node
from om.protocol import om_pb2
from om.statemachine.store import Store

V, B = "vol", "bkt"
_CALLS = itertools.count(1)
Diff = om_pb2.DiffEntry


def status(response: om_pb2.OMResponse) -> str:
    return om_pb2.Status.Name(response.status)


async def call(node: Node, request: om_pb2.OMRequest, user: str = "alice") -> om_pb2.OMResponse:
    request.client_id = "snapshot-test"
    request.call_id = next(_CALLS)
    request.user = user
    return await node.submit(request)


async def ok(node: Node, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
    response = await call(node, request)
    assert status(response) == "OK", response.message
    return response


async def put(node: Node, key: str, size: int) -> om_pb2.KeyInfo:
    opened = (await ok(node, build.create_key(V, B, key, size))).create_key
    committed = await ok(node, build.commit_key(V, B, key, opened.client_session_id, size))
    return committed.commit_key.key_info


def data_digests(node: Node) -> dict[str, str]:
    """Every table's digest but transactionInfoTable's (a linearizable read's round commits
    an empty batch, which moves the applied position and nothing else), once the store
    holds everything applied (the old flow's double buffer writes it behind apply); nor the
    retry cache's two tables (the old flow stores every answer, a failure's too)."""
    node.state_machine.quiesce()
    digests = node.store.digests()
    for table in ("transactionInfoTable", "clientRequestReplyTable",
                  "clientRequestExpiryTable"):
        del digests[table]
    return digests


def open_node(directory: Path, toml: str = "") -> Node:
    path = directory / "om.toml"
    path.write_text(toml)
    return Node(om_config.load(path, data_dir=directory / "data"))


@pytest.fixture(params=["leader", "replicated"])
async def node(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Node]:
    started = open_node(tmp_path, f'execution = "{request.param}"\n'
                                  "[snapshot]\nper_bucket_max = 3\nheadroom_bytes_min = 0\n"
                                  "headroom_fraction_min = 0\n[purge]\ninterval_s = 3600\n"
                                  "deleted_retention_s = 0\n")
    await started.start()
    await ok(started, build.create_volume(V))
    await ok(started, build.create_bucket(V, B))
    yield started
    await started.close()


async def lookup(node: Node, name: str, key: str) -> om_pb2.OMResponse:
    return await call(node, build.lookup_key(V, B, build.snapshot_key(name, key)))


async def test_a_snapshot_holds_the_bucket_as_it_was_at_its_create(node: Node) -> None:
    old = await put(node, "a", 10)
    await put(node, "b", 20)
    taken = (await ok(node, build.create_snapshot(V, B, "snap1"))).create_snapshot.snapshot_info
    position = node.state_machine.applied_index
    await put(node, "a", 99)                                   # overwritten after
    await ok(node, build.delete_key(V, B, "b"))                # deleted after
    await put(node, "c", 5)                                    # created after

    found = (await lookup(node, "snap1", "a")).lookup_key.key_info
    assert (found.key_name, found.data_size, found.object_id) == (".snapshot/snap1/a", 10,
                                                                   old.object_id)
    assert (await lookup(node, "snap1", "b")).lookup_key.key_info.data_size == 20
    assert status(await lookup(node, "snap1", "c")) == "KEY_NOT_FOUND"
    assert status(await lookup(node, "snap1", "")) == "KEY_NOT_FOUND"
    listed = (await ok(node, build.list_keys(V, B, prefix=".snapshot/snap1/"))).list_keys
    assert [k.key_name for k in listed.key_info] == [".snapshot/snap1/a", ".snapshot/snap1/b"]
    page = (await ok(node, build.list_keys(V, B, prefix=".snapshot/snap1/",
                                          start_key=".snapshot/snap1/a"))).list_keys
    assert [k.key_name for k in page.key_info] == [".snapshot/snap1/b"]
    live = (await ok(node, build.list_keys(V, B))).list_keys
    assert [(k.key_name, k.data_size) for k in live.key_info] == [("a", 99), ("c", 5)]

    info = (await ok(node, build.get_snapshot_info(V, B, "snap1"))).get_snapshot_info
    assert info.snapshot_info.log_position == position
    assert info.snapshot_info.checkpoint_here
    assert info.snapshot_info.snapshot_id == taken.snapshot_id
    assert info.snapshot_info.status == om_pb2.SNAPSHOT_ACTIVE
    checkpoint = node.om_snapshot_checkpoints.checkpoint_path(taken.snapshot_id)
    assert checkpoint is not None
    assert checkpoint.is_dir()


async def test_list_and_a_generated_name(node: Node) -> None:
    await ok(node, build.create_snapshot(V, B, "snap-b"))
    named = (await ok(node, build.create_snapshot(V, B))).create_snapshot.snapshot_info
    assert named.name.startswith("s2")
    assert len(named.name) == len("s20231025-123456.789")
    await ok(node, build.create_snapshot(V, B, "snap-a"))
    listed = (await ok(node, build.list_snapshots(V, B))).list_snapshot
    assert [s.name for s in listed.snapshot_info] == sorted([named.name, "snap-a", "snap-b"])
    assert all(s.log_position > 0 for s in listed.snapshot_info)
    page = (await ok(node, build.list_snapshots(V, B, prefix="snap", start_after="snap-a",
                                                max_results=5))).list_snapshot
    assert [s.name for s in page.snapshot_info] == ["snap-b"]
    assert not page.truncated


async def test_delete_frees_the_checkpoint(node: Node) -> None:
    await put(node, "a", 1)
    taken = (await ok(node, build.create_snapshot(V, B, "gone"))).create_snapshot.snapshot_info
    directory = node.om_snapshot_checkpoints.checkpoint_path(taken.snapshot_id)
    assert directory is not None
    assert (await lookup(node, "gone", "a")).status == om_pb2.OK   # opened: cached
    await ok(node, build.delete_snapshot(V, B, "gone"))
    assert not directory.parent.exists()
    assert node.om_snapshot_checkpoints.freed == 1
    gauges = node.metrics.flat()
    assert gauges["om_snapshot_checkpoints_taken_total"] == 1
    assert gauges["om_snapshot_checkpoints_freed_total"] == 1
    assert gauges["om_snapshot_checkpoint_last_seconds"] > 0
    assert status(await lookup(node, "gone", "a")) == "FILE_NOT_FOUND"
    assert status(await call(node, build.get_snapshot_info(V, B, "gone"))) == "FILE_NOT_FOUND"
    await ok(node, build.delete_key(V, B, "a"))
    await ok(node, build.delete_bucket(V, B))       # no snapshot left: the bucket may go


async def test_diff_reports_created_deleted_modified_and_renamed_keys(node: Node) -> None:
    await put(node, "keep", 1)
    await put(node, "modify", 2)
    await put(node, "remove", 3)
    await put(node, "move", 4)
    await put(node, "replace", 5)
    await ok(node, build.create_snapshot(V, B, "before"))
    await put(node, "modify", 22)                  # a new version: another object id
    await ok(node, build.delete_key(V, B, "remove"))
    await ok(node, build.rename_key(V, B, "move", "moved"))
    await ok(node, build.delete_key(V, B, "replace"))
    await put(node, "replace", 5)
    await put(node, "new", 6)
    await ok(node, build.create_snapshot(V, B, "after"))
    await put(node, "later", 7)

    expected = [(Diff.MODIFY, "modify", ""), (Diff.RENAME, "move", "moved"),
                (Diff.CREATE, "new", ""), (Diff.DELETE, "remove", ""),
                (Diff.MODIFY, "replace", "")]
    whole = (await ok(node, build.snapshot_diff(V, B, "before", "after"))).snapshot_diff
    assert [(e.type, e.key, e.to_key) for e in whole.entries] == expected
    assert (whole.total, whole.next_token) == (5, "")

    paged: list[tuple[int, str, str]] = []
    token = ""
    for _ in range(10):
        page = (await ok(node, build.snapshot_diff(V, B, "before", "after", token,
                                                   page_size=2))).snapshot_diff
        assert len(page.entries) <= 2
        paged.extend((e.type, e.key, e.to_key) for e in page.entries)
        token = page.next_token
        if not token:
            break
    assert paged == expected

    to_live = (await ok(node, build.snapshot_diff(V, B, "after"))).snapshot_diff
    assert [(e.type, e.key) for e in to_live.entries] == [(Diff.CREATE, "later")]
    backwards = (await ok(node, build.snapshot_diff(V, B, "after", "before"))).snapshot_diff
    assert (Diff.RENAME, "moved", "move") in [(e.type, e.key, e.to_key)
                                               for e in backwards.entries]
    bad = await call(node, build.snapshot_diff(V, B, "before", "after", "9-9-1"))
    assert status(bad) == "INVALID_REQUEST"
    assert status(await call(node, build.snapshot_diff(V, B, "nope"))) == "FILE_NOT_FOUND"


async def test_the_purge_spares_deleted_keys_a_snapshot_holds(node: Node) -> None:
    await put(node, "held", 8)
    await put(node, "before", 8)
    await ok(node, build.delete_key(V, B, "before"))   # gone before the snapshot
    await ok(node, build.create_snapshot(V, B, "keep"))
    await ok(node, build.delete_key(V, B, "held"))     # deleted after: the snapshot holds it
    await put(node, "after", 8)
    await ok(node, build.delete_key(V, B, "after"))    # created and deleted after
    assert isinstance(node.leader, RequestService)
    if not isinstance(node.leader.flow, LeaderFlow):
        pytest.skip("the purger is the leader flow's")
    purger = node.leader.flow.purger
    assert await purger.purge_deleted_keys() == 2
    left = [key for key, _ in node.store.iterate(om_pb2.DELETED)]
    assert len(left) == 1
    assert left[0].startswith(b"/vol/bkt/held/")
    assert (await lookup(node, "keep", "held")).lookup_key.key_info.data_size == 8
    await ok(node, build.delete_snapshot(V, B, "keep"))
    assert await purger.purge_deleted_keys() == 1
    assert node.store.count(om_pb2.DELETED) == 0


async def test_red_cases_answer_ozone_statuses_and_write_nothing(node: Node) -> None:
    await put(node, "a", 1)
    await ok(node, build.create_snapshot(V, B, "one"))
    before = data_digests(node)
    cases = [
        (build.create_snapshot(V, B, "one"), "FILE_ALREADY_EXISTS"),
        (build.delete_snapshot(V, B, "unknown"), "FILE_NOT_FOUND"),
        (build.get_snapshot_info(V, B, "unknown"), "FILE_NOT_FOUND"),
        (build.lookup_key(V, B, ".snapshot/unknown/a"), "FILE_NOT_FOUND"),
        (build.lookup_key(V, B, ".snapshot/"), "FILE_NOT_FOUND"),
        (build.lookup_key(V, B, ".snapshot/one"), "KEY_NOT_FOUND"),
        (build.lookup_key(V, B, ".snapshot"), "KEY_NOT_FOUND"),
        (build.list_keys(V, B, prefix=".snapshot/"), "FILE_NOT_FOUND"),
        (build.list_keys(V, B, prefix=".snapshot/unknown/"), "FILE_NOT_FOUND"),
        (build.list_keys(V, B, prefix=".snapshot/one/", start_key=".snapshot/two/a"),
         "INVALID_REQUEST"),
        (build.create_snapshot(V, "nobucket", "xx1"), "BUCKET_NOT_FOUND"),
        (build.create_snapshot(V, B, "Bad_Name"), "INVALID_KEY_NAME"),
        (build.delete_snapshot(V, B, ""), "INVALID_KEY_NAME"),
        (build.snapshot_diff(V, B, "one", page_size=5000), "INVALID_REQUEST"),
        (build.create_key(V, B, ".snapshot/one/sneaky"), "INVALID_KEY_NAME"),
        (build.rename_key(V, B, "a", ".snapshot/x"), "INVALID_KEY_NAME"),
        (build.create_directory(V, B, ".snapshot"), "INVALID_KEY_NAME"),
        (build.create_file(V, B, "/.snapshot/f", recursive=True), "INVALID_KEY_NAME"),
        (build.delete_bucket(V, B), "CONTAINS_SNAPSHOT"),
    ]
    for request, expected in cases:
        answered = await call(node, request)
        assert status(answered) == expected, (request, answered.message)
    assert data_digests(node) == before
    await ok(node, build.create_snapshot(V, B, "two"))
    await ok(node, build.create_snapshot(V, B, "three"))
    after_three = data_digests(node)
    full = await call(node, build.create_snapshot(V, B, "four"))   # per_bucket_max = 3
    assert status(full) == "QUOTA_EXCEEDED"
    assert "per_bucket_max" in full.message
    assert data_digests(node) == after_three != before


@pytest.mark.parametrize("execution", ["leader", "replicated"])
async def test_no_create_without_disk_headroom(tmp_path: Path, execution: str) -> None:
    node = open_node(tmp_path, f'execution = "{execution}"\n'
                               "[snapshot]\nheadroom_fraction_min = 0.999999\n")
    await node.start()
    try:
        await ok(node, build.create_volume(V))
        await ok(node, build.create_bucket(V, B))
        before = data_digests(node)
        refused = await call(node, build.create_snapshot(V, B, "full"))
        assert status(refused) == "QUOTA_EXCEEDED"
        assert "headroom" in refused.message
        assert data_digests(node) == before
        assert not any(node.om_snapshot_checkpoints.root.iterdir())
    finally:
        await node.close()


def checkpoint_digests(path: Path) -> dict[str, str]:
    store = Store(path, read_only=True)
    try:
        return store.digests()
    finally:
        store.close()


async def test_a_restart_keeps_snapshots_and_retakes_one_a_kill_cut_short(tmp_path: Path) -> None:
    first = open_node(tmp_path)
    await first.start()
    await ok(first, build.create_volume(V))
    await ok(first, build.create_bucket(V, B))
    await put(first, "a", 1)
    kept = (await ok(first, build.create_snapshot(V, B, "kept"))).create_snapshot.snapshot_info
    await put(first, "a", 2)
    cut = (await ok(first, build.create_snapshot(V, B, "cut"))).create_snapshot.snapshot_info
    position = first.state_machine.applied_index
    cut_path = first.om_snapshot_checkpoints.checkpoint_path(cut.snapshot_id)
    assert cut_path is not None
    digests = checkpoint_digests(cut_path)
    await first.close()
    # as if killed after the create's batch applied but before its checkpoint was whole
    shutil.rmtree(cut_path.parent)
    cut_path.parent.mkdir()
    (cut_path.parent / "checkpoint.tmp").mkdir()

    second = open_node(tmp_path)
    await second.start()
    try:
        assert second.om_snapshot_checkpoints.position(cut.snapshot_id) == position
        retaken = second.om_snapshot_checkpoints.checkpoint_path(cut.snapshot_id)
        assert retaken is not None
        assert checkpoint_digests(retaken) == digests
        assert (await lookup(second, "kept", "a")).lookup_key.key_info.data_size == 1
        assert (await lookup(second, "cut", "a")).lookup_key.key_info.data_size == 2
        info = (await ok(second, build.get_snapshot_info(V, B, "kept"))).get_snapshot_info
        assert info.snapshot_info.snapshot_id == kept.snapshot_id
        assert 0 < info.snapshot_info.log_position < position
    finally:
        await second.close()


async def test_a_snapshot_this_node_lacks_is_refused_clearly(node: Node,
                                                             tmp_path: Path) -> None:
    await put(node, "a", 1)
    taken = (await ok(node, build.create_snapshot(V, B, "lost"))).create_snapshot.snapshot_info
    carried_none = tmp_path / "carried-none"
    carried_none.mkdir()
    node.om_snapshot_checkpoints.installing()        # as a Raft snapshot install does
    node.om_snapshot_checkpoints.installed(carried_none)   # nothing to mark: it is whole
    assert node.om_snapshot_checkpoints.checkpoint_path(taken.snapshot_id) is not None
    path = node.om_snapshot_checkpoints.checkpoint_path(taken.snapshot_id)
    assert path is not None
    node.om_snapshot_checkpoints.close()
    shutil.rmtree(path.parent)     # an install of a snapshot that carried none of it
    node.om_snapshot_checkpoints.installed(carried_none)
    refused = await lookup(node, "lost", "a")
    assert status(refused) == "INVALID_SNAPSHOT_ERROR"
    info = (await ok(node, build.get_snapshot_info(V, B, "lost"))).get_snapshot_info
    assert not info.snapshot_info.checkpoint_here


async def test_a_raft_snapshot_carries_the_checkpoints_and_an_install_adopts_them(
        node: Node, tmp_path: Path) -> None:
    """A follower catching up by a Raft snapshot receives the OM snapshots taken before
    it: the snapshot carries hard links of each whole checkpoint, and the install moves
    each one this node lacks into place, at the position it holds everywhere."""
    await put(node, "a", 1)
    taken = (await ok(node, build.create_snapshot(V, B, "carried"))).create_snapshot.snapshot_info
    checkpoints = node.om_snapshot_checkpoints
    position = checkpoints.position(taken.snapshot_id)
    path = checkpoints.checkpoint_path(taken.snapshot_id)
    assert path is not None
    digests = checkpoint_digests(path)
    carried = tmp_path / "carried"
    checkpoints.link_into(carried)
    assert sorted(p.name for p in carried.iterdir()) == [f"{taken.snapshot_id:020d}"]
    assert not list(carried.rglob("LOG*")), "RocksDB's info logs are not carried"
    checkpoints.close()
    shutil.rmtree(path.parent)                    # this node never had it
    checkpoints.installing()
    checkpoints.installed(carried)
    adopted = checkpoints.checkpoint_path(taken.snapshot_id)
    assert adopted is not None
    assert checkpoints.position(taken.snapshot_id) == position
    assert checkpoint_digests(adopted) == digests
    await put(node, "a", 2)
    assert (await lookup(node, "carried", "a")).lookup_key.key_info.data_size == 1


async def test_a_file_system_bucket_is_read_through_its_snapshot(node: Node) -> None:
    await ok(node, build.create_bucket(V, "fso", layout="FILE_SYSTEM_OPTIMIZED"))
    opened = (await ok(node, build.create_file(V, "fso", "d/f", 7, recursive=True))).create_file
    await ok(node, build.commit_key(V, "fso", "d/f", opened.client_session_id, 7))
    await ok(node, build.create_snapshot(V, "fso", "fs1"))
    await ok(node, build.delete_key(V, "fso", "d/f"))
    found = await call(node, build.lookup_key(V, "fso", build.snapshot_key("fs1", "d/f")))
    assert status(found) == "OK", found.message
    assert found.lookup_key.key_info.data_size == 7
    assert status(await call(node, build.lookup_key(V, "fso", "d/f"))) == "KEY_NOT_FOUND"
    prefix = build.snapshot_key("fs1")
    file = (await ok(node, build.lookup_file(V, "fso", prefix + "d/f"))).lookup_file
    assert (file.key_info.key_name, file.key_info.data_size) == (prefix + "d/f", 7)
    status_of = (await ok(node, build.get_file_status(V, "fso", "/" + prefix + "d")))
    assert (status_of.get_file_status.status.path, status_of.get_file_status.status.is_directory
            ) == (prefix + "d", True)
    listed = (await ok(node, build.list_status(V, "fso", prefix, recursive=True))).list_status
    assert [s.path for s in listed.statuses] == [prefix + "d", prefix + "d/f"]
    page = (await ok(node, build.list_status(V, "fso", prefix, recursive=True,
                                             start_key=prefix + "d"))).list_status
    assert [s.path for s in page.statuses] == [prefix + "d/f"]
    assert status(await call(node, build.lookup_file(V, "fso", "d/f"))) == "FILE_NOT_FOUND"
    assert status(await call(node, build.lookup_file(V, "fso", ".snapshot/nope/d/f"))
                  ) == "FILE_NOT_FOUND"
    await ok(node, build.create_directory(V, "fso", "d/e"))
    moved = await call(node, build.rename_key(V, "fso", "d", "m"))
    assert status(moved) == "OK", moved.message
    diff = (await ok(node, build.snapshot_diff(V, "fso", "fs1"))).snapshot_diff
    assert [(e.type, e.key, e.to_key) for e in diff.entries] == [
        (Diff.RENAME, "d/", "m/"), (Diff.DELETE, "d/f", ""), (Diff.CREATE, "m/e/", "")]


async def test_a_checkpoint_freed_under_a_read_answers_clearly(node: Node) -> None:
    await put(node, "a", 1)
    taken = (await ok(node, build.create_snapshot(V, B, "brief"))).create_snapshot.snapshot_info
    view = node.om_snapshot_checkpoints.open(taken.snapshot_id)
    assert view is not None
    assert view.get(om_pb2.KEY, b"/vol/bkt/a") is not None
    await ok(node, build.delete_snapshot(V, B, "brief"))     # frees it, closing the store
    with pytest.raises(OMError) as refused:
        view.get(om_pb2.KEY, b"/vol/bkt/a")
    assert refused.value.status == om_pb2.INVALID_SNAPSHOT_ERROR


def key(name: str, object_id: int, size: int = 1, mtime: int = 1) -> om_pb2.KeyInfo:
    return om_pb2.KeyInfo(key_name=name, object_id=object_id, data_size=size,
                          modification_time=mtime)


def entries(before: list[om_pb2.KeyInfo], after: list[om_pb2.KeyInfo]) -> list[tuple[int, str,
                                                                                     str]]:
    found = snapshots.diff_entries({k.key_name: k for k in before},
                                   {k.key_name: k for k in after})
    return [(e.type, e.key, e.to_key) for e in found]


def test_diff_of_a_rename_then_a_new_key_at_the_old_name() -> None:
    assert entries([key("a", 1)], [key("b", 1), key("a", 2)]) == [
        (Diff.CREATE, "a", ""), (Diff.RENAME, "a", "b")]   # by name, then type


def test_diff_of_a_rename_whose_size_changed_too() -> None:
    assert entries([key("a", 1, size=1)], [key("b", 1, size=9)]) == [
        (Diff.RENAME, "a", "b"), (Diff.MODIFY, "b", "")]


def test_diff_of_two_names_swapped() -> None:
    assert entries([key("a", 1), key("b", 2)], [key("a", 2), key("b", 1)]) == [
        (Diff.MODIFY, "a", ""), (Diff.MODIFY, "b", "")]


def test_diff_of_identical_sides_is_empty_and_a_touch_is_a_modification() -> None:
    assert entries([key("a", 1)], [key("a", 1)]) == []
    assert entries([key("a", 1, mtime=1)], [key("a", 1, mtime=2)]) == [(Diff.MODIFY, "a", "")]


async def test_a_checkpoint_lost_after_the_store_moved_on_is_not_retaken(tmp_path: Path) -> None:
    """A checkpoint directory gone (removed by hand) once later entries applied: the store
    is past the create, so a checkpoint now would hold the wrong position; the node marks
    the snapshot absent instead."""
    first = open_node(tmp_path)
    await first.start()
    await ok(first, build.create_volume(V))
    await ok(first, build.create_bucket(V, B))
    await put(first, "a", 1)
    taken = (await ok(first, build.create_snapshot(V, B, "snap"))).create_snapshot.snapshot_info
    await put(first, "a", 2)                        # the store moves past the create
    path = first.om_snapshot_checkpoints.checkpoint_path(taken.snapshot_id)
    assert path is not None
    await first.close()
    shutil.rmtree(path.parent)

    second = open_node(tmp_path)
    await second.start()
    try:
        assert second.om_snapshot_checkpoints.checkpoint_path(taken.snapshot_id) is None
        assert status(await lookup(second, "snap", "a")) == "INVALID_SNAPSHOT_ERROR"
    finally:
        await second.close()


async def test_a_checkpoint_lost_while_running_is_not_retaken_by_the_next_create(
        node: Node) -> None:
    await put(node, "a", 1)
    lost = (await ok(node, build.create_snapshot(V, B, "lost"))).create_snapshot.snapshot_info
    path = node.om_snapshot_checkpoints.checkpoint_path(lost.snapshot_id)
    assert path is not None
    shutil.rmtree(path.parent)                       # removed by hand
    await put(node, "a", 2)
    await ok(node, build.create_snapshot(V, B, "next"))
    assert node.om_snapshot_checkpoints.checkpoint_path(lost.snapshot_id) is None
    assert status(await lookup(node, "lost", "a")) == "INVALID_SNAPSHOT_ERROR"
    assert (await lookup(node, "next", "a")).lookup_key.key_info.data_size == 2


@pytest.mark.parametrize("setting", ["per_bucket_max = 0", "open_max = 0",
                                     "headroom_fraction_min = 1.0", "headroom_bytes_min = -1"])
def test_snapshot_settings_out_of_range_are_refused(tmp_path: Path, setting: str) -> None:
    path = tmp_path / "om.toml"
    path.write_text(f"[snapshot]\n{setting}\n")
    with pytest.raises(om_config.ConfigError, match=r"\[snapshot\]"):
        om_config.load(path, data_dir=tmp_path / "data")
