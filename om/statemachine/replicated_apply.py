"""Ozone's old flow, for side-by-side measurement: execute every request in apply.

Each write is its own log entry (a ``ReplicatedRequest`` carrying the values
the leader fixed before replication: time and managed index, as Ozone's
``preExecute`` fixes modification time and the open key's client id). Every
node runs the *same* request handler as the leader flow inside apply,
serially, against the write cache (``write_cache.py``); the double buffer
(``double_buffer.py``) flushes the cached changes to RocksDB in background
batches, tracking the flushed position, as ``OzoneManagerDoubleBuffer`` does.

The retry cache is filled at apply on every node, as Ratis's is, in memory and
also in clientRequestReplyTable and its expiry index, the rows the leader flow
writes (docs/FLOW_SWITCH.md step 1): so a retry finds its answer after a
restart too, and whichever flow takes a retry of a request the other accepted
finds it. Unlike the leader flow, a failed request's answer is stored as well
(Ratis caches every applied entry's reply). Intended differences from the
leader flow's tables: those failed requests' reply rows, and transactionInfoTable
counts different log positions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping

from om.executor.admin import upgrade
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, Limits, NoReservations
from om.executor.registry import dispatch
from om.protocol import om_pb2
from om.schema import tables
from om.schema.fingerprint import fingerprint
from om.schema.ids import RetryKey
from om.schema.read_view import ReadView
from om.schema.recent_replies import RecentReplies
from om.statemachine import log_entry
from om.statemachine.apply import (
    ApplyResult,
    add_usage,
    advance,
    merged_deltas,
    writes_prepared_marker,
    written_layout_version,
)
from om.statemachine.double_buffer import DoubleBuffer, Transaction
from om.statemachine.store import Store
from om.statemachine.write_cache import CacheView, Row, WriteCache


class MemoryRetryCache:
    """Ratis-style retry cache: in memory, bounded, expiring; thread-safe."""

    def __init__(self, expiry_ms: int, entries_max: int) -> None:
        assert expiry_ms > 0
        self._expiry_ms = expiry_ms
        self._entries = RecentReplies(entries_max)
        self._lock = threading.Lock()

    def remember(self, key: RetryKey, response: bytes, timestamp_ms: int,
                 fingerprint: bytes) -> None:
        with self._lock:
            self._entries.put(key, (response, timestamp_ms, fingerprint))

    def lookup(self, key: RetryKey, now_ms: int) -> tuple[bytes, bytes] | None:
        """The response and request fingerprint of an unexpired entry."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or now_ms - entry[1] > self._expiry_ms:
            return None
        return entry[0], entry[2]

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """The estimated bytes of the replies held (``om.schema.recent_replies``)."""
        return self._entries.bytes


def reply_rows(view: ReadView, reply: om_pb2.ClientRequestReply
               ) -> list[tuple[Row, bytes | None]]:
    """The reply row and its expiry-index row (``om/gatekeeper/retry_cache.py``), as the
    leader flow's apply writes them, so that whichever flow takes a retry finds the
    answer; a reply row already there for the key loses its old index row first (no
    orphan for the auditor)."""
    key = tables.reply_key(reply.client_id, reply.call_id)
    rows: list[tuple[Row, bytes | None]] = []
    raw = view.get(om_pb2.CLIENT_REQUEST_REPLY, key)
    if raw is not None:
        old = om_pb2.ClientRequestReply.FromString(raw)
        rows.append(((om_pb2.CLIENT_REQUEST_EXPIRY,
                      tables.expiry_key(old.timestamp_ms, old.client_id, old.call_id)), None))
    rows.append(((om_pb2.CLIENT_REQUEST_REPLY, key), reply.SerializeToString(deterministic=True)))
    rows.append(((om_pb2.CLIENT_REQUEST_EXPIRY,
                  tables.expiry_key(reply.timestamp_ms, reply.client_id, reply.call_id)), b""))
    return rows


