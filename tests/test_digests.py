"""Digests kept by apply equal a full recomputation, whatever happened (hypothesis).

After any sequence of puts, overwrites, deletes, quota deltas, retry-cache rows,
batches (a row changed twice in one), crashes (a batch cut before its write; the
process gone and the store reopened) and, for a store written before digests, the
background build interleaved, every leaf row equals the sum and count of the
digests of the rows that hash to it, and the index lists exactly those rows.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from om.protocol import om_pb2
from om.schema import tables
from om.schema.row_digests import LEAF_VALUE, SUM_MODULUS, RowHasher
from om.schema.tables import TableId
from om.statemachine import digests as digest_rows
from om.statemachine.apply import StateMachine
from om.statemachine.digests import Digests, RowDigest
from om.statemachine.store import Store
from tests.tiers import examples

KEYS = [f"/v/b/k{i}".encode() for i in range(12)]
TABLES = (om_pb2.KEY, om_pb2.OPEN_KEY, om_pb2.DELETED)
# Each example opens, syncs and closes a store (more than once when it restarts): in
# memory where the machine has it, since on a disk another process keeps busy the
# 60 examples took 40 s of waiting for 5 of CPU. A restart here is a process's, never
# the machine's, so no write needs the disk to outlive it.
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None


def recomputed(store: Store) -> tuple[dict[tuple[int, int], tuple[int, int]], set[bytes]]:
    """Every non-empty leaf and every index entry, from the rows alone."""
    meta = digest_rows.read_meta(store)
    assert meta is not None
    hasher = RowHasher(meta.key, meta.leaf_bits)
    leaves: dict[tuple[int, int], tuple[int, int]] = {}
    index: set[bytes] = set()
    for table in tables.TABLE_NAMES:
        for key, value in store.iterate(table):
            leaf = hasher.leaf(key)
            total, rows = leaves.get((table, leaf), (0, 0))
            leaves[(table, leaf)] = ((total + hasher.digest(key, value)) % SUM_MODULUS, rows + 1)
            index.add(digest_rows.index_prefix(table, leaf) + key)
    return leaves, index


def maintained(store: Store) -> tuple[dict[tuple[TableId, int], tuple[int, int]],
                                       set[bytes]]:
    """Every leaf row and index entry the store holds."""
    leaves = {(table, leaf): (total, rows) for table in tables.TABLE_NAMES
              for leaf, total, rows in digest_rows.stored_leaves(store, table)}
    index = {key for key, _ in store.iterate(om_pb2.DIGESTS, digest_rows.INDEX_TAG)}
    return leaves, index


def batch_of(position: int, ops: list[tuple[int, int, int | None]]) -> om_pb2.PersistDbBatch:
    batch = om_pb2.PersistDbBatch(term=1, managed_index=position, timestamp_ms=position)
    for table, key, value in ops:
        if value is None:
            batch.ops.add(table=TABLES[table], key=KEYS[key], delete=True)
        else:
            batch.ops.add(table=TABLES[table], key=KEYS[key], value=b"v%d" % value)
    batch.replies.add(client_id="c", call_id=position, timestamp_ms=position, response=b"r")
    if position > 2:   # the sweep of an older reply, and its index row
        batch.retry_expiry.add(table=om_pb2.CLIENT_REQUEST_REPLY,
                               key=tables.reply_key("c", position - 2), delete=True)
        batch.retry_expiry.add(table=om_pb2.CLIENT_REQUEST_EXPIRY,
                               key=tables.expiry_key(position - 2, "c", position - 2),
                               delete=True)
    return batch


op = st.tuples(st.integers(0, 2), st.integers(0, len(KEYS) - 1),
               st.one_of(st.none(), st.integers(0, 3)))
Step = tuple[str, list[tuple[int, int, int | None]]]
step: st.SearchStrategy[Step] = st.one_of(
    st.tuples(st.just("batch"), st.lists(op, min_size=1, max_size=6)),
    st.tuples(st.just("cut"), st.lists(op, min_size=1, max_size=6)),
    st.just(("restart", [])),
    st.just(("build", [])),
)


def _cut(machine: StateMachine, table: int, key: bytes) -> None:
    with machine.digests.changes() as digest:
        digest.put(table, key, b"never")  # type: ignore[arg-type]
        raise RuntimeError("killed before the write")


def _seed_behind(store: Store, count: int) -> None:
    """Rows a release without digests wrote (before anything attached)."""
    write = store.new_batch()
    for i in range(count):
        store.batch_put(write, TABLES[i % 3], KEYS[i], b"old%d" % i)
    store.write(write)


@examples(fast=20, slow=60)
def test_maintained_digests_equal_a_full_recomputation(examples: int) -> None:
    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step, max_size=25), written_before=st.integers(0, 8),
           leaf_bits=st.sampled_from([1, 3, 16]))
    def equal(steps: list[Step], written_before: int, leaf_bits: int) -> None:
        _replay_and_compare(steps, written_before, leaf_bits)

    equal()


def _replay_and_compare(steps: list[Step], written_before: int, leaf_bits: int) -> None:
    """Runs ``steps`` on a new store with digests attached, then compares every leaf
    and index entry with a full recomputation."""
    directory = Path(tempfile.mkdtemp(prefix="om-digests-", dir=SCRATCH))
    try:
        store = Store(directory / "db")
        _seed_behind(store, written_before)
        Digests.attach(store, b"k" * 32, leaf_bits, 4)
        machine = StateMachine(store)
        position = 0
        for kind, ops in steps:
            if kind == "restart":        # the process gone: a new store object, new cache
                store.close()
                store = Store(directory / "db")
                machine = StateMachine(store)
            elif kind == "build":
                with machine.applying():
                    machine.digests.build_step(2)
            elif kind == "cut":          # a crash before the batch's write: nothing of it
                with pytest.raises(RuntimeError):
                    _cut(machine, TABLES[ops[0][0]], KEYS[ops[0][1]])
            else:
                position += 1
                assert machine.apply(position, batch_of(position, ops)).applied
        while not machine.digests.complete:
            machine.digests.build_step(3)
        assert maintained(store) == recomputed(store)
        store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_an_old_row_digest_from_the_writer_replaces_the_lookup(tmp_path: Path) -> None:
    """A writer that read the old row may pass its digest; the result is the same."""
    store = Store(tmp_path / "db")
    digests = Digests.attach(store, b"k" * 32, 8, 4)
    with digests.changes() as digest:
        write = store.new_batch()
        store.batch_put(write, om_pb2.KEY, KEYS[0], b"one")
        digest.put(om_pb2.KEY, KEYS[0], b"one")
        digest.write(write)
    with digests.changes() as digest:
        write = store.new_batch()
        store.batch_put(write, om_pb2.KEY, KEYS[0], b"two")
        digest.put(om_pb2.KEY, KEYS[0], b"two",
                   old=RowDigest(digests.hasher.digest(KEYS[0], b"one")))
        digest.write(write)
    assert maintained(store) == recomputed(store)
    store.close()


def test_a_row_changed_behind_the_store_is_drift_and_recompute_leaf_mends_it(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    machine = StateMachine(store)
    machine.apply(1, batch_of(1, [(0, 0, 1), (0, 1, 2)]))
    write = store.new_batch()     # a tool writing RocksDB directly
    store.batch_put(write, om_pb2.KEY, KEYS[0], b"rotten")
    store.batch_put(write, om_pb2.KEY, KEYS[5], b"stray")
    store.write(write)
    assert maintained(store) != recomputed(store)
    digests = machine.digests
    for key in (KEYS[0], KEYS[5]):
        with machine.applying():
            digests.recompute_leaf(om_pb2.KEY, digests.hasher.leaf(key), {key})
    assert maintained(store) == recomputed(store)
    store.close()


def test_the_leaf_cache_is_dropped_when_a_snapshot_replaces_the_store(tmp_path: Path) -> None:
    """Apply adds to the leaves it holds in memory: after a snapshot install puts older
    files in place, it must add to those files' leaves, never to the ones it held."""
    store = Store(tmp_path / "db")
    Digests.attach(store, b"k" * 32, 1, 1)        # two leaves: every change hits a held one
    machine = StateMachine(store)
    machine.apply(1, batch_of(1, [(0, 0, 1), (0, 1, 2)]))
    store.checkpoint(tmp_path / "snapshot")
    machine.apply(2, batch_of(2, [(0, 0, 3), (0, 2, 1)]))
    with machine.applying():
        store.replace_with(tmp_path / "snapshot")
        machine.reload()
    assert machine.applied_index == 1
    machine.apply(2, batch_of(2, [(0, 3, 1)]))
    assert maintained(store) == recomputed(store)
    store.close()


