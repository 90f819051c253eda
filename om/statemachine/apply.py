"""StateMachine.apply: writes a committed batch, deterministically, atomically.

Given the same sequence of (position, batch bytes), every node ends with
byte-identical tables: apply uses nothing but the batch, the rows it adds
quota deltas to, and the stored applied position and term (the idempotence
and staleness checks).

Order inside the write batch: table ops, then quota deltas, then retry-cache
rows, then expiries, then the transaction info, then the digests of all of them
(``om.statemachine.digests``: each row change is reported as it is added). A row
is never both put and quota-adjusted within one batch (the lock plans guarantee it: a request that
puts a volume or bucket row holds its write lock, which excludes the requests
that charge it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rocksdict import WriteBatch

from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.digests import DigestChanges, Digests
from om.statemachine.store import Store


@dataclass(frozen=True)
class ApplyResult:
    """What apply did with one entry."""

    position: int
    applied: bool          # False: already applied (replay), or a stale term's batch
    managed_index: int
    response: bytes = b""  # the old flow's response, executed in apply
    # the entry changed snapshotInfoTable: the node checkpoints or frees OM snapshots
    # right after it (om/statemachine/om_snapshot_checkpoints.py)
    snapshots_changed: bool = False
    prepared: bool = False  # the entry wrote the prepared marker (om/executor/admin/upgrade.py)


def writes_prepared_marker(ops: list[om_pb2.TableOp]) -> bool:
    """Whether ``ops`` put the prepared marker; asserts they touch no other
    transactionInfoTable row than the upgrade rows (apply writes the position)."""
    marker = False
    for op in ops:
        if op.table == om_pb2.TRANSACTION_INFO:
            assert op.key in tables.UPGRADE_KEYS, "only apply writes transaction info"
            marker = marker or (op.key == tables.PREPARED_KEY and not op.delete)
    return marker


def add_usage(raw: bytes, delta: om_pb2.QuotaDelta) -> bytes | None:
    """The row with the delta added, or None when the row is another object's."""
    message: om_pb2.VolumeInfo | om_pb2.BucketInfo
    if delta.table == om_pb2.VOLUME:
        message = om_pb2.VolumeInfo.FromString(raw)
    else:
        message = om_pb2.BucketInfo.FromString(raw)
    if message.object_id != delta.object_id:
        return None
    if isinstance(message, om_pb2.BucketInfo):
        message.used_bytes = message.used_bytes + delta.bytes_delta
    assert message.used_namespace + delta.namespace_delta >= 0, "namespace usage below zero"
    message.used_namespace = message.used_namespace + delta.namespace_delta
    return message.SerializeToString(deterministic=True)


