"""From a store to Merkle trees and back: scans, checkpoints, the trees file.

The trees of a verification must describe one log position on every replica.
The wiring therefore calls ``take_checkpoint`` while applying the verify
entry (on the apply thread, so no later entry is in it) and computes the trees
from that checkpoint afterwards, off the apply path: a RocksDB checkpoint is a
consistent copy of every column family (hard links, cheap), concurrent applies
cannot tear it, it survives a snapshot install that replaces the live
database, and it can later serve a repairing peer the rows of the verified
position. The position is read from the checkpoint's own transaction info row,
so a tree always states the position it describes.

Scans read through the ``ReadView`` port in pages (``Store.scan`` takes the
store's lock per page, not per table), paced by a ``RateLimit`` so a scan of a
live store or a busy disk never starves apply or the event loop.

The trees are persisted beside the database, in ``<db>.merkle``: a magic
line, the SHA-256 of the payload, then a serialized ``TableTrees``. The file
is written to ``<db>.merkle.tmp``, fsynced and renamed over the old one (then
the directory is fsynced), so a crash leaves the old file or the new one,
never a torn one; a leftover ``.tmp`` is ignored, and a file whose checksum or
trees do not verify loads as None (compute again).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from google.protobuf.message import DecodeError

from om.disk.durable_files import fsync_path
from om.integrity import merkle
from om.integrity.merkle import DEFAULT_PARAMS, Forest, KeyRange, TreeParams
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView
from om.schema.tables import TableId
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

PAGE_ROWS = 1000
TREES_SUFFIX = ".merkle"
_MAGIC = b"OM-MERKLE-TREES-1\n"
TABLE_IDS: dict[str, TableId] = {name: table for table, name in tables.TABLE_NAMES.items()}


class RateLimit:
    """Paces a scan to at most ``rows_per_s`` rows and ``bytes_per_s`` bytes a second.

    ``charge`` sleeps whenever the work done so far is ahead of what the rates
    allow by at least ``min_sleep_s`` (short sleeps are batched, not skipped).
    None means no limit on that measure. The clock and sleep are injectable.
    """

    def __init__(self, rows_per_s: float | None = None, bytes_per_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 min_sleep_s: float = 0.01) -> None:
        assert rows_per_s is None or rows_per_s > 0
        assert bytes_per_s is None or bytes_per_s > 0
        assert min_sleep_s >= 0
        self._rows_per_s = rows_per_s
        self._bytes_per_s = bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._min_sleep_s = min_sleep_s
        self._started = clock()
        self.rows = 0
        self.bytes = 0
        self.slept_s = 0.0

    def charge(self, rows: int, nbytes: int) -> None:
        """Counts work done; sleeps until the rates allow it."""
        assert rows >= 0
        assert nbytes >= 0
        self.rows += rows
        self.bytes += nbytes
        ahead = self._earliest() - (self._clock() - self._started)
        if ahead >= self._min_sleep_s:
            self._sleep(ahead)
            self.slept_s += ahead

    def _earliest(self) -> float:
        """Seconds the work done so far may take at the least."""
        by_rows = 0.0 if self._rows_per_s is None else self.rows / self._rows_per_s
        by_bytes = 0.0 if self._bytes_per_s is None else self.bytes / self._bytes_per_s
        return max(by_rows, by_bytes)


class ThrottledView:
    """A ReadView that charges every row it returns to a rate limit (for the auditor)."""

    def __init__(self, view: ReadView, limit: RateLimit) -> None:
        self._view = view
        self._limit = limit

    def get(self, table: TableId, key: bytes) -> bytes | None:
        value = self._view.get(table, key)
        self._limit.charge(1, len(key) + (0 if value is None else len(value)))
        return value

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        rows = self._view.scan(table, prefix, start_after, limit)
        self._limit.charge(len(rows), sum(len(k) + len(v) for k, v in rows))
        return rows


# ------------------------------------------------------------------ scans ---

def table_rows(view: ReadView, table: TableId, limit: RateLimit | None = None,
               start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
    """Every row of ``table`` from key ``start`` on, in key order."""
    for page in table_pages(view, table, limit, start):
        yield from page


def table_pages(view: ReadView, table: TableId, limit: RateLimit | None = None,
                start: bytes = b"") -> Iterator[list[tuple[bytes, bytes]]]:
    """Every row of ``table`` from key ``start`` on, in key order, a page (at most
    ``PAGE_ROWS`` rows) at a time; each page is charged to ``limit`` as a whole."""
    limit = RateLimit() if limit is None else limit
    after: bytes | None = None
    if start:
        first = view.get(table, start)
        if first is not None:
            limit.charge(1, len(start) + len(first))
            yield [(start, first)]
        after = start
    while True:
        page = view.scan(table, b"", after, PAGE_ROWS)
        if page:
            limit.charge(len(page), sum(map(len, itertools.chain.from_iterable(page))))
            yield page
        if len(page) < PAGE_ROWS:
            return
        after = page[-1][0]


def read_range(view: ReadView, key_range: KeyRange,
               limit: RateLimit | None = None) -> list[tuple[bytes, bytes]]:
    """The rows of ``key_range`` (for row-level diffs and repair), in key order."""
    rows: list[tuple[bytes, bytes]] = []
    for key, value in table_rows(view, TABLE_IDS[key_range.table], limit, key_range.start):
        if key_range.end is not None and key >= key_range.end:
            break
        rows.append((key, value))
    return rows


def compute_trees(view: ReadView, params: TreeParams = DEFAULT_PARAMS,
                  limit: RateLimit | None = None) -> Forest:
    """Every table's tree, and the position they describe.

    Consistent only if nothing writes to ``view`` meanwhile: pass a checkpoint.
    """
    raw = view.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
    info = om_pb2.TransactionInfo() if raw is None else om_pb2.TransactionInfo.FromString(raw)
    trees = {name: merkle.build(name, table_rows(view, table, limit), params)
             for table, name in tables.TABLE_NAMES.items()}
    return Forest(info.applied_index, info.term, trees)


def take_checkpoint(store: Store, destination: Path) -> Path:
    """A consistent copy of ``store`` at ``destination``: call it inside apply.

    The old flow's double buffer lags apply: call the state machine's
    ``quiesce()`` first (as ``snapshot.Snapshotter`` does), then check that the
    trees' ``applied_index`` is the verify entry's position.
    """
    store.checkpoint(destination)
    return destination


def compute_checkpoint_trees(checkpoint: Path, params: TreeParams = DEFAULT_PARAMS,
                             limit: RateLimit | None = None) -> Forest:
    """The trees of a checkpoint, which is opened, scanned and closed (and kept)."""
    assert checkpoint.is_dir()
    store = Store(checkpoint)
    try:
        return compute_trees(store, params, limit)
    finally:
        store.close()


# ------------------------------------------------------------ persistence ---

def trees_path(db_path: Path) -> Path:
    """Where the trees of the database at ``db_path`` are kept: beside it."""
    return db_path.with_name(db_path.name + TREES_SUFFIX)


def save_trees(path: Path, forest: Forest) -> None:
    """Writes ``forest`` to ``path`` atomically and durably (tmp, fsync, rename)."""
    payload = merkle.forest_to_proto(forest).SerializeToString(deterministic=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as out:
        out.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_path(path.parent)


def load_trees(path: Path) -> Forest | None:
    """The forest saved at ``path``; None when there is none or it does not verify."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    header = len(_MAGIC) + 32
    payload = data[header:]
    if data[:len(_MAGIC)] != _MAGIC or data[len(_MAGIC):header] != _sha256(payload):
        logger.warning("ignoring %s: not a trees file, or its checksum fails", path)
        return None
    try:
        return merkle.forest_from_proto(om_pb2.TableTrees.FromString(payload))
    except (DecodeError, ValueError) as error:
        logger.warning("ignoring %s: %s", path, error)
        return None


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