def test_a_mended_leaf_is_what_the_next_apply_adds_to(tmp_path: Path) -> None:
    """After ``recompute_leaf`` the cache holds the mended leaf, not the drifted one."""
    store = Store(tmp_path / "db")
    Digests.attach(store, b"k" * 32, 1, 1)
    machine = StateMachine(store)
    machine.apply(1, batch_of(1, [(0, 0, 1), (0, 1, 2)]))
    write = store.new_batch()     # a tool writing RocksDB directly
    store.batch_put(write, om_pb2.KEY, KEYS[0], b"rotten")
    store.write(write)
    digests = machine.digests
    with machine.applying():
        digests.recompute_leaf(om_pb2.KEY, digests.hasher.leaf(KEYS[0]), {KEYS[0]})
    machine.apply(2, batch_of(2, [(0, 0, 2), (0, 4, 1)]))
    assert maintained(store) == recomputed(store)
    store.close()


@pytest.mark.parametrize("leaf_bits", [6, 13])     # a dict of leaves; one promoted bytearray
def test_the_leaf_cache_is_counted_and_stops_growing_at_its_leaves(
        tmp_path: Path, leaf_bits: int) -> None:
    """The leaf cache fills as rows spread over a table's leaves, then stays: it is
    exported (om_digest_leaf_cache_bytes) so a soak reads its filling as a bound
    reached, not a leak (om/chaos/resources.py)."""
    store = Store(tmp_path / "db")
    digests = Digests.attach(store, b"k" * 32, leaf_bits, 4)
    bound = (1 << leaf_bits) * max(LEAF_VALUE.size, digest_rows._FEW_ENTRY_BYTES)
    sizes = []
    for round_ in range(3):
        with digests.changes() as digest:
            write = store.new_batch()
            for i in range(12_000):
                key = b"/v/b/k-%d-%d" % (round_, i)
                store.batch_put(write, om_pb2.KEY, key, b"x")
                digest.put(om_pb2.KEY, key, b"x")
            digest.write(write)
        sizes.append(digests.cache_bytes())
    assert 0 < sizes[0] <= bound
    assert sizes[0] == sizes[1] == sizes[2], "every leaf was held after the first round"
    store.close()


