"""The replica's digests of its tables, kept current in the write batch of every change.

Each table is cut into ``2**leaf_bits`` leaves by a keyed hash of the row key, and
each leaf holds the sum of its rows' digests and their count
(``om.schema.row_digests``). Whoever writes rows to the store (apply, the old
flow's double buffer, a repair, the offline generator) opens a ``DigestChanges``
with ``Digests.changes()``, reports each row change to it, and writes the batch
through it: the rows, the leaves they change and the leaves' row index go to
RocksDB in ONE write batch, so a crash can never leave a row and its digest apart.

Where it lives: the column family ``digestTable`` (``tables.STORE_FAMILIES``),
which no log entry names and no table scan sees:

* ``#META``: ``DigestMeta``: the digest key, the tree's shape, the build state;
* ``L`` + table (1 byte) + leaf (4 bytes): the leaf's sum (32 bytes) and rows (8);
  absent while both are zero;
* ``I`` + table + leaf + row key: empty; the index that finds a leaf's rows with a
  seek and a short read (hash leaves scatter a leaf over the whole table).

How the old row's contribution is removed: ``write`` digests each row's net change
over the batch (``DigestChanges``), its value before the batch being what the first
change's caller passed (the value, or a ``RowDigest`` of it from a writer that read
it) or else read from the store, all such reads in one multi-get per table. The
figures that chose the lookup are in docs/operations/verify-and-repair.md, *What digests cost*.

Invariants:

* After every write batch, each leaf row holds exactly the sum and count of the
  digests of its table's rows whose key hashes to it, and the index names exactly
  those rows, for every row apply (or any writer through this module) changed.
  Only a change made behind the store's back breaks it; the scrub finds that
  (``om.integrity.scrub``), and ``recompute_leaf`` mends it.
* Sums and counts wrap (modulo 2**256 and 2**64), so a leaf a stray write has
  corrupted never stops apply: it only shows as drift.
* A store written before digests existed (or by a tool that did not keep them)
  is *building*: the rows below a cursor (tables in id order, keys in order) are
  covered and kept current; the rest are left to ``build_step``, which covers a
  page at a time and moves the cursor in the same write batch.
* One ``Digests`` per store (``attach``): its lock serialises every writer, and
  its cache of leaves is dropped when the store's files are replaced.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rocksdict import WriteBatch

from om.config import DEFAULT_VERIFY
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView
from om.schema.row_digests import LEAF_VALUE, SUM_MODULUS, RowHasher, decode_leaf
from om.schema.tables import TableId
from om.statemachine.store import Store

DIGESTS = om_pb2.DIGESTS
META_KEY = b"#META"
LEAF_TAG = b"L"
INDEX_TAG = b"I"
COUNT_MODULUS = 1 << 64
TABLE_ORDER: tuple[TableId, ...] = tuple(sorted(tables.TABLE_NAMES))
_KEY_LABEL = b"om digest key v1"
_PROMOTE_AT = 4096          # a table's cached leaves move from a dict into one bytearray
_ZERO_LEAF = bytes(LEAF_VALUE.size)
_FEW_ENTRY_BYTES = 140      # a cached leaf while few (bytes, int key, dict slot; tracemalloc)


def derive_key(secret: str) -> bytes:
    """A new store's digest key, from the cluster's Raft secret (every node of a new
    cluster derives the same one). Without a secret it is public: a client could then
    grind key names into one leaf, which makes naming and repair of that leaf slower,
    never wrong."""
    return hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest()


@dataclass(frozen=True)
class RowDigest:
    """An old row's digest, from a writer that read the row (so apply need not)."""

    value: int


class _Lookup:
    """The old value is not known: look it up."""


LOOKUP = _Lookup()
OldRow = bytes | None | RowDigest | _Lookup


def leaf_key(table: TableId, leaf: int) -> bytes:
    """The digestTable key of a leaf."""
    return LEAF_TAG + bytes((table,)) + leaf.to_bytes(4, "big")


def leaf_prefix(table: TableId) -> bytes:
    """The prefix of every leaf of ``table``."""
    return LEAF_TAG + bytes((table,))


def index_prefix(table: TableId, leaf: int) -> bytes:
    """The prefix of the index entries of one leaf's rows."""
    return INDEX_TAG + bytes((table,)) + leaf.to_bytes(4, "big")


def read_meta(view: ReadView) -> om_pb2.DigestMeta | None:
    """A store's (or checkpoint's) digest meta row; None when it has none."""
    raw = view.get(DIGESTS, META_KEY)
    return None if raw is None else om_pb2.DigestMeta.FromString(raw)