class StateMachine:
    """Applies committed batches to one node's store.

    ``apply`` may be called from the Raft thread while the event loop reads
    the store; RocksDB makes each write batch atomic for readers, and a lock
    keeps two applies (replay and live) from interleaving.
    """

    executes_requests = False   # applies batches of changes only (the leader flow's)

    def __init__(self, store: Store) -> None:
        self.store = store
        self.digests = Digests.attach(store)
        self._lock = threading.RLock()
        self.applied_index = 0
        self.managed_index = 0
        self.term = 0
        self.timestamp_ms = 0
        self.snapshot_change_position = 0
        self.reload()

    def apply(self, position: int, batch: om_pb2.PersistDbBatch) -> ApplyResult:
        """Applies ``batch`` committed at log ``position``.

        Skips it (recording only the position) when the position was already
        applied (replay) or the batch comes from a term older than one already
        applied (a deposed leader's batch, committed after its successor's).
        """
        assert position > 0
        with self._lock:
            if position <= self.applied_index:
                return ApplyResult(position, False, self.managed_index)
            stale = batch.term < self.term
            snapshots_changed = prepared = False
            with self.digests.changes() as digest:
                write = self.store.new_batch()
                if not stale:
                    snapshots_changed, prepared = self._add_ops(write, batch, digest)
                    self.managed_index = max(self.managed_index, batch.managed_index)
                    self.term = batch.term
                    self.timestamp_ms = max(self.timestamp_ms, batch.timestamp_ms)
                self.applied_index = position
                if snapshots_changed:
                    self.snapshot_change_position = position
                self._put_transaction_info(write, digest)
                digest.write(write)      # the rows and their digests: one write batch
            return ApplyResult(position, not stale, self.managed_index,
                               snapshots_changed=snapshots_changed, prepared=prepared)

    def seed(self, batch: om_pb2.PersistDbBatch) -> None:
        """Writes ``batch`` as state that precedes the Raft log (``om freon generate``).

        The same write as ``apply`` (rows, merged quota deltas, retry rows and the
        transaction info in one RocksDB write batch), except that the applied
        position and term stay 0: a fresh Raft log's first entry is position 1,
        so every entry a cluster later commits over a seeded store is applied, not
        skipped as a replay. The managed index and time move up as in ``apply``,
        so a leader continues above the seed's ids. Seeding a store that applied
        a log entry would hide those entries' positions, so it is refused.
        """
        with self._lock:
            assert self.applied_index == 0, "seed only a store no log entry was applied to"
            assert self.term == 0, "seed only a store no log entry was applied to"
            assert batch.term == 0, "a seed batch belongs to no term"
            with self.digests.changes() as digest:
                write = self.store.new_batch()
                self._add_ops(write, batch, digest)
                self.managed_index = max(self.managed_index, batch.managed_index)
                self.timestamp_ms = max(self.timestamp_ms, batch.timestamp_ms)
                self._put_transaction_info(write, digest)
                digest.write(write)

    def _put_transaction_info(self, write: WriteBatch, digest: DigestChanges) -> None:
        info = om_pb2.TransactionInfo(term=self.term, applied_index=self.applied_index,
                                      managed_index=self.managed_index,
                                      timestamp_ms=self.timestamp_ms,
                                      snapshot_change_position=self.snapshot_change_position)
        row = info.SerializeToString(deterministic=True)
        self.store.batch_put(write, om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY, row)
        digest.put(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY, row)

    def apply_entry(self, position: int, entry: bytes) -> ApplyResult:
        """Applies one committed leader-flow log entry."""
        message = log_entry.decode(entry)
        assert isinstance(message, om_pb2.PersistDbBatch), "an old-flow entry on a leader node"
        return self.apply(position, message)

    def quiesce(self) -> None:
        """Nothing to wait for: apply writes RocksDB synchronously."""

    @property
    def view(self) -> Store:
        """What readers see: the store itself (this flow has no write cache)."""
        return self.store

    def metrics(self) -> dict[str, float]:
        """No gauges of its own: the store's and the flow's cover it."""
        return {}

    def close(self) -> None:
        """Nothing runs behind apply."""

    def applying(self) -> threading.RLock:
        """The lock apply holds: take it to change the store under apply's feet."""
        return self._lock

    def reload(self) -> None:
        """Re-reads the positions from the store (after a snapshot was installed).

        The caller holds ``applying()`` or is the constructor."""
        info = self.store.transaction_info()
        self.applied_index = info.applied_index
        self.managed_index = info.managed_index
        self.term = info.term
        self.timestamp_ms = info.timestamp_ms
        self.snapshot_change_position = info.snapshot_change_position

    def _add_ops(self, write: WriteBatch, batch: om_pb2.PersistDbBatch,
                 digest: DigestChanges) -> tuple[bool, bool]:
        """Adds the batch's rows to ``write``, each change reported to ``digest``; whether
        any changes snapshotInfoTable, and whether they put the prepared marker."""
        store = self.store
        tables_written = store.batch_ops(write, batch.ops)
        digest.ops(batch.ops)
        snapshots_changed = om_pb2.SNAPSHOT_INFO in tables_written
        prepared = (om_pb2.TRANSACTION_INFO in tables_written
                    and writes_prepared_marker(list(batch.ops)))
        for delta in merged_deltas(batch):
            raw = store.get(delta.table, delta.key)
            updated = None if raw is None else add_usage(raw, delta)
            if updated is not None:
                store.batch_put(write, delta.table, delta.key, updated)
                digest.put(delta.table, delta.key, updated, old=raw)
        for reply_row in batch.reply_rows:
            store.batch_put(write, om_pb2.CLIENT_REQUEST_REPLY, reply_row.key, reply_row.row)
            store.batch_put(write, om_pb2.CLIENT_REQUEST_EXPIRY, reply_row.expiry_key, b"")
            digest.put(om_pb2.CLIENT_REQUEST_REPLY, reply_row.key, reply_row.row)
            digest.put(om_pb2.CLIENT_REQUEST_EXPIRY, reply_row.expiry_key, b"")
        for reply in batch.replies:     # entries an earlier version wrote
            row = reply.SerializeToString(deterministic=True)
            reply_key = tables.reply_key(reply.client_id, reply.call_id)
            expiry_key = tables.expiry_key(reply.timestamp_ms, reply.client_id, reply.call_id)
            store.batch_put(write, om_pb2.CLIENT_REQUEST_REPLY, reply_key, row)
            store.batch_put(write, om_pb2.CLIENT_REQUEST_EXPIRY, expiry_key, b"")
            digest.put(om_pb2.CLIENT_REQUEST_REPLY, reply_key, row)
            digest.put(om_pb2.CLIENT_REQUEST_EXPIRY, expiry_key, b"")
        for op in batch.retry_expiry:
            assert op.delete
            assert op.table in (om_pb2.CLIENT_REQUEST_REPLY, om_pb2.CLIENT_REQUEST_EXPIRY)
            store.batch_delete(write, op.table, op.key)
            digest.delete(op.table, op.key)
        return snapshots_changed, prepared



def merged_deltas(batch: om_pb2.PersistDbBatch) -> list[om_pb2.QuotaDelta]:
    """Deltas summed per (table, key, object id), in first-seen order."""
    merged: dict[tuple[int, bytes, int], om_pb2.QuotaDelta] = {}
    for delta in batch.quota_deltas:
        assert delta.table in (om_pb2.VOLUME, om_pb2.BUCKET)
        slot = (delta.table, delta.key, delta.object_id)
        if slot in merged:
            merged[slot].bytes_delta += delta.bytes_delta
            merged[slot].namespace_delta += delta.namespace_delta
        else:
            merged[slot] = om_pb2.QuotaDelta()
            merged[slot].CopyFrom(delta)
    return list(merged.values())

