"""StateMachine.apply: idempotent by position, atomic across tables and across an entry's
slices, even under kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store
from tests import apply_crash_worker as worker


def _bucket(store: Store) -> om_pb2.BucketInfo:
    raw = store.get(om_pb2.BUCKET, tables.bucket_key("v", "b"))
    assert raw is not None
    return om_pb2.BucketInfo.FromString(raw)


def test_applying_a_batch_twice_changes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    worker.seed(store)
    machine = StateMachine(store)
    assert machine.apply(1, worker.batch_for(1)).applied
    after_first = store.digests()
    result = machine.apply(1, worker.batch_for(1))
    assert not result.applied
    assert store.digests() == after_first
    assert _bucket(store).used_bytes == 1
    store.close()


def test_replay_after_restart_skips_applied_positions(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    worker.seed(store)
    machine = StateMachine(store)
    for position in (1, 2, 3):
        machine.apply(position, worker.batch_for(position))
    store.close()
    store = Store(tmp_path / "db")
    machine = StateMachine(store)
    assert machine.applied_index == 3
    assert machine.managed_index == 3
    before = store.digests()
    assert [machine.apply(p, worker.batch_for(p)).applied for p in (1, 2, 3)] == [False] * 3
    assert store.digests() == before
    assert _bucket(store).used_namespace == 3
    store.close()


def test_quota_delta_skips_a_recreated_bucket(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    worker.seed(store)
    machine = StateMachine(store)
    batch = worker.batch_for(1)
    batch.quota_deltas[0].object_id = worker.BUCKET_OBJECT_ID + 1
    machine.apply(1, batch)
    assert _bucket(store).used_bytes == 0
    store.close()


@pytest.mark.parametrize("merged", [False, True], ids=["batches", "merged-entries"])
def test_kill_minus_nine_leaves_whole_entries_only(tmp_path: Path, merged: bool) -> None:
    """Entries of one batch, or merged entries of SLICES batches: after kill -9 the
    store holds whole entries, all of each one's slices or none."""
    path = tmp_path / "db"
    slices = worker.SLICES if merged else 1
    command = [sys.executable, "-m", "tests.apply_crash_worker", str(path)]
    for attempt in range(3):
        with subprocess.Popen(command + (["merged"] if merged else []),
                              stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent) as process:
            try:
                assert process.stdout is not None
                assert process.stdout.readline().strip() == b"ready"
                time.sleep(0.3 + 0.2 * attempt)
            finally:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

        store = Store(path)
        applied = store.transaction_info().applied_index
        assert applied > 0, "the worker applied nothing before the kill"
        keys = store.count(om_pb2.KEY)
        assert keys == applied * slices * worker.ROWS, "an entry landed partially"
        bucket = _bucket(store)
        assert bucket.used_bytes == applied * slices
        assert bucket.used_namespace == applied * slices
        assert store.count(om_pb2.CLIENT_REQUEST_REPLY) == applied * slices
        assert store.get(om_pb2.KEY, f"/v/b/p{applied + 1}-0".encode()) is None
        store.close()


def test_a_stale_terms_batch_is_skipped_on_every_replica(tmp_path: Path) -> None:
    digests = []
    for name in ("a", "b"):
        store = Store(tmp_path / name)
        worker.seed(store)
        machine = StateMachine(store)
        newer = worker.batch_for(1)
        newer.term = 6
        older = worker.batch_for(2)
        older.term = 5
        assert machine.apply(1, newer).applied
        assert not machine.apply(2, older).applied, "a deposed leader's batch"
        assert machine.applied_index == 2, "the position still advances"
        assert store.get(om_pb2.KEY, b"/v/b/p2-0") is None
        digests.append(store.digests())
        store.close()
    assert digests[0] == digests[1]