def hasher_of(meta: om_pb2.DigestMeta) -> RowHasher:
    """The hashes of a store whose meta row is ``meta``."""
    return RowHasher(meta.key, meta.leaf_bits)


def stored_leaves(view: ReadView, table: TableId, after: int | None = None,
                  before: int | None = None, page: int = 4096) -> Iterator[tuple[int, int, int]]:
    """(leaf, sum, rows) of ``table``'s non-empty leaves in (after, before), ascending.
    A page reads no more leaf rows than the range can hold: a level request reads
    ranges of 16 leaves, and a page of 4,096 from each made the descent at 10M keys
    read 256 times the rows it used."""
    prefix = leaf_prefix(table)
    start = None if after is None else leaf_key(table, after)
    if before is not None:
        page = max(1, min(page, before - (0 if after is None else after + 1)))
    while True:
        found = view.scan(DIGESTS, prefix, start, page)
        for key, raw in found:
            leaf = int.from_bytes(key[len(prefix):], "big")
            if before is not None and leaf >= before:
                return
            total, rows = decode_leaf(raw)
            yield leaf, total, rows
        if len(found) < page:
            return
        start = found[-1][0]


def leaf_keys(view: ReadView, table: TableId, leaf: int, after: bytes | None,
              limit: int) -> list[bytes]:
    """Up to ``limit`` row keys the index lists in one leaf, after ``after``, in order."""
    prefix = index_prefix(table, leaf)
    found = view.scan(DIGESTS, prefix, None if after is None else prefix + after, limit)
    return [key[len(prefix):] for key, _ in found]


class _TableLeaves:
    """One table's leaf rows as stored, all of them read when the store is attached (so
    a leaf not held is an empty one, all zeros): a dict while few, then one bytearray
    of every leaf (40 bytes each: 2.6 MB at 2^16 leaves)."""

    def __init__(self, leaves: int) -> None:
        self._leaves = leaves
        self._few: dict[int, bytes] | None = {}
        self._values = bytearray()

    @property
    def bytes_held(self) -> int:
        """What the cache holds in memory (estimated while a dict: ``_FEW_ENTRY_BYTES``
        an entry, the value, its int key and the dict's slot): at most
        ``leaves * LEAF_VALUE.size`` once promoted, 2.6 MB at 2^16 leaves."""
        if self._few is not None:
            return len(self._few) * _FEW_ENTRY_BYTES
        return len(self._values)

    def get(self, leaf: int) -> bytes:
        if self._few is not None:
            return self._few.get(leaf, _ZERO_LEAF)
        at = leaf * LEAF_VALUE.size
        return bytes(self._values[at:at + LEAF_VALUE.size])

    def added(self, deltas: dict[int, list[int]]) -> list[tuple[int, bytes]]:
        """(leaf, stored form) of each leaf of ``deltas`` whose value changes, once its
        [sum delta, rows delta] is added (wrapping); the cache is not changed (``set_all``
        once the values are written). One call per table and batch: apply's hot path."""
        few, values = self._few, self._values
        found: list[tuple[int, bytes]] = []
        for leaf, (total_delta, rows_delta) in deltas.items():
            if rows_delta == 0 and total_delta % SUM_MODULUS == 0:
                continue                    # as it was (a row put back as the batch found it)
            if few is not None:
                raw: bytes | bytearray = few.get(leaf, _ZERO_LEAF)
                at = 0
            else:
                raw, at = values, leaf * LEAF_VALUE.size
            total = (int.from_bytes(raw[at:at + 32], "big") + total_delta) % SUM_MODULUS
            rows = (int.from_bytes(raw[at + 32:at + 40], "big") + rows_delta) % COUNT_MODULUS
            found.append((leaf, total.to_bytes(32, "big") + rows.to_bytes(8, "big")))
        return found

    def set_all(self, written: list[tuple[int, bytes]]) -> None:
        """Records each (leaf, stored form) of ``written``."""
        if self._few is not None:
            for leaf, raw in written:
                self.set(leaf, raw)
            return
        values, size = self._values, LEAF_VALUE.size
        for leaf, raw in written:
            at = leaf * size
            values[at:at + size] = raw

    def set(self, leaf: int, raw: bytes) -> None:
        assert len(raw) == LEAF_VALUE.size
        if self._few is None:
            at = leaf * LEAF_VALUE.size
            self._values[at:at + LEAF_VALUE.size] = raw
            return
        self._few[leaf] = raw
        if len(self._few) >= _PROMOTE_AT:
            self._values = bytearray(self._leaves * LEAF_VALUE.size)
            for known, value in self._few.items():
                at = known * LEAF_VALUE.size
                self._values[at:at + LEAF_VALUE.size] = value
            self._few = None


