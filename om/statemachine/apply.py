"""StateMachine.apply: writes a committed entry's batches, deterministically, atomically.

Given the same sequence of (position, entry bytes), every node ends with
byte-identical tables: apply uses nothing but the batches, the rows it adds
quota deltas to, and the stored applied position and term (the idempotence
and staleness checks).

An entry carries one batch (``B``, ``V``) or one per slice (``M``: the sub-batches
the Raft process merged, ``om.protocol.merged_entry``). All of an entry's batches
go into ONE RocksDB write batch with the entry's position: a crash leaves the
whole entry applied or none of it, and a replay of its position is skipped
whole. Each batch keeps the staleness rule of its own term (a deposed leader's
batch is skipped, the others of the entry apply); the rest is written as the one
batch their concatenation parses to (``om.executor.batcher``: repeated fields in
order), so the quota deltas of all of them are summed per row before the row is
read, and no batch's charge hides another's.

Order inside the write batch: table ops, then quota deltas, then retry-cache
rows, then expiries (each kind over the entry's batches in order), then the
transaction info, then the digests of all of them (``om.statemachine.digests``:
each row change is reported as it is added). A row is never both put and
quota-adjusted within one entry (the lock plans guarantee it: a request that
puts a volume or bucket row holds its write lock until its entry applied, which
excludes the requests that charge it, in any batch in flight).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from rocksdict import WriteBatch

from om.executor.admin import upgrade
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
    # per batch of the entry, in order: applied, or skipped as a stale term's (empty:
    # the position was applied before, or the entry carries no batch)
    batches_applied: tuple[bool, ...] = ()


def writes_prepared_marker(ops: list[om_pb2.TableOp]) -> bool:
    """Whether ``ops`` put the prepared marker; asserts they touch no other
    transactionInfoTable row than the upgrade rows (apply writes the position)."""
    marker = False
    for op in ops:
        if op.table == om_pb2.TRANSACTION_INFO:
            assert op.key in tables.UPGRADE_KEYS, "only apply writes transaction info"
            marker = marker or (op.key == tables.PREPARED_KEY and not op.delete)
    return marker


def written_layout_version(ops: Iterable[om_pb2.TableOp]) -> int | None:
    """The layout version ``ops`` put in ``#LAYOUTVERSION`` (FinalizeUpgrade), or None.
    Nothing deletes the row: a store without it runs at the software's layout."""
    version = None
    for op in ops:
        if op.table == om_pb2.TRANSACTION_INFO and op.key == tables.LAYOUT_VERSION_KEY:
            assert not op.delete, "the layout version row is never deleted"
            version = om_pb2.LayoutVersion.FromString(op.value).version
    return version


class Stamped(Protocol):
    """What a state machine keeps of the entries it applied (both flows')."""

    term: int
    managed_index: int
    timestamp_ms: int


