"""The RocksDB store: one column family per table, raw bytes, via rocksdict.

The store is the only code that touches rocksdict. It offers a read view of
applied state (``get`` / ``scan``), atomic multi-table write batches, the
transaction info row, checkpoints for snapshots, and per-table digests for
comparing replicas.

Memory is bounded (``StoreMemory``): RocksDB's defaults give each column family
its own memtables (64 MiB, two of them) and its own 8 MiB block cache, so with
seventeen tables a node's resident memory grew by a hundred MiB and more as
writes filled the memtables, and could reach about a GiB. A node's stores share
one write buffer manager (a flush starts when all memtables together reach its
budget) and one LRU block cache.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    Checkpoint,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import Parsed
from om.schema.tables import TableId

# Tables whose rows ``Store.parsed`` keeps parsed between writes, and how many at most.
PARSED_TABLES = frozenset({om_pb2.VOLUME, om_pb2.BUCKET, om_pb2.TRANSACTION_INFO})
PARSED_ROWS_MAX = 4096


def _prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


MIB = 1024 * 1024


# Table files a store keeps open (RocksDB's default keeps every one open for the
# store's life, so descriptors grow with the database and with each OM snapshot's
# checkpoint opened for reading: a soak with snapshot reads saw 600-740 descriptors
# a node against its bound of 1,024). Past the bound, RocksDB closes the least
# recently used table file and reopens it on demand. Its table cache is split in
# 2^TABLE_CACHE_SHARD_BITS shards, each bounding its share (RocksDB's default, 64
# shards, let a read-only store bounded at 32 hold 54: tests/test_store_memory.py).
OPEN_FILES_MAX = 512
READ_ONLY_OPEN_FILES_MAX = 32
TABLE_CACHE_SHARD_BITS = 2


class StoreMemory:
    """The memory budget stores share: all their memtables together, and one block
    cache. RocksDB keeps to the memtable budget by flushing (a write may stall until
    a flush frees memory, never fail); the cache evicts least recently used blocks.
    It must outlive every store using it (each store keeps a reference)."""

    def __init__(self, memtable_bytes: int, block_cache_bytes: int) -> None:
        assert memtable_bytes >= MIB
        assert block_cache_bytes >= MIB
        self.memtable_bytes = memtable_bytes
        self.block_cache_bytes = block_cache_bytes
        self.block_cache = Cache(block_cache_bytes)
        self.write_buffers = WriteBufferManager(memtable_bytes, True)

    def usage(self) -> tuple[int, int]:
        """(memtable bytes, block cache bytes) in use now."""
        return self.write_buffers.get_usage(), self.block_cache.get_usage()


_SHARED: list[StoreMemory] = []


def shared_memory() -> StoreMemory:
    """The budget of stores opened without one (checkpoints read by tools and
    handlers): 64 MiB of memtables and 64 MiB of block cache for the process."""
    if not _SHARED:
        _SHARED.append(StoreMemory(64 * MIB, 64 * MIB))
    return _SHARED[0]


class Store:
    """A RocksDB database holding every table of one OM node."""

    def __init__(self, path: Path, sync_writes: bool = False, wal: bool = True,
                 read_only: bool = False, memory: StoreMemory | None = None) -> None:
        """``read_only``: open an existing database (a checkpoint) without writing to it;
        ``memory``: the budget this store shares (None: ``shared_memory()``)."""
        assert wal or not sync_writes, "a synced write needs the write-ahead log"
        self.path = path
        self.read_only = read_only
        self.memory = memory if memory is not None else shared_memory()
        self._write_options = WriteOptions()
        self._write_options.sync = sync_writes
        # rocksdict's stub shows disable_wal as a method; it is a property
        self._write_options.disable_wal = not wal  # type: ignore[method-assign, assignment]
        # Serialises a snapshot install (Raft thread) against readers (event loop).
        self._swap_lock = threading.RLock()
        # PARSED_TABLES rows as parsed: (parse, value, raw bytes) by (table, key)
        self._parsed: dict[tuple[TableId, bytes], tuple[Callable[[bytes], Any], Any,
                                                        bytes | None]] = {}
        self.generation = 0
        self._open()

    def _open(self) -> None:
        options = Options(raw_mode=True)
        if not self.read_only:
            self.path.mkdir(parents=True, exist_ok=True)
            options.create_if_missing(True)
            options.create_missing_column_families(True)
        # Every flush writes all tables' memtables in one step, so after a crash the
        # tables never stand at different positions. Without it each column family
        # flushes on its own (a checkpoint flushes them one by one): a kill between
        # two of those flushes, with the write-ahead log off or its tail lost, left
        # transactionInfoTable's applied position ahead of keyTable's rows, and the
        # journal replay skipped them (a hole; tests/test_crash_restart.py found it).
        options.set_atomic_flush(True)
        options.set_write_buffer_manager(self.memory.write_buffers)
        options.set_max_open_files(READ_ONLY_OPEN_FILES_MAX if self.read_only
                                   else OPEN_FILES_MAX)
        options.set_table_cache_num_shard_bits(TABLE_CACHE_SHARD_BITS)
        families = {name: self._family_options() for name in tables.STORE_FAMILIES.values()}
        access = AccessType.read_only() if self.read_only else AccessType.read_write()
        self._db = Rdict(str(self.path), options, column_families=families, access_type=access)
        self._families = {t: self._db.get_column_family(n)
                          for t, n in tables.STORE_FAMILIES.items()}
        self._handles = {t: self._db.get_column_family_handle(n)
                         for t, n in tables.STORE_FAMILIES.items()}
        self._closed = False
        self._parsed.clear()   # another database (a snapshot's) may stand here now
        self.generation += 1     # readers holding state about the old files drop it

    def _family_options(self) -> Options:
        """A table's options: its blocks cached in the shared cache."""
        table_options = BlockBasedOptions()
        table_options.set_block_cache(self.memory.block_cache)
        options = Options(raw_mode=True)
        options.set_block_based_table_factory(table_options)
        return options

    def memtable_bytes(self) -> int:
        """The memory every table's memtables hold now (RocksDB's own count)."""
        return sum(int(family.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
                   for family in self._families.values())

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        """The row parsed by ``parse``, shared until the store is written (``ReadView``).

        Kept for PARSED_TABLES only (the volume, bucket and upgrade rows every write
        reads, some twice: its lock plan, then its handler); other tables parse each
        time. Invariant: a kept row is the parse of what the store holds now. Every
        write (apply's write batch, a snapshot's store swap) drops them all in the same
        critical section as the write, so a row is never served after the write that
        changed it ("visible after apply" holds), and a miss reads and keeps under that
        lock too, so a write between the read and the keep cannot leave a stale row.
        At most PARSED_ROWS_MAX are kept (all dropped at the bound)."""
        if table not in PARSED_TABLES:
            raw = self.get(table, key)
            return None if raw is None else parse(raw)
        row = (table, key)
        with self._swap_lock:
            kept = self._parsed.get(row)
            if kept is not None:
                assert kept[0] == parse, "a table's rows are always parsed alike"
                return cast("Parsed | None", kept[1])
            raw = self.get(table, key)
            value = None if raw is None else parse(raw)
            if len(self._parsed) >= PARSED_ROWS_MAX:
                self._forget_parsed()
            self._parsed[row] = (parse, value, raw)
            return value

    def _forget_parsed(self) -> None:
        """Drops every parsed row; asserts that none was changed by a caller (shared
        rows are read-only: a caller that mutated one would have served its change to
        every later reader)."""
        for parse, value, raw in self._parsed.values():
            assert value is None or value == parse(cast(bytes, raw)), \
                "a shared parsed row was mutated (copy a row before changing it)"
        self._parsed.clear()

    def get(self, table: TableId, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table``, or None."""
        with self._swap_lock:
            assert not self._closed
            value = self._families[table].get(key)
        assert value is None or isinstance(value, bytes)
        return value

    def get_many(self, table: TableId, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` in ``table`` (None where absent), in one RocksDB
        multi-get: the old rows of a batch's changes, read once per table."""
        if not keys:
            return []
        with self._swap_lock:
            assert not self._closed
            found = self._families[table].get(cast("list[Any]", keys))
        values = cast("list[bytes | None]", found)
        assert len(values) == len(keys)
        return values

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` rows under ``prefix`` in key order, after ``start_after``.

        One RocksDB iterator yields (key, value) pairs in C; the upper bound keeps it
        under the prefix (half the time of stepping an iterator from Python)."""
        assert limit > 0
        with self._swap_lock:
            assert not self._closed
            seek_to = prefix if start_after is None or start_after < prefix else start_after
            # rocksdict's iterator does not own the upper bound: keep the options alive
            read_options = self._bounded(prefix)
            items: Iterator[tuple[bytes, bytes]] = self._families[table].items(  # raw mode
                from_key=seek_to, read_opt=read_options)  # type: ignore[assignment]
            first = next(items, None)
            if first is None:
                return []
            rows: list[tuple[bytes, bytes]] = [] if first[0] == start_after else [first]
            rows.extend(itertools.islice(items, limit - len(rows)))
            del items, read_options
        assert rows == [] or (rows[0][0].startswith(prefix) and rows[-1][0].startswith(prefix))
        return rows

    @staticmethod
    def _bounded(prefix: bytes) -> ReadOptions:
        """Read options whose iterators stop at the last key under ``prefix``."""
        read_options = ReadOptions()
        upper = _prefix_upper_bound(prefix)
        if upper is not None:
            read_options.set_iterate_upper_bound(upper)
        return read_options

    def iterate(self, table: TableId, prefix: bytes = b"",
                start_after: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every row under ``prefix`` in key order, after ``start_after`` when given.

        Holds the swap lock while it iterates: exhaust or close the iterator.
        """
        with self._swap_lock:
            yield from self._iterate(table, prefix, start_after)

    def _iterate(self, table: TableId, prefix: bytes,
                 start_after: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        assert not self._closed
        read_options = self._bounded(prefix)     # outlives the iterator (see scan)
        it = self._families[table].iter(read_options)
        seek_to = prefix if start_after is None or start_after < prefix else start_after
        it.seek(seek_to)
        if start_after is not None and it.valid() and it.key() == start_after:
            it.next()
        while it.valid():
            key = it.key()
            assert key.startswith(prefix)
            yield key, it.value()
            it.next()

    def new_batch(self) -> WriteBatch:
        """An empty write batch for this store."""
        return WriteBatch(raw_mode=True)

    def batch_put(self, batch: WriteBatch, table: TableId, key: bytes, value: bytes) -> None:
        """Adds a put of ``table[key] = value`` to ``batch``."""
        batch.put(key, value, self._handles[table])

    def batch_ops(self, batch: WriteBatch, ops: Iterable[om_pb2.TableOp]) -> set[TableId]:
        """Adds every put and delete of ``ops`` to ``batch``, in order; the tables they
        touch. Apply's loop over a batch's rows, on every node: one method call and a
        few attribute reads per row."""
        handles = self._handles
        touched: set[TableId] = set()
        for op in ops:
            table = op.table
            touched.add(table)
            if op.delete:
                batch.delete(op.key, handles[table])
            else:
                batch.put(op.key, op.value, handles[table])
        return touched

    def batch_entries(self, batch: WriteBatch, table: TableId,
                      entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Adds a put of each (key, value) of ``entries`` to ``batch``, a delete where the
        value is None, in order."""
        handle = self._handles[table]
        for key, value in entries:
            if value is None:
                batch.delete(key, handle)
            else:
                batch.put(key, value, handle)

    def batch_delete(self, batch: WriteBatch, table: TableId, key: bytes) -> None:
        """Adds a delete of ``table[key]`` to ``batch``."""
        batch.delete(key, self._handles[table])

    def write(self, batch: WriteBatch) -> None:
        """Writes ``batch`` atomically: all its rows, across tables, or none."""
        with self._swap_lock:
            assert not self._closed
            assert not self.read_only
            self._db.write(batch, self._write_options)
            self._forget_parsed()

    def transaction_info(self) -> om_pb2.TransactionInfo:
        """The applied position and managed index, as last written by apply."""
        raw = self.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
        if raw is None:
            return om_pb2.TransactionInfo()
        return om_pb2.TransactionInfo.FromString(raw)

    def checkpoint(self, destination: Path) -> None:
        """Writes a consistent copy of the database (hard links) to ``destination``."""
        assert not destination.exists()
        with self._swap_lock:
            Checkpoint(self._db).create_checkpoint(str(destination))

    def replace_with(self, checkpoint: Path) -> None:
        """Replaces the whole database by ``checkpoint`` (a snapshot install).

        The old files are removed only once the new ones are in place and open.
        """
        assert checkpoint.is_dir()
        with self._swap_lock:
            self.close()
            retired = self.path.with_name(self.path.name + ".retired")
            shutil.rmtree(retired, ignore_errors=True)
            self.path.rename(retired)
            checkpoint.rename(self.path)
            self._open()
            shutil.rmtree(retired, ignore_errors=True)

    def digests(self) -> dict[str, str]:
        """A SHA-256 per table over its rows in key order (replica comparison)."""
        result: dict[str, str] = {}
        for table, name in tables.TABLE_NAMES.items():
            digest = hashlib.sha256()
            for key, value in self.iterate(table):
                digest.update(len(key).to_bytes(4, "big") + key)
                digest.update(len(value).to_bytes(4, "big") + value)
            result[name] = digest.hexdigest()
        return result

    def estimate_rows(self) -> int:
        """RocksDB's estimate of the rows in all tables (cheap; 0 when it has none)."""
        total = 0
        for family in self._families.values():
            value = family.property_int_value("rocksdb.estimate-num-keys")
            total += int(value or 0)
        return total

    def count(self, table: TableId) -> int:
        """The number of rows in ``table``."""
        return sum(1 for _ in self.iterate(table))

    def close(self) -> None:
        """Flushes and closes the database; the store is unusable afterwards."""
        if self._closed:
            return
        with self._swap_lock:
            self._closed = True
            # Column-family views keep the database open: drop them first, or the
            # LOCK file stays held and the store cannot be reopened in-process.
            self._families = {}
            self._handles = {}
            self._db.close()

    @staticmethod
    def destroy(path: Path) -> None:
        """Removes a closed store's files."""
        shutil.rmtree(path, ignore_errors=True)