class Digests:
    """The digests of one store: its key and shape, its build state, its leaf cache."""

    _attached: weakref.WeakKeyDictionary[Store, Digests] = weakref.WeakKeyDictionary()
    _attaching = threading.Lock()

    def __init__(self, store: Store, key: bytes, leaf_bits: int, fanout_bits: int) -> None:
        assert not store.read_only, "digests are kept on a store that is written"
        self.store = store
        self.lock = threading.RLock()      # every writer of the store, and the builder
        self._new = (key, leaf_bits, fanout_bits)
        self._load()

    @classmethod
    def attach(cls, store: Store, key: bytes | None = None, leaf_bits: int | None = None,
               fanout_bits: int | None = None) -> Digests:
        """The store's digests. The first attach of a store without a meta row makes
        one from the arguments (defaults: the public key, ``[verify]``'s shape); after
        that the store's own row wins, so copies of a store keep their key."""
        with cls._attaching:
            found = cls._attached.get(store)
            if found is None:
                found = cls(store, key if key is not None else derive_key(""),
                            leaf_bits or DEFAULT_VERIFY.leaf_bits,
                            fanout_bits or DEFAULT_VERIFY.fanout_bits)
                cls._attached[store] = found
            return found

    def _load(self) -> None:
        """Reads the meta row (making one for a store that has none) and empties the
        cache: at start, and when the store's files were replaced."""
        self._generation = self.store.generation
        meta = read_meta(self.store)
        if meta is None:
            meta = self._first_meta()
        self.meta = meta
        self.hasher = hasher_of(meta)
        self._leaves: dict[TableId, _TableLeaves] = {}
        for table in TABLE_ORDER:        # every leaf row, once: apply then never reads one
            cache = self._leaves[table] = _TableLeaves(1 << meta.leaf_bits)
            prefix, after = leaf_prefix(table), None
            while page := self.store.scan(DIGESTS, prefix, after, 4096):
                for key, raw in page:
                    cache.set(int.from_bytes(key[len(prefix):], "big"), raw)
                after = page[-1][0]

    def _first_meta(self) -> om_pb2.DigestMeta:
        key, leaf_bits, fanout_bits = self._new
        meta = om_pb2.DigestMeta(key=key, leaf_bits=leaf_bits, fanout_bits=fanout_bits)
        empty = all(not self.store.scan(table, b"", None, 1) for table in TABLE_ORDER)
        if empty:
            meta.complete = True
        else:
            meta.build_table = TABLE_ORDER[0]
        write = self.store.new_batch()
        self.store.batch_put(write, DIGESTS, META_KEY, meta.SerializeToString())
        self.store.write(write)
        return meta

    @property
    def complete(self) -> bool:
        """Whether every row of every table is covered."""
        return self.meta.complete

    def covers(self, table: TableId, key: bytes) -> bool:
        """Whether the digests cover ``table[key]`` (always, once complete)."""
        meta = self.meta
        if meta.complete:
            return True
        if table != meta.build_table:
            return table < meta.build_table
        return meta.HasField("build_after") and key <= meta.build_after

    @contextmanager
    def changes(self) -> Iterator[DigestChanges]:
        """The digest changes of one write batch, under the writers' lock."""
        with self.lock:
            if self.store.generation != self._generation:
                self._load()
            yield DigestChanges(self)

    def leaf_value(self, table: TableId, leaf: int) -> tuple[int, int]:
        """(sum, rows) of a leaf now (the caller holds ``lock``)."""
        return decode_leaf(self._leaves[table].get(leaf))

    def cache_bytes(self) -> int:
        """What the leaf caches of every table hold in memory: bounded by the leaves
        (2^leaf_bits x 40 bytes a table), filled as rows spread over them; exported
        (om_digest_leaf_cache_bytes) so a soak does not read the filling as a leak."""
        with self.lock:
            return sum(cache.bytes_held for cache in self._leaves.values())

    def leaves(self, table: TableId) -> _TableLeaves:
        """``table``'s cached leaves (the caller holds ``lock``)."""
        return self._leaves[table]

    # -- the builder and the mender ---------------------------------------------------------

    def build_step(self, rows_max: int) -> int:
        """Covers the next ``rows_max`` rows of a building store; returns how many (the
        cursor may move to the next table with none; ``complete`` says when it is done).

        The caller holds the state machine's apply lock, so no snapshot install
        replaces the store between the read and the write."""
        assert rows_max > 0
        with self.changes() as changes:
            meta = self.meta
            if meta.complete:
                return 0
            table = meta.build_table
            after = meta.build_after if meta.HasField("build_after") else None
            rows = self.store.scan(table, b"", after, rows_max)
            for key, value in rows:
                changes.change(table, key, None, value, covered=True)
            moved = om_pb2.DigestMeta()
            moved.CopyFrom(meta)
            if len(rows) == rows_max:
                moved.build_after = rows[-1][0]
            else:
                _next_table(moved)
            changes.write(self.store.new_batch(), moved)
            return len(rows)

    def recompute_leaf(self, table: TableId, leaf: int, keys: set[bytes]) -> tuple[bytes, bytes]:
        """Sets a leaf, and its index, to what its rows are now: the rows among ``keys``
        (say, those a scrub saw in the leaf) and those its index lists that exist and
        hash to it. Returns the leaf's value before and after. The caller holds the
        state machine's apply lock (see ``build_step``)."""
        with self.changes() as changes:
            listed = set(_all_leaf_keys(self.store, table, leaf))
            total, rows = 0, 0
            present: set[bytes] = set()
            for key in sorted(keys | listed):
                value = self.store.get(table, key)
                if value is None or self.hasher.leaf(key) != leaf:
                    continue
                present.add(key)
                total, rows = (total + self.hasher.digest(key, value)) % SUM_MODULUS, rows + 1
            before = self.leaf_value(table, leaf)
            changes.set_leaf(table, leaf, total, rows, present - listed, listed - present)
            changes.write(self.store.new_batch())
            return _raw(*before), _raw(total, rows)


