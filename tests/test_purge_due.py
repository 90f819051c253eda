"""The purger reads a table only when a row there can be due, and its gauges read no store.

A pass over deletedTable (open keys and files, multipart uploads) that finds nothing
due rests the table until the cutoff reaches the earliest time a row there can carry
(``om.flows.purge_scan``); a new ready term forgets that. The clock is the service's,
moved by the test, so rows are stamped with it and the cutoff is computed from it.
``Purger.rows_scanned`` counts every row a scan returned. The gauges are read on the
scrape thread while the store may be closing: they read counters the loop keeps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.fso.fs import FSO
from om.flows.purge import PurgeConfig, Purger
from om.protocol import om_pb2
from tests.leader_harness import LeaderUnderTest, config

V, OBS_B, FS_B = "vol", "obs", "fsb"
AGE_S = 100   # the retention or expiry under test
AGE_MS = AGE_S * 1000


class Clock:
    """The service's clock, moved by the test."""

    def __init__(self) -> None:
        self.now_ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Timed:
    leader: LeaderUnderTest
    clock: Clock

    @property
    def purger(self) -> Purger:
        return self.leader.service.flow.purger


@pytest.fixture
async def timed(tmp_path: Path) -> AsyncIterator[Timed]:
    clock = Clock()
    leader = LeaderUnderTest(tmp_path / "db", config(), clock)
    await leader.start()
    await leader.ok(build.create_volume(V))
    await leader.ok(build.create_bucket(V, OBS_B))
    await leader.ok(build.create_bucket(V, FS_B, layout=FSO))
    yield Timed(leader, clock)
    await leader.close()


async def _delete(leader: LeaderUnderTest, *names: str) -> None:
    for name in names:
        opened = (await leader.ok(build.create_key(V, OBS_B, name, 10))).create_key
        await leader.ok(build.commit_key(V, OBS_B, name, opened.client_session_id, 10))
        await leader.ok(build.delete_key(V, OBS_B, name))


async def _calls(step: Callable[[], Awaitable[int]], n: int) -> list[int]:
    return [await step() for _ in range(n)]


async def test_deleted_rows_none_due_are_read_once_then_rest_until_the_earliest_is_due(
        timed: Timed) -> None:
    leader, clock, purger = timed.leader, timed.clock, timed.purger
    purger.config = PurgeConfig(rows_max=2, deleted_retention_s=AGE_S)   # pages of 8 rows
    await _delete(leader, *(f"k{i}" for i in range(10)))
    assert await _calls(purger.purge_deleted_keys, 2) == [0, 0]
    assert purger.rows_scanned == 10, "one pass: a page of 8 rows, then the last 2"
    clock.now_ms += AGE_MS // 2
    await _delete(leader, "late")    # stamped half a retention later
    assert await _calls(purger.purge_deleted_keys, 5) == [0] * 5
    assert purger.rows_scanned == 10, "no row can be due before the first ten's time"
    clock.now_ms += AGE_MS // 2      # the first ten are due, the late one is not
    removed = await _calls(purger.purge_deleted_keys, 12)
    assert (max(removed), sum(removed)) == (2, 10), "rows_max a step"
    assert [k for k, _ in leader.store.scan(om_pb2.DELETED, b"", None, 10)] == [
        k for k, _ in leader.store.scan(om_pb2.DELETED, b"/vol/obs/late/", None, 10)]
    scanned = purger.rows_scanned
    assert await _calls(purger.purge_deleted_keys, 3) == [0] * 3
    assert purger.rows_scanned == scanned, "the late row rests the table until its time"
    clock.now_ms += AGE_MS // 2
    assert await purger.purge_deleted_keys() == 1, "the late row, when its time comes"
    assert leader.store.count(om_pb2.DELETED) == 0
    await _delete(leader, "a", "b", "c")
    await _calls(purger.purge_deleted_keys, 3)
    scanned = purger.rows_scanned
    assert await _calls(purger.purge_deleted_keys, 3) == [0] * 3
    assert purger.rows_scanned == scanned, "three young rows: one pass, then rest"
    leader.replicator.term = 2       # this node is the ready leader of a new term
    assert await _calls(purger.purge_deleted_keys, 3) == [0] * 3
    assert purger.rows_scanned == scanned + 3, "a new term passes once, then rests"


async def _open_rows(leader: LeaderUnderTest) -> int:
    for i in range(3):
        await leader.ok(build.create_key(V, OBS_B, f"open{i}", 10))
    await leader.ok(build.create_file(V, FS_B, "d/open", 10, recursive=True))
    return 4