def advance(machine: Stamped,
            message: om_pb2.PersistDbBatch | om_pb2.ReplicatedRequest) -> bool:
    """Whether ``message`` applies (its term is not below the highest applied); if so,
    moves ``machine``'s term, managed index and time up to it. The staleness rule of
    both flows' apply, in one place."""
    if message.term < machine.term:
        return False
    machine.term = message.term
    machine.managed_index = max(machine.managed_index, message.managed_index)
    machine.timestamp_ms = max(machine.timestamp_ms, message.timestamp_ms)
    return True


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

    def __init__(self, store: Store, shard: int = log_entry.SHARD) -> None:
        """``shard``: the shard whose slices this store applies (docs/SHARDS.md; 0, the
        only one, until the shard processes exist)."""
        self.store = store
        self.shard = shard
        self.digests = Digests.attach(store)
        self._lock = threading.RLock()
        self.applied_index = 0
        self.managed_index = 0
        self.term = 0
        self.timestamp_ms = 0
        self.snapshot_change_position = 0
        # the MLV of the applied state (om/executor/admin/upgrade.py), kept here so that
        # the leader reads no row per batch to pick the entry format
        self.layout_version = upgrade.SOFTWARE_LAYOUT_VERSION
        self.reload()

    def apply(self, position: int, *batches: om_pb2.PersistDbBatch) -> ApplyResult:
        """Applies the ``batches`` of the entry committed at log ``position``, in one
        write batch with the position.

        Skips them all (nothing written) when the position was already applied
        (replay); skips a batch from a term older than one already applied (a
        deposed leader's, committed after its successor's), the position still
        advancing. ``applied`` is True only when every batch applied.
        """
        assert position > 0
        assert batches, "an entry carries at least one batch"
        with self._lock:
            if position <= self.applied_index:
                return ApplyResult(position, False, self.managed_index)
            flags = tuple(advance(self, batch) for batch in batches)   # in log order
            fresh = [batch for batch, applies in zip(batches, flags, strict=True) if applies]
            snapshots_changed = prepared = False
            with self.digests.changes() as digest:
                write = self.store.new_batch()
                if fresh:
                    snapshots_changed, prepared = self._add_ops(write, fresh, digest)
                self.applied_index = position
                if snapshots_changed:
                    self.snapshot_change_position = position
                self._put_transaction_info(write, digest)
                digest.write(write)      # the rows and their digests: one write batch
            return ApplyResult(position, all(flags), self.managed_index,
                               snapshots_changed=snapshots_changed, prepared=prepared,
                               batches_applied=flags)

    def pass_position(self, position: int) -> None:
        """The log passed ``position`` with nothing for this shard (docs/SHARDS.md, step
        2): the applied position moves in memory and nothing is written, so the stored
        one stays that of the last entry that carried a slice for this shard, and a
        restart replays from there, skipping nothing of its own. A position already
        applied (a replay) changes nothing."""
        assert position > 0
        with self._lock:
            self.applied_index = max(self.applied_index, position)

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
                self._add_ops(write, [batch], digest)
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
        """Applies one committed leader-flow log entry (``B``, ``V`` or ``M``)."""
        assert not log_entry.is_request(entry), "an old-flow entry on a leader node"
        return self.apply(position, *log_entry.decode_batches(entry, self.shard))

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
        self.layout_version = upgrade.metadata_layout_version(self.store)

    def _add_ops(self, write: WriteBatch, batches: list[om_pb2.PersistDbBatch],
                 digest: DigestChanges) -> tuple[bool, bool]:
        """Adds the batches' rows to ``write`` as the one batch their concatenation is,
        each change reported to ``digest``; whether any changes snapshotInfoTable, and
        whether they put the prepared marker. A put of ``#LAYOUTVERSION`` (FinalizeUpgrade)
        moves ``layout_version`` with it."""
        store = self.store
        tables_written: set[int] = set()
        for batch in batches:
            tables_written |= store.batch_ops(write, batch.ops)
            digest.ops(batch.ops)
        snapshots_changed = om_pb2.SNAPSHOT_INFO in tables_written
        prepared = False
        if om_pb2.TRANSACTION_INFO in tables_written:
            prepared = any(writes_prepared_marker(list(batch.ops)) for batch in batches)
            layout = written_layout_version(op for batch in batches for op in batch.ops)
            self.layout_version = self.layout_version if layout is None else layout
        for delta in merged_deltas(d for batch in batches for d in batch.quota_deltas):
            raw = store.get(delta.table, delta.key)
            updated = None if raw is None else add_usage(raw, delta)
            if updated is not None:
                store.batch_put(write, delta.table, delta.key, updated)
                digest.put(delta.table, delta.key, updated, old=raw)
        for batch in batches:
            self._add_reply_rows(write, batch, digest)
        for batch in batches:
            self._add_replies(write, batch, digest)
        for batch in batches:
            for op in batch.retry_expiry:
                assert op.delete
                assert op.table in (om_pb2.CLIENT_REQUEST_REPLY, om_pb2.CLIENT_REQUEST_EXPIRY)
                store.batch_delete(write, op.table, op.key)
                digest.delete(op.table, op.key)
        return snapshots_changed, prepared

    def _add_reply_rows(self, write: WriteBatch, batch: om_pb2.PersistDbBatch,
                        digest: DigestChanges) -> None:
        for reply_row in batch.reply_rows:
            self.store.batch_put(write, om_pb2.CLIENT_REQUEST_REPLY, reply_row.key,
                                 reply_row.row)
            self.store.batch_put(write, om_pb2.CLIENT_REQUEST_EXPIRY, reply_row.expiry_key, b"")
            digest.put(om_pb2.CLIENT_REQUEST_REPLY, reply_row.key, reply_row.row)
            digest.put(om_pb2.CLIENT_REQUEST_EXPIRY, reply_row.expiry_key, b"")

    def _add_replies(self, write: WriteBatch, batch: om_pb2.PersistDbBatch,
                     digest: DigestChanges) -> None:
        """The reply rows of entries an earlier version wrote (``replies``)."""
        for reply in batch.replies:
            row = reply.SerializeToString(deterministic=True)
            reply_key = tables.reply_key(reply.client_id, reply.call_id)
            expiry_key = tables.expiry_key(reply.timestamp_ms, reply.client_id, reply.call_id)
            self.store.batch_put(write, om_pb2.CLIENT_REQUEST_REPLY, reply_key, row)
            self.store.batch_put(write, om_pb2.CLIENT_REQUEST_EXPIRY, expiry_key, b"")
            digest.put(om_pb2.CLIENT_REQUEST_REPLY, reply_key, row)
            digest.put(om_pb2.CLIENT_REQUEST_EXPIRY, expiry_key, b"")


def merged_deltas(deltas: Iterable[om_pb2.QuotaDelta]) -> list[om_pb2.QuotaDelta]:
    """Deltas summed per (table, key, object id), in first-seen order."""
    merged: dict[tuple[int, bytes, int], om_pb2.QuotaDelta] = {}
    for delta in deltas:
        assert delta.table in (om_pb2.VOLUME, om_pb2.BUCKET)
        slot = (delta.table, delta.key, delta.object_id)
        if slot in merged:
            merged[slot].bytes_delta += delta.bytes_delta
            merged[slot].namespace_delta += delta.namespace_delta
        else:
            merged[slot] = om_pb2.QuotaDelta()
            merged[slot].CopyFrom(delta)
    return list(merged.values())

