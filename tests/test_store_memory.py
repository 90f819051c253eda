"""The store's memory stays within its budget however much is written or read.

RocksDB's defaults give every column family its own 64 MiB memtables and 8 MiB
block cache; the store shares one budget across tables (``StoreMemory``)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
from rocksdict import Options, Rdict

from om.config import ConfigError, Limits, ServerConfig
from om.protocol import om_pb2
from om.schema.tables import STORE_FAMILIES, TableId
from om.statemachine.store import MIB, READ_ONLY_OPEN_FILES_MAX, Store, StoreMemory

ROW = os.urandom(400)


def _write(store: Store, tables: tuple[TableId, ...], megabytes: int) -> None:
    rows = megabytes * MIB // len(ROW)
    for start in range(0, rows, 1000):
        batch = store.new_batch()
        for i in range(start, min(rows, start + 1000)):
            for table in tables:
                store.batch_put(batch, table, b"/v/b/key-%09d" % i, ROW)
        store.write(batch)


def test_memtables_of_every_table_together_stay_within_the_budget(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", memory=StoreMemory(8 * MIB, 4 * MIB))
    try:
        _write(store, (om_pb2.KEY, om_pb2.OPEN_KEY, om_pb2.DELETED), 24)
        held, _ = store.memory.usage()
        # 72 MiB written: unbounded, each table would hold 24 MiB of memtable; RocksDB
        # flushes once they pass ~90 % of the budget, a flush may still be running
        assert store.memtable_bytes() <= 10 * MIB
        assert held <= 10 * MIB
        assert store.count(om_pb2.KEY) == 24 * MIB // len(ROW)
    finally:
        store.close()


def test_the_block_cache_stays_within_its_capacity_on_a_full_scan(tmp_path: Path) -> None:
    memory = StoreMemory(2 * MIB, 2 * MIB)
    store = Store(tmp_path / "db", memory=memory)
    try:
        _write(store, (om_pb2.KEY,), 12)
        store.close()
        store = Store(tmp_path / "db", memory=memory)
        assert store.count(om_pb2.KEY) == 12 * MIB // len(ROW)
        _, cached = memory.usage()
        assert 0 < cached <= 2 * MIB
    finally:
        store.close()


def test_a_budget_under_one_mib_is_refused() -> None:
    with pytest.raises(ConfigError, match="store_memtable_bytes"):
        ServerConfig(limits=Limits(store_memtable_bytes=1000)).validate()


def _open_table_files(directory: Path) -> int:
    """The table files of ``directory`` this process holds open (RocksDB may hold
    two descriptors of one file)."""
    return len({f.path for f in psutil.Process().open_files()
                if f.path.startswith(str(directory)) and f.path.endswith(".sst")})


def test_a_store_read_through_keeps_a_bounded_number_of_table_files_open(
        tmp_path: Path) -> None:
    """RocksDB's default keeps every table file open for the store's life: descriptors
    grew with the database and with each OM snapshot's checkpoint opened for reading
    (a soak saw 600-740 a node). A read-only store keeps READ_ONLY_OPEN_FILES_MAX."""
    families = {name: Options(raw_mode=True) for name in STORE_FAMILIES.values()}
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_disable_auto_compactions(True)
    db = Rdict(str(tmp_path / "db"), options, column_families=families)
    keys = db.get_column_family(STORE_FAMILIES[om_pb2.KEY])
    files = READ_ONLY_OPEN_FILES_MAX * 4
    for i in range(files):        # one flush each: one table file each
        keys[b"/v/b/key-%04d" % i] = ROW
        keys.flush()
    del keys
    db.close()
    del db
    assert len(list((tmp_path / "db").glob("*.sst"))) >= files
    store = Store(tmp_path / "db", read_only=True)
    try:
        for i in range(files):
            assert store.get(om_pb2.KEY, b"/v/b/key-%04d" % i) == ROW
        assert _open_table_files(tmp_path / "db") <= READ_ONLY_OPEN_FILES_MAX
    finally:
        store.close()
