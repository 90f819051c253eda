"""The old flow's double buffer (Ozone's OzoneManagerDoubleBuffer).

Apply hands each executed transaction's row writes to ``add``; a background
thread swaps the current buffer with the ready one and writes everything in
the ready buffer to RocksDB in one write batch, with the transaction info of
the last transaction in it, then evicts those rows from the write cache.

Invariants:

* Flushes write transactions in position order and each flush is one atomic
  write batch, so the persisted applied position is always a prefix of what
  was applied: it never passes a hole.
* At most ``unflushed_max`` transactions wait (Ozone's
  ``ozone.om.unflushed.transaction.max.count``); ``add`` blocks beyond that,
  which stalls apply, as Ozone's ``acquireUnFlushedTransactions`` does.
* A failed flush stops the process (fail-stop), as in Ozone.
* Each flush keeps the store's digests (``om.statemachine.digests``) in the same
  write batch: the digests describe what RocksDB holds, as in the leader flow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from om.protocol import om_pb2
from om.schema import tables
from om.statemachine.digests import Digests
from om.statemachine.store import Store
from om.statemachine.write_cache import Row, WriteCache

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transaction:
    """One applied request's row writes (None: delete) and the positions after it."""

    position: int
    writes: list[tuple[Row, bytes | None]]
    info: om_pb2.TransactionInfo


class DoubleBuffer:
    """Flushes applied transactions to RocksDB in the background, in order."""

    def __init__(self, store: Store, cache: WriteCache, unflushed_max: int,
                 flushed_position: int, fail_stop: Callable[[], None]) -> None:
        assert unflushed_max > 0
        assert flushed_position >= 0
        self._store = store
        self._cache = cache
        self._unflushed_max = unflushed_max
        self._fail_stop = fail_stop
        self._current: list[Transaction] = []
        self._condition = threading.Condition()
        self._stopping = False
        self.flushed_position = flushed_position
        self.flushes = 0
        self.transactions = 0
        self._thread = threading.Thread(target=self._run, name="double-buffer", daemon=True)
        self._thread.start()

    def add(self, transaction: Transaction) -> None:
        """Queues an applied transaction; blocks while too many are unflushed."""
        with self._condition:
            while len(self._current) >= self._unflushed_max and not self._stopping:
                self._condition.wait()
            assert not self._current or self._current[-1].position < transaction.position
            self._current.append(transaction)
            self._condition.notify_all()

    def flush_all(self, position: int) -> None:
        """Waits until everything up to ``position`` is in RocksDB."""
        with self._condition:
            while self.flushed_position < position:
                assert self._thread.is_alive(), "the double buffer stopped"
                self._condition.wait(timeout=1.0)

    def restart_at(self, position: int) -> None:
        """Continues from ``position`` (the store was replaced by a snapshot)."""
        with self._condition:
            assert not self._current, "quiesce before replacing the store"
            self.flushed_position = position

    @property
    def average_transactions_per_flush(self) -> float:
        """Ozone's avgFlushTransactionsInOneIteration."""
        return self.transactions / self.flushes if self.flushes else 0.0

    def stop(self) -> None:
        """Flushes what is queued, then stops the thread."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the double buffer did not stop"

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._current and not self._stopping:
                    self._condition.wait()
                if not self._current:
                    return
                ready, self._current = self._current, []
                self._condition.notify_all()
            try:
                self._flush(ready)
            except BaseException:
                logger.critical("double buffer flush failed: stopping", exc_info=True)
                self._fail_stop()
                raise
            with self._condition:
                self.flushed_position = ready[-1].position
                self._condition.notify_all()

    def _flush(self, ready: list[Transaction]) -> None:
        store = self._store
        with Digests.attach(store).changes() as digest:
            write = store.new_batch()
            for transaction in ready:
                for (table, key), value in transaction.writes:
                    if value is None:
                        store.batch_delete(write, table, key)
                        digest.delete(table, key)
                    else:
                        store.batch_put(write, table, key, value)
                        digest.put(table, key, value)
            info = ready[-1].info.SerializeToString(deterministic=True)
            store.batch_put(write, om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY, info)
            digest.put(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY, info)
            digest.write(write)
        self._cache.evict([(row, t.position) for t in ready for row, _ in t.writes])
        self.flushes += 1
        self.transactions += len(ready)