def _next_table(meta: om_pb2.DigestMeta) -> None:
    """Moves a build cursor to the start of the next table, or marks the build done."""
    later = [t for t in TABLE_ORDER if t > meta.build_table]
    meta.ClearField("build_after")
    if later:
        meta.build_table = later[0]
    else:
        meta.ClearField("build_table")
        meta.complete = True


def _all_leaf_keys(view: ReadView, table: TableId, leaf: int) -> Iterator[bytes]:
    after: bytes | None = None
    while True:
        keys = leaf_keys(view, table, leaf, after, 1000)
        yield from keys
        if len(keys) < 1000:
            return
        after = keys[-1]


def _raw(total: int, rows: int) -> bytes:
    return LEAF_VALUE.pack(total.to_bytes(32, "big"), rows)


class DigestChanges:
    """The digest changes of one write batch: report each row change, then ``write``.

    A change is recorded as it is reported, not digested: ``write`` digests each row's
    *net* change over the batch, its value before the batch (the first change's ``old``)
    against its value after (the last change's ``new``). The digests of a row's
    values in between cancel in the sum, so the leaves come out exactly as if every
    change had been digested in turn, but a row the batch changes twice (an open key
    put then deleted, a bucket's usage rewritten by each commit) costs one old and one
    new digest, or none when the batch leaves it as it found it. The old values no
    caller passed are read in one multi-get per table, after the last change and
    before the write (the writers' lock keeps the store as it was meanwhile).
    """

    def __init__(self, digests: Digests) -> None:
        self._digests = digests
        self._before: dict[tuple[TableId, bytes], OldRow] = {}      # the first old
        self._after: dict[tuple[TableId, bytes], bytes | None] = {}  # the last new
        self._forced: set[tuple[TableId, bytes]] = set()             # covered=True
        self._absolute: dict[tuple[TableId, int], tuple[int, int]] = {}
        self._set_index: list[tuple[bytes, bytes | None]] = []

    def put(self, table: TableId, key: bytes, value: bytes, old: OldRow = LOOKUP) -> None:
        """``table[key] = value`` is in the batch (``change``, inlined: apply's hot path)."""
        row = (table, key)
        self._before.setdefault(row, old)
        self._after[row] = value

    def delete(self, table: TableId, key: bytes, old: OldRow = LOOKUP) -> None:
        """A delete of ``table[key]`` is in the batch (``change``, inlined)."""
        row = (table, key)
        self._before.setdefault(row, old)
        self._after[row] = None

    def ops(self, ops: Iterable[om_pb2.TableOp]) -> None:
        """Every put and delete of a batch's ``ops``, in order."""
        before = self._before.setdefault
        after = self._after
        for op in ops:
            row = (op.table, op.key)
            before(row, LOOKUP)
            after[row] = None if op.delete else op.value

    def change(self, table: TableId, key: bytes, old: OldRow, new: bytes | None,
               covered: bool = False) -> None:
        """``table[key]`` goes from ``old`` (LOOKUP: as the store and this batch say) to
        ``new`` (None: deleted). ``covered``: count it even while building (the builder).
        An ``old`` given for a row this batch already changed is ignored: the batch's
        own change is what the row held."""
        row = (table, key)
        self._before.setdefault(row, old)
        self._after[row] = new
        if covered:
            self._forced.add(row)

    def set_leaf(self, table: TableId, leaf: int, total: int, rows: int,
                 listed: set[bytes], unlisted: set[bytes]) -> None:
        """Sets a leaf outright (``recompute_leaf``), its index gaining ``listed`` and
        losing ``unlisted``."""
        self._absolute[(table, leaf)] = (total % SUM_MODULUS, rows % COUNT_MODULUS)
        prefix = index_prefix(table, leaf)
        self._set_index += [(prefix + key, b"") for key in listed]
        self._set_index += [(prefix + key, None) for key in unlisted]

    def write(self, write: WriteBatch, meta: om_pb2.DigestMeta | None = None) -> None:
        """Adds the changed leaves and index entries (and ``meta``) to ``write``, writes
        it to the store in one atomic write, then remembers the leaves written."""
        digests, store = self._digests, self._digests.store
        deltas, entries = self._digest(self._net_changes())
        written: list[tuple[TableId, list[tuple[int, bytes]]]] = []
        for table, changed in deltas.items():
            values = digests.leaves(table).added(changed)
            written.append((table, values))
            head = leaf_prefix(table)
            entries += [(head + leaf.to_bytes(4, "big"), None if raw == _ZERO_LEAF else raw)
                        for leaf, raw in values]
        for (table, leaf), value in self._absolute.items():
            assert table not in deltas or leaf not in deltas[table], \
                "a leaf set outright and changed"
            raw = _raw(*value)
            written.append((table, [(leaf, raw)]))
            entries.append((leaf_key(table, leaf), None if raw == _ZERO_LEAF else raw))
        entries += self._set_index
        if meta is not None:
            entries.append((META_KEY, meta.SerializeToString()))
        store.batch_entries(write, DIGESTS, entries)
        store.write(write)
        for table, values in written:
            digests.leaves(table).set_all(values)
        if meta is not None:
            digests.meta = meta

    def _net_changes(self) -> list[tuple[TableId, bytes, bytes | RowDigest | None,
                                         bytes | None]]:
        """(table, key, before, after) of every covered row the batch changed, the values
        before it looked up (one multi-get per table)."""
        digests = self._digests
        complete, forced, before = digests.complete, self._forced, self._before
        known: list[tuple[TableId, bytes, bytes | RowDigest | None, bytes | None]] = []
        looked: dict[TableId, tuple[list[bytes], list[bytes | None]]] = {}
        for row, new in self._after.items():
            table, key = row
            if not (complete or row in forced or digests.covers(table, key)):
                continue                    # the builder will read it when it gets there
            old = before[row]
            if isinstance(old, _Lookup):
                keys, news = looked.setdefault(table, ([], []))
                keys.append(key)
                news.append(new)
            elif old != new:
                known.append((table, key, old, new))
        for table, (keys, news) in looked.items():
            olds = digests.store.get_many(table, keys)
            known += [(table, key, old, new) for key, old, new in zip(keys, olds, news, strict=True)
                      if old != new]
        return known

    def _digest(self, changed: list[tuple[TableId, bytes, bytes | RowDigest | None,
                                          bytes | None]]
                ) -> tuple[dict[TableId, dict[int, list[int]]], list[tuple[bytes, bytes | None]]]:
        """The (sum, rows) delta of each leaf the changes touch, by table, and the index
        entries they add (a row that appears) or remove (a row that goes)."""
        hashed = self._digests.hasher.change
        deltas: dict[TableId, dict[int, list[int]]] = {}
        index: list[tuple[bytes, bytes | None]] = []
        for table, key, old, new in changed:
            if isinstance(old, RowDigest):
                leaf, total_delta = hashed(key, None, new)
                total_delta -= old.value
            else:
                leaf, total_delta = hashed(key, old, new)
            rows_delta = (new is not None) - (old is not None)
            leaves = deltas.get(table)
            if leaves is None:
                leaves = deltas[table] = {}
            delta = leaves.get(leaf)
            if delta is None:
                leaves[leaf] = [total_delta, rows_delta]
            else:
                delta[0] += total_delta
                delta[1] += rows_delta
            if rows_delta:
                index.append((INDEX_TAG + bytes((table,)) + leaf.to_bytes(4, "big") + key,
                              b"" if rows_delta > 0 else None))
        return deltas, index
