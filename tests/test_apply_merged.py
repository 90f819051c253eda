"""Apply of a merged entry ("M", docs/SHARDS.md step 1): every slice in one write batch
at the entry's one position, on both state machines.

* The slices apply as the one batch their concatenation is: quota deltas of several
  slices on one bucket add up (read once, not once per slice).
* A slice without writes (a read round's) moves nothing but the position.
* A replay of the position is skipped whole, also after a restart.
* A slice of a deposed leader's term is skipped and the others apply; the result
  says which, slice by slice.
* The old flow's machine (switchable flows) ends in the same rows.
* A log that turns from B to M where MERGED_ENTRIES is finalized applies to the rows
  an all-B log gives, on both machines, and each keeps the layout the log wrote.
* A shard's store (docs/SHARDS.md step 2) applies its part of an entry and refuses
  another shard's slice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from om.executor.admin import upgrade
from om.flows.settings import LeaderConfig
from om.node.parts import init_layout
from om.protocol import merged_entry, om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store
from tests import apply_crash_worker as worker


def _merged(*batches: om_pb2.PersistDbBatch) -> bytes:
    return merged_entry.merge([
        log_entry.encode_sealed(b.SerializeToString(deterministic=True), merged=True)
        for b in batches])


def _machine(path: Path) -> StateMachine:
    store = Store(path)
    worker.seed(store)
    return StateMachine(store)


def _bucket(store: Store) -> om_pb2.BucketInfo:
    raw = store.get(om_pb2.BUCKET, b"/v/b")
    assert raw is not None
    return om_pb2.BucketInfo.FromString(raw)


def _fail() -> None:
    raise AssertionError("fail-stop in a test")


def test_a_merged_entry_applies_as_the_one_batch_its_slices_concatenate_to(
        tmp_path: Path) -> None:
    slices = worker.slices_for(1)
    merged = _machine(tmp_path / "merged")
    result = merged.apply_entry(1, _merged(*slices))
    assert (result.applied, result.batches_applied) == (True, (True,) * worker.SLICES)
    concatenated = _machine(tmp_path / "concatenated")
    one = om_pb2.PersistDbBatch.FromString(b"".join(s.SerializeToString() for s in slices))
    assert concatenated.apply(1, one).applied
    assert merged.store.digests() == concatenated.store.digests()
    assert _bucket(merged.store).used_bytes == worker.SLICES, "every slice's charge counts"
    assert merged.store.count(om_pb2.KEY) == worker.SLICES * worker.ROWS
    assert merged.store.transaction_info().applied_index == 1, "one position for all"
    merged.store.close()
    concatenated.store.close()


def test_a_slice_without_writes_moves_only_the_position(tmp_path: Path) -> None:
    machine = _machine(tmp_path / "db")
    before = machine.store.count(om_pb2.KEY)
    read_round = om_pb2.PersistDbBatch(batch_id=9, term=1, timestamp_ms=1, leader_id="om1")
    result = machine.apply_entry(1, _merged(read_round))
    assert result.applied
    assert result.batches_applied == (True,)
    assert machine.store.count(om_pb2.KEY) == before
    assert machine.applied_index == 1
    batch = worker.batch_for(2)
    batch.term = 1
    assert machine.apply_entry(2, _merged(read_round, batch, read_round)).applied
    assert machine.store.count(om_pb2.KEY) == before + worker.ROWS
    assert _bucket(machine.store).used_bytes == 1
    machine.store.close()


def test_a_replayed_merged_entry_is_skipped_whole(tmp_path: Path) -> None:
    machine = _machine(tmp_path / "db")
    entries = {p: worker.merged_for(p) for p in (1, 2)}
    for position, entry in entries.items():
        assert machine.apply_entry(position, entry).applied
    after = machine.store.digests()
    again = machine.apply_entry(2, entries[2])
    assert (again.applied, again.batches_applied) == (False, ())
    assert machine.store.digests() == after
    machine.store.close()
    reopened = StateMachine(Store(tmp_path / "db"))    # a restart replays its journal
    assert [reopened.apply_entry(p, e).applied for p, e in entries.items()] == [False] * 2
    assert reopened.store.digests() == after
    assert _bucket(reopened.store).used_namespace == 2 * worker.SLICES
    reopened.store.close()


def test_a_stale_slice_is_skipped_and_the_others_apply(tmp_path: Path) -> None:
    machine = _machine(tmp_path / "db")
    newer = worker.batch_for(1)
    newer.term = 6
    assert machine.apply(1, newer).applied
    deposed, current = worker.slices_for(2)[:2]
    deposed.term, current.term = 5, 6
    result = machine.apply_entry(2, _merged(deposed, current))
    assert result.batches_applied == (False, True)
    assert not result.applied, "not every slice applied"
    assert machine.store.get(om_pb2.KEY, b"/v/b/p2-0") is None, "the deposed leader's"
    assert machine.store.get(om_pb2.KEY, b"/v/b/p2-s1-0") is not None
    assert _bucket(machine.store).used_bytes == 2
    assert machine.applied_index == 2
    machine.store.close()


def test_the_old_flows_machine_applies_merged_entries_to_the_same_rows(
        tmp_path: Path) -> None:
    leader = _machine(tmp_path / "leader")
    store = Store(tmp_path / "old")
    worker.seed(store)
    old = ReplicatedStateMachine(store, LeaderConfig().limits,
                                 MemoryRetryCache(600_000, 1000), 2, _fail)
    for position in (1, 2, 3):
        entry = worker.merged_for(position)
        assert leader.apply_entry(position, entry).batches_applied == (True,) * worker.SLICES
        assert old.apply_entry(position, entry).batches_applied == (True,) * worker.SLICES
    old.close()
    assert _bucket(store).used_bytes == 3 * worker.SLICES
    rows, leaders = store.digests(), leader.store.digests()
    for table in (om_pb2.KEY, om_pb2.BUCKET, om_pb2.CLIENT_REQUEST_REPLY,
                  om_pb2.CLIENT_REQUEST_EXPIRY, om_pb2.TRANSACTION_INFO):
        name = tables.TABLE_NAMES[table]
        assert rows[name] == leaders[name], name
    assert store.transaction_info().applied_index == 3
    store.close()
    leader.store.close()


def _finalize_batch(position: int) -> om_pb2.PersistDbBatch:
    """What a FinalizeUpgrade seals: the layout row at the software's version."""
    batch = om_pb2.PersistDbBatch(batch_id=position, timestamp_ms=1000 + position,
                                  managed_index=position, request_count=1)
    batch.ops.add(table=om_pb2.TRANSACTION_INFO, key=tables.LAYOUT_VERSION_KEY,
                  value=upgrade.layout_row(upgrade.SOFTWARE_LAYOUT_VERSION))
    return batch


