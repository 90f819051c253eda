"""The sans-IO lock table and the lock plans."""

from __future__ import annotations

import sys
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from om.client import requests as build
from om.gatekeeper.lock_plan import Level, LockRequest, Mode, plan_locks
from om.gatekeeper.lock_table import LockTable

VOLUME = (Level.VOLUME, "v")


def test_readers_share_writers_exclude_and_fifo_holds() -> None:
    table: LockTable[str] = LockTable()
    assert table.acquire_nowait("r1", VOLUME, Mode.READ)
    assert table.acquire_nowait("r2", VOLUME, Mode.READ)
    assert not table.acquire_nowait("w", VOLUME, Mode.WRITE)
    assert not table.acquire_nowait("r3", VOLUME, Mode.READ), "a reader queues behind a writer"
    assert table.release("r1", VOLUME) == []
    assert table.release("r2", VOLUME) == ["w"]
    assert table.release("w", VOLUME) == ["r3"]
    assert table.release("r3", VOLUME) == []
    assert table.statistics().resources == 0


def test_cancel_of_a_waiter_wakes_those_behind_it() -> None:
    table: LockTable[str] = LockTable()
    assert table.acquire_nowait("r1", VOLUME, Mode.READ)
    assert not table.acquire_nowait("w", VOLUME, Mode.WRITE)
    assert not table.acquire_nowait("r2", VOLUME, Mode.READ)
    assert table.cancel("w", VOLUME) == ["r2"]
    assert table.cancel("r1", VOLUME) == []
    assert table.cancel("r2", VOLUME) == []
    assert table.statistics().resources == 0


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["acquire", "release", "cancel"]),
                          st.booleans()), max_size=60))
def test_table_never_grants_conflicting_locks(script: list[tuple[int, str, bool]]) -> None:
    table: LockTable[int] = LockTable()
    holding: dict[int, Mode] = {}
    waiting: dict[int, Mode] = {}
    for owner, action, write in script:
        mode = Mode.WRITE if write else Mode.READ
        granted: list[int] = []
        if action == "acquire" and owner not in holding and owner not in waiting:
            if table.acquire_nowait(owner, VOLUME, mode):
                holding[owner] = mode
            else:
                waiting[owner] = mode
        elif action == "release" and owner in holding:
            del holding[owner]
            granted = table.release(owner, VOLUME)
        elif action == "cancel" and (owner in holding or owner in waiting):
            holding.pop(owner, None)
            waiting.pop(owner, None)
            granted = table.cancel(owner, VOLUME)
        for g in granted:
            holding[g] = waiting.pop(g)
        writers = [o for o, m in holding.items() if m is Mode.WRITE]
        assert len(writers) <= 1
        assert not writers or len(holding) == 1, "a writer holds alone"
        assert not (waiting and not holding), "nobody waits on a free lock"
        assert table.statistics().holders == len(holding)


def test_plans_follow_the_global_order() -> None:
    rename = plan_locks(build.rename_key("v", "b", "zeta", "alpha"))
    assert rename == (LockRequest(Level.BUCKET, "v/b", Mode.READ),
                      LockRequest(Level.KEY, "v/b/alpha", Mode.WRITE),
                      LockRequest(Level.KEY, "v/b/zeta", Mode.WRITE))
    assert plan_locks(build.create_key("v", "b", "k")) == (
        LockRequest(Level.BUCKET, "v/b", Mode.READ),)
    assert plan_locks(build.create_bucket("v", "b")) == (
        LockRequest(Level.VOLUME, "v", Mode.READ), LockRequest(Level.BUCKET, "v/b", Mode.WRITE))
    assert plan_locks(build.create_bucket("v", "b", quota_in_bytes=10))[0].mode is Mode.WRITE
    assert plan_locks(build.lookup_key("v", "b", "k")) == ()


def test_statistics_read_from_another_thread_while_locks_come_and_go() -> None:
    """The metrics endpoint's thread reads the table while the loop changes it (a soak's
    scrape raised "dictionary changed size during iteration"). Bounded: 20,000 changes."""

    table: LockTable[str] = LockTable()
    errors: list[BaseException] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            try:
                table.statistics()
            except RuntimeError as error:   # what the live dict's walk raised
                errors.append(error)
                return

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)      # switch threads as often as the interpreter allows
    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for n in range(20_000):   # 150 locks held at a time, one taken and one freed a step
            assert table.acquire_nowait(f"o{n}", (Level.KEY, f"k{n}"), Mode.WRITE)
            if n >= 150:
                table.release(f"o{n - 150}", (Level.KEY, f"k{n - 150}"))
    finally:
        done.set()
        scraper.join(timeout=10)
        sys.setswitchinterval(interval)
    assert not errors, errors
