"""Paced scans of real RocksDB stores: the rate limit, the throttled view."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.integrity import scan
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.store import Store
from tests.integrity.populate import VOLUME, populate


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")
    yield a, b
    a.close()
    b.close()


# ------------------------------------------------------------ the rate limit ---

class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_rate_limit_paces_rows_and_bytes() -> None:
    fake = FakeTime()
    limit = scan.RateLimit(rows_per_s=100, clock=fake.clock, sleep=fake.sleep)
    for _ in range(1000):
        limit.charge(1, 10)
    assert fake.now - 100 == pytest.approx(10, abs=0.011)
    assert all(s >= 0.01 for s in fake.sleeps)        # short waits are batched
    assert len(fake.sleeps) < 1000
    fake = FakeTime()
    limit = scan.RateLimit(rows_per_s=1000, bytes_per_s=1000, clock=fake.clock, sleep=fake.sleep)
    for _ in range(50):
        limit.charge(1, 100)
    assert fake.now - 100 == pytest.approx(5, abs=0.011)   # bytes bind, not rows


def test_a_scan_keeps_to_its_rate(stores: tuple[Store, Store]) -> None:
    a, _ = stores
    populate(a, keys=40)
    rows = sum(a.count(table) for table in tables.TABLE_NAMES)
    rate = rows / 0.2                                   # the scan must take 0.2 s
    started = time.monotonic()
    limit = scan.RateLimit(rows_per_s=rate)
    read = [row for table in tables.TABLE_NAMES for row in scan.table_rows(a, table, limit)]
    elapsed = time.monotonic() - started
    assert 0.18 <= elapsed < 2.0
    assert len(read) == rows


def test_a_throttled_view_charges_what_it_reads(stores: tuple[Store, Store]) -> None:
    a, _ = stores
    populate(a, keys=4)
    fake = FakeTime()
    limit = scan.RateLimit(rows_per_s=1e9, clock=fake.clock, sleep=fake.sleep)
    view = scan.ThrottledView(a, limit)
    assert view.get(om_pb2.VOLUME, tables.volume_key(VOLUME)) is not None
    assert len(view.scan(om_pb2.KEY, b"", None, 100)) == 3   # key000 was deleted
    assert limit.rows == 4
    assert limit.bytes > 0