def _upgrade_log(merged_after_finalize: bool) -> list[bytes]:
    """Positions 1-5: two batches, the FinalizeUpgrade (3, still B: sealed before it
    applied), two more batches, those as M when ``merged_after_finalize``."""
    batches = [worker.batch_for(1), worker.batch_for(2), _finalize_batch(3),
               worker.batch_for(4), worker.batch_for(5)]
    return [log_entry.encode_sealed(b.SerializeToString(deterministic=True),
                                    merged=merged_after_finalize and position > 3)
            for position, b in enumerate(batches, start=1)]


def _store_before_merged_entries(path: Path) -> Store:
    store = Store(path)
    init_layout(store, upgrade.MERGED_ENTRIES.version - 1)
    worker.seed(store)
    return store


def test_a_log_turning_from_b_to_m_at_finalize_applies_as_an_all_b_log(
        tmp_path: Path) -> None:
    mixed = _upgrade_log(merged_after_finalize=True)
    assert [e[:1] for e in mixed] == [b"B", b"B", b"B", b"M", b"M"]
    machines = {"all-B": StateMachine(_store_before_merged_entries(tmp_path / "b")),
                "mixed": StateMachine(_store_before_merged_entries(tmp_path / "mixed"))}
    old = ReplicatedStateMachine(_store_before_merged_entries(tmp_path / "old"),
                                 LeaderConfig().limits, MemoryRetryCache(600_000, 1000), 2,
                                 _fail)
    logs = {"all-B": _upgrade_log(merged_after_finalize=False), "mixed": mixed}
    for position in range(1, 6):
        layout = upgrade.MERGED_ENTRIES.version - (position <= 3)   # before it applies
        assert old.layout_version == layout
        assert old.apply_entry(position, mixed[position - 1]).applied
        for name, machine in machines.items():
            assert machine.layout_version == layout, name
            assert machine.apply_entry(position, logs[name][position - 1]).applied
    old.close()
    assert machines["all-B"].store.digests() == machines["mixed"].store.digests()
    assert _bucket(machines["mixed"].store).used_bytes == 4
    rows, leaders = old.store.digests(), machines["mixed"].store.digests()
    for table in (om_pb2.KEY, om_pb2.BUCKET, om_pb2.CLIENT_REQUEST_REPLY,
                  om_pb2.CLIENT_REQUEST_EXPIRY, om_pb2.TRANSACTION_INFO):
        assert rows[tables.TABLE_NAMES[table]] == leaders[tables.TABLE_NAMES[table]], table
    old.store.close()
    for machine in machines.values():
        machine.store.close()
    reopened = StateMachine(Store(tmp_path / "mixed"))   # a restart reads the layout row
    assert reopened.layout_version == upgrade.MERGED_ENTRIES.version
    reopened.store.close()


def test_a_shards_store_applies_its_own_part_and_no_other_shards_slice(
        tmp_path: Path) -> None:
    shard_one = [merged_entry.encode_slice(1, s.SerializeToString(deterministic=True))
                 for s in worker.slices_for(1)]
    entry = merged_entry.merge([*shard_one, log_entry.encode_sealed(b"", merged=True)])
    parts = merged_entry.split_by_shard(entry, 2)
    store = Store(tmp_path / "shard-1")
    worker.seed(store)
    machine = StateMachine(store, shard=1)
    result = machine.apply_entry(1, parts[1])
    assert (result.applied, result.batches_applied) == (True, (True,) * worker.SLICES)
    assert store.count(om_pb2.KEY) == worker.SLICES * worker.ROWS
    with pytest.raises(AssertionError, match="not shard 1's"):
        machine.apply_entry(2, parts[0])
    assert machine.applied_index == 1
    store.close()