def test_stored_leaves_in_a_range_are_those_of_the_whole_table_in_it(tmp_path: Path) -> None:
    """Any (after, before) range, read in pages no larger than it, gives exactly the
    leaves of a whole-table read that fall in it (a page cut short by the range's size
    must not end the read early)."""
    store = Store(tmp_path / "db")
    try:
        write = store.new_batch()
        for i in range(200):
            store.batch_put(write, om_pb2.KEY, b"/v/b/r%03d" % i, b"x%d" % i)
        store.write(write)              # rows from before digests: a build covers them
        Digests.attach(store, b"k" * 32, 6, 2)      # 64 leaves, most of them non-empty
        machine = StateMachine(store)
        with machine.applying():
            while not machine.digests.meta.complete:
                machine.digests.build_step(1000)
        whole = list(digest_rows.stored_leaves(store, om_pb2.KEY))
        assert len(whole) > 40
        for after in (None, 0, 5, 17, 40, 62):
            for before in (None, 1, 6, 16, 18, 33, 64):
                for page in (1, 3, 4096):
                    got = list(digest_rows.stored_leaves(store, om_pb2.KEY, after, before, page))
                    assert got == [row for row in whole
                                   if (after is None or row[0] > after)
                                   and (before is None or row[0] < before)], (after, before)
    finally:
        store.close()


class _CountingView(Store):
    """A store whose scans count the rows they return."""

    rows = 0

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        found = super().scan(table, prefix, start_after, limit)
        self.rows += len(found)
        return found


def test_a_range_of_leaves_reads_about_as_many_leaf_rows_as_it_holds(tmp_path: Path) -> None:
    """A level request reads 16 leaves under each parent: the read must not page
    through thousands of leaf rows beyond them (at 10M keys it read 4,096 per
    parent, 256 times what it used)."""
    store = Store(tmp_path / "db")
    try:
        write = store.new_batch()
        for i in range(3000):
            store.batch_put(write, om_pb2.KEY, b"/v/b/r%04d" % i, b"x")
        store.write(write)
        Digests.attach(store, b"k" * 32, 10, 4)     # 1,024 leaves, nearly all non-empty
        machine = StateMachine(store)
        with machine.applying():
            while not machine.digests.meta.complete:
                machine.digests.build_step(5000)
        store.close()
        view = _CountingView(tmp_path / "db")
        store = view
        got = list(digest_rows.stored_leaves(view, om_pb2.KEY, 15, 32))   # leaves 16..31
        assert 0 < len(got) <= 16
        assert view.rows <= 2 * 16, view.rows
    finally:
        store.close()