async def _uploads(leader: LeaderUnderTest) -> int:
    for i in range(3):
        await leader.ok(build.initiate_multipart_upload(V, OBS_B, f"mpu{i}"))
    return 3


def _open_left(leader: LeaderUnderTest) -> int:
    return leader.store.count(om_pb2.OPEN_KEY) + leader.store.count(om_pb2.OPEN_FILE)


def _uploads_left(leader: LeaderUnderTest) -> int:
    return leader.store.count(om_pb2.MULTIPART_INFO)


@pytest.mark.parametrize(("write", "step", "age", "left"), [
    (_open_rows, "expire_open_keys", "open_key_expire_s", _open_left),
    (_uploads, "expire_multipart_uploads", "multipart_expire_s", _uploads_left),
])
async def test_open_rows_and_uploads_none_due_rest_until_their_expiry(
        timed: Timed, write: Callable[[LeaderUnderTest], Awaitable[int]], step: str,
        age: str, left: Callable[[LeaderUnderTest], int]) -> None:
    leader, clock, purger = timed.leader, timed.clock, timed.purger
    purger.config = PurgeConfig(rows_max=10, **{age: AGE_S})
    written = await write(leader)
    purge: Callable[[], Awaitable[int]] = getattr(purger, step)
    assert await _calls(purge, 4) == [0] * 4
    assert purger.rows_scanned == written, "one pass, then no read"
    clock.now_ms += AGE_MS - 1
    assert await purge() == 0
    assert purger.rows_scanned == written, "a millisecond early: still no read"
    clock.now_ms += 1
    assert await purge() == written
    assert left(leader) == 0


async def test_the_gauges_read_no_store_from_another_thread(tmp_path: Path) -> None:
    """The scrape thread called ``gauges()`` while the node closed its store: the old
    gauge scanned deletedDirectoryTable there and failed the store's closed assert."""
    leader = LeaderUnderTest(tmp_path / "db", config())
    await leader.start()
    await leader.ok(build.create_volume(V))
    await leader.ok(build.create_bucket(V, FS_B, layout=FSO))
    for name in ("t1", "t2"):
        await leader.ok(build.create_directory(V, FS_B, f"{name}/sub"))
        await leader.ok(build.delete_key(V, FS_B, name, recursive=True))
    assert leader.service.flow.purger.count_pending() is not None   # the loop's count
    await leader.close()
    gauges = await asyncio.to_thread(leader.service.gauges)
    assert gauges["purge_pending_directories"] == 2


async def test_the_loop_keeps_the_pending_gauge(tmp_path: Path) -> None:
    """The purger's own loop counts what waits and purges it; the gauge follows."""
    leader = LeaderUnderTest(tmp_path / "db", config(purge=PurgeConfig(interval_s=0.01)))
    await leader.start()
    try:
        await leader.ok(build.create_volume(V))
        await leader.ok(build.create_bucket(V, FS_B, layout=FSO))
        await leader.ok(build.create_directory(V, FS_B, "t/sub"))
        await leader.ok(build.delete_key(V, FS_B, "t", recursive=True))
        purger = leader.service.flow.purger
        for _ in range(500):
            if purger.steps and purger.pending_directories == 0:
                break
            await asyncio.sleep(0.01)
        assert (purger.steps, purger.pending_directories) == (2, 0), \
            "the tombstone's step, then its subdirectory's; then none waits"
        assert leader.store.count(om_pb2.DELETED_DIRECTORY) == 0
    finally:
        await leader.close()


async def test_a_row_written_after_an_empty_pass_is_purged_when_its_time_comes(
        timed: Timed) -> None:
    """An empty pass rests the table only until the cutoff reaches the pass's start:
    every row written since carries a later time."""
    leader, clock, purger = timed.leader, timed.clock, timed.purger
    purger.config = PurgeConfig(deleted_retention_s=AGE_S)
    assert await purger.purge_deleted_keys() == 0
    clock.now_ms += AGE_MS // 2
    await _delete(leader, "later")
    clock.now_ms += AGE_MS // 2
    assert await purger.purge_deleted_keys() == 0, "half a retention old"
    assert purger.rows_scanned == 1, "the rest ended as the cutoff reached the pass's start"
    clock.now_ms += AGE_MS // 2
    assert await purger.purge_deleted_keys() == 1
