"""The store's memory stays within its budget however much is written or read.

RocksDB's defaults give every column family its own 64 MiB memtables and 8 MiB
block cache; the store shares one budget across tables (``StoreMemory``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from om.config import ConfigError, Limits, ServerConfig
from om.protocol import om_pb2
from om.schema.tables import TableId
from om.statemachine.store import MIB, Store, StoreMemory

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
