"""The purger's gauges read no store: the scrape thread reads them while the store may
be closing, so they are counters the event loop keeps.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from om.client import requests as build
from om.executor.fso.fs import FSO
from om.flows.purge import PurgeConfig
from om.protocol import om_pb2
from tests.leader_harness import LeaderUnderTest, config

V, FS_B = "vol", "fsb"


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