class ReplicatedStateMachine:
    """Applies old-flow entries: executes each request, caches, flushes behind."""

    # executes requests in apply, and applies batches too: a leader service over it
    # runs both flows, per write type (docs/FLOW_SWITCH.md)
    executes_requests = True
    shard = log_entry.SHARD   # the old flow runs at S = 1 only (config._validate_shards)

    def __init__(self, store: Store, limits: Limits, retry: MemoryRetryCache,
                 unflushed_max: int, fail_stop: Callable[[], None],
                 groups: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.store = store
        # The configured group mapping (``[acl] group_mapping_file``): a create gives
        # the creator's primary group its default ACL, here in apply as on the leader.
        self.groups: Mapping[str, tuple[str, ...]] = groups or {}
        self.cache = WriteCache()
        self.view = CacheView(self.cache, store)
        self.retry = retry
        self.limits = limits
        self._lock = threading.RLock()
        self.applied_index = 0
        self.managed_index = 0
        self.term = 0
        self.timestamp_ms = 0
        self.snapshot_change_position = 0
        self.layout_version = upgrade.SOFTWARE_LAYOUT_VERSION   # as StateMachine's
        self._read_positions()
        self.double_buffer = DoubleBuffer(store, self.cache, unflushed_max,
                                          self.applied_index, fail_stop)

    def apply_entry(self, position: int, entry: bytes) -> ApplyResult:
        """Executes the entry's request, or writes its batches, at ``position``: one
        transaction of the double buffer either way, so the entry is whole or absent
        after a crash. A message of a term below the highest applied is skipped (a
        deposed leader's), the position still advancing."""
        assert position > 0
        with self._lock:
            if position <= self.applied_index:
                return ApplyResult(position, False, self.managed_index)
            writes: list[tuple[Row, bytes | None]] = []
            response = b""
            prepared = False
            if log_entry.is_request(entry):
                request = log_entry.decode(entry)
                assert isinstance(request, om_pb2.ReplicatedRequest)
                flags: tuple[bool, ...] = (advance(self, request),)
                if flags[0]:
                    writes, response, prepared = self._execute(position, request)
            else:
                flags, writes, prepared = self._apply_batches(
                    position, log_entry.decode_batches(entry))
            snapshots_changed = any(table == om_pb2.SNAPSHOT_INFO for (table, _), _ in writes)
            self.applied_index = position
            if snapshots_changed:
                self.snapshot_change_position = position
            self.double_buffer.add(Transaction(position, writes, self._info()))
            return ApplyResult(position, all(flags), self.managed_index, response,
                               snapshots_changed, prepared, flags)

    def _apply_batches(self, position: int, batches: list[om_pb2.PersistDbBatch]
                       ) -> tuple[tuple[bool, ...], list[tuple[Row, bytes | None]], bool]:
        """Each batch of a ``B``, ``V`` or ``M`` entry in order, each after its term's
        check: whether each applied, the rows of those that did, and whether they
        put the prepared marker. Each batch reads the cache the ones before it wrote,
        so their quota deltas add up."""
        flags: list[bool] = []
        writes: list[tuple[Row, bytes | None]] = []
        prepared = False
        for batch in batches:
            flags.append(advance(self, batch))
            if flags[-1]:
                rows, marker = self._apply_batch(position, batch)
                writes.extend(rows)
                prepared = prepared or marker
        return tuple(flags), writes, prepared

    def _execute(self, position: int, message: om_pb2.ReplicatedRequest
                 ) -> tuple[list[tuple[Row, bytes | None]], bytes, bool]:
        request = message.request
        ctx = ExecContext(request.user, message.managed_index, message.timestamp_ms,
                          NoReservations(), self.limits, self.groups, tuple(request.groups))
        recorder = ChangeRecorder()
        response = dispatch(request, self.view, recorder, ctx).SerializeToString()
        writes: list[tuple[Row, bytes | None]] = []
        for op in recorder.ops:
            writes.append(((op.table, op.key), None if op.delete else op.value))
            self.cache.put(op.table, op.key, None if op.delete else op.value, position)
        for change in recorder.quota:
            raw = self.view.get(change.table, change.key)
            delta = om_pb2.QuotaDelta(table=change.table, key=change.key,
                                      object_id=change.object_id,
                                      bytes_delta=change.bytes_delta,
                                      namespace_delta=change.namespace_delta)
            updated = None if raw is None else add_usage(raw, delta)
            if updated is not None:
                writes.append(((change.table, change.key), updated))
                self.cache.put(change.table, change.key, updated, position)
        request_fingerprint = fingerprint(request)
        self.retry.remember((request.client_id, request.call_id), response,
                            message.timestamp_ms, request_fingerprint)
        reply = om_pb2.ClientRequestReply(client_id=request.client_id, call_id=request.call_id,
                                          response=response, fingerprint=request_fingerprint,
                                          timestamp_ms=message.timestamp_ms)
        for row, value in reply_rows(self.view, reply):
            writes.append((row, value))
            self.cache.put(row[0], row[1], value, position)
        self._note_layout(recorder.ops)
        return writes, response, writes_prepared_marker(recorder.ops)

    def _apply_batch(self, position: int, batch: om_pb2.PersistDbBatch
                     ) -> tuple[list[tuple[Row, bytes | None]], bool]:
        """A leader-flow batch (docs/FLOW_SWITCH.md step 2): the rows given, quota deltas
        added to what the cache shows, reply and expiry rows, expired rows deleted, as
        ``om.statemachine.apply.StateMachine`` writes them, but as one transaction of the
        double buffer at ``position``; whether it put the prepared marker. Barrier,
        read-round and verify entries are batches without rows."""
        writes: list[tuple[Row, bytes | None]] = []
        for op in batch.ops:
            assert op.table in tables.TABLE_NAMES
            writes.append(((op.table, op.key), None if op.delete else op.value))
        for delta in merged_deltas(batch.quota_deltas):   # read before its own rows, as there
            raw = self.view.get(delta.table, delta.key)
            updated = None if raw is None else add_usage(raw, delta)
            if updated is not None:
                writes.append(((delta.table, delta.key), updated))
        for row in batch.reply_rows:
            writes.extend(reply_rows(self.view, om_pb2.ClientRequestReply.FromString(row.row)))
        for reply in batch.replies:     # entries an earlier version wrote
            writes.extend(reply_rows(self.view, reply))
        for op in batch.retry_expiry:
            assert op.delete
            assert op.table in (om_pb2.CLIENT_REQUEST_REPLY, om_pb2.CLIENT_REQUEST_EXPIRY)
            writes.append(((op.table, op.key), None))
        for (table, key), value in writes:
            self.cache.put(table, key, value, position)
        self._note_layout(batch.ops)
        return writes, writes_prepared_marker(list(batch.ops))

    def _info(self) -> om_pb2.TransactionInfo:
        return om_pb2.TransactionInfo(term=self.term, applied_index=self.applied_index,
                                      managed_index=self.managed_index,
                                      timestamp_ms=self.timestamp_ms,
                                      snapshot_change_position=self.snapshot_change_position)

    def applying(self) -> threading.RLock:
        """The lock apply holds: take it to change the store under apply's feet."""
        return self._lock

    def quiesce(self) -> None:
        """Waits until RocksDB holds everything applied (before a snapshot)."""
        self.double_buffer.flush_all(self.applied_index)

    def reload(self) -> None:
        """Re-reads positions from a replaced store; the caller quiesced first."""
        self.cache.clear()
        self._read_positions()
        self.double_buffer.restart_at(self.applied_index)

    def _read_positions(self) -> None:
        info = self.store.transaction_info()
        self.applied_index = info.applied_index
        self.managed_index = info.managed_index
        self.term = info.term
        self.timestamp_ms = info.timestamp_ms
        self.snapshot_change_position = info.snapshot_change_position
        self.layout_version = upgrade.metadata_layout_version(self.view)

    def _note_layout(self, ops: Iterable[om_pb2.TableOp]) -> None:
        """Moves ``layout_version`` when ``ops`` put ``#LAYOUTVERSION`` (FinalizeUpgrade,
        executed here in the old flow or on the leader in a batch)."""
        layout = written_layout_version(ops)
        self.layout_version = self.layout_version if layout is None else layout

    def metrics(self) -> dict[str, float]:
        """State gauges by key (``om/observe/metrics.py``, NODE_STATE)."""
        buffer = self.double_buffer
        return {"double_buffer_flushes": buffer.flushes,
                "double_buffer_transactions": buffer.transactions,
                "write_cache_rows": len(self.cache),
                "retry_cache_entries": len(self.retry), "retry_cache_bytes": self.retry.bytes}

    def close(self) -> None:
        """Flushes what is queued and stops the double buffer."""
        self.double_buffer.stop()
