"""Apply of a merged entry ("M", docs/SHARDS.md step 1): every slice in one write batch
at the entry's one position, on both state machines.

* The slices apply as the one batch their concatenation is: quota deltas of several
  slices on one bucket add up (read once, not once per slice).
* A slice without writes (a read round's) moves nothing but the position.
* A replay of the position is skipped whole, also after a restart.
* A slice of a deposed leader's term is skipped and the others apply; the result
  says which, slice by slice.
* The old flow's machine (switchable flows) ends in the same rows.
"""

from __future__ import annotations

from pathlib import Path

from om.flows.settings import LeaderConfig
from om.protocol import merged_entry, om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store
from tests import apply_crash_worker as worker


def _merged(*batches: om_pb2.PersistDbBatch) -> bytes:
    return merged_entry.merge([log_entry.encode_sealed(b.SerializeToString(deterministic=True))
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
