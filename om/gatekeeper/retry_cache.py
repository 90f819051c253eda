"""The retry cache: exactly-once writes keyed by (client id, call id).

Three places hold an answer, checked in this order:

1. ``in_flight``: requests executing or replicating now. A retry waits for the
   original (the shell keeps the waitable; this table only says who is there).
2. ``recent``: a bounded LRU of committed responses, so retries after a dropped
   reply are answered from memory.
3. The clientRequestReplyTable row, written in the same batch as the request's
   data. It is the source of truth: it survives restart, failover and
   snapshots; ``recent`` is only a cache of it, bounded regardless of the rate.

Expiry uses replicated time: a row carries its batch's timestamp and is ignored
once ``now - timestamp > expiry``; the leader deletes expired rows through
ordinary batches (``expired_row_deletes``). Only committed writes are stored:
a request that failed before replication (an error status, a lost leadership)
changed nothing, so its retry executes afresh, as Ratis does for failed entries.

The template names each write by a ``RetryKeys`` port (the factory, om/node/parts.py,
picks one): ``retry_key`` in production; ``ForgetfulRetryKeys``, the fault chaos runs
inject (``unsafe_disable_retry_cache``) to show the exactly-once checker catches a
cache that forgets.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Protocol

from om.config import Limits
from om.protocol import om_pb2
from om.schema import tables
from om.schema.ids import RetryKey
from om.schema.read_view import ReadView
from om.schema.recent_replies import RecentReplies


class RetryKeys(Protocol):
    """Names an admitted write for the retry cache and the writes in flight."""

    def __call__(self, request: om_pb2.OMRequest) -> RetryKey: ...


def retry_key(request: om_pb2.OMRequest) -> RetryKey:
    """(client id, call id): a retry resends both, so it finds its original."""
    return request.client_id, request.call_id


class ForgetfulRetryKeys:
    """A fault, for tests only: a key no other request has, so a retry finds neither
    its stored answer nor its original in flight, and executes again. The reply row is
    still written under the request's own key; lookups simply never ask for it."""

    def __init__(self) -> None:
        self._count = itertools.count()

    def __call__(self, request: om_pb2.OMRequest) -> RetryKey:
        return f"{request.client_id}#retry-cache-off#{next(self._count)}", request.call_id


@dataclass(frozen=True)
class StoredReply:
    """A committed write's response and the fingerprint of its request."""

    response: om_pb2.OMResponse
    fingerprint: bytes


@dataclass(frozen=True)
class RetryCacheConfig:
    """Limits of the retry cache (the defaults are ``om.config.Limits``'s)."""

    expiry_ms: int = int(Limits.retry_cache_expiry_s * 1000)
    memory_entries: int = Limits.retry_cache_memory_entries

    def __post_init__(self) -> None:
        assert self.expiry_ms > 0
        assert self.memory_entries > 0


class RetryCache:
    """Answers retries of committed writes; tracks which writes are in flight."""

    def __init__(self, config: RetryCacheConfig) -> None:
        self.config = config
        self._in_flight: set[RetryKey] = set()
        self._recent = RecentReplies(config.memory_entries)
        self.hits = 0

    def committed_response(self, key: RetryKey, view: ReadView,
                           now_ms: int) -> StoredReply | None:
        """The stored reply of a committed, unexpired write, or None."""
        cached = self._recent.get(key)
        if cached is not None:
            response_bytes, timestamp_ms, fingerprint = cached
            if now_ms - timestamp_ms <= self.config.expiry_ms:
                self.hits += 1
                return StoredReply(om_pb2.OMResponse.FromString(response_bytes), fingerprint)
            self._recent.drop(key)
        row = reply_row(view, key, now_ms, self.config.expiry_ms)
        if row is None:
            return None
        self._remember(key, row.response, row.timestamp_ms, row.fingerprint)
        self.hits += 1
        return StoredReply(om_pb2.OMResponse.FromString(row.response), row.fingerprint)

    def begin(self, key: RetryKey) -> None:
        """Marks the write as in flight."""
        assert key not in self._in_flight
        self._in_flight.add(key)

    def finish(self, key: RetryKey, committed: om_pb2.ClientRequestReply | None) -> None:
        """Ends the in-flight mark; remembers the reply when the write committed."""
        assert key in self._in_flight
        self._in_flight.discard(key)
        if committed is not None:
            assert (committed.client_id, committed.call_id) == key
            self._remember(key, committed.response, committed.timestamp_ms,
                           committed.fingerprint)

    def _remember(self, key: RetryKey, response: bytes, timestamp_ms: int,
                  fingerprint: bytes) -> None:
        self._recent.put(key, (response, timestamp_ms, fingerprint))

    def clear_memory(self) -> None:
        """Forgets the in-memory copies (on losing leadership): the table stays."""
        self._recent.clear()

    def statistics(self) -> dict[str, int]:
        """Sizes (entries, and the estimated bytes of those in memory) and hit count, for
        metrics."""
        return {"in_flight": len(self._in_flight), "recent": len(self._recent),
                "recent_bytes": self._recent.bytes, "hits": self.hits}


def reply_row(view: ReadView, key: RetryKey, now_ms: int,
              expiry_ms: int) -> om_pb2.ClientRequestReply | None:
    """The unexpired clientRequestReplyTable row of ``key``, whichever flow wrote it."""
    raw = view.get(om_pb2.CLIENT_REQUEST_REPLY, tables.reply_key(*key))
    if raw is None:
        return None
    row = om_pb2.ClientRequestReply.FromString(raw)
    assert (row.client_id, row.call_id) == key
    if now_ms - row.timestamp_ms > expiry_ms:
        return None
    return row


def encode_reply(reply: om_pb2.ClientRequestReply) -> om_pb2.ReplyRow:
    """The rows apply writes for a committed write's reply, keys and all: its
    clientRequestReplyTable row and its clientRequestExpiryTable index row, at the
    reply's (leader-fixed) time."""
    return om_pb2.ReplyRow(key=tables.reply_key(reply.client_id, reply.call_id),
                           row=reply.SerializeToString(deterministic=True),
                           expiry_key=tables.expiry_key(reply.timestamp_ms, reply.client_id,
                                                        reply.call_id))


def expired_row_deletes(view: ReadView, now_ms: int, expiry_ms: int,
                        limit: int) -> list[om_pb2.TableOp]:
    """Deletes for up to ``limit`` retry-cache rows older than the expiry.

    Reads the time-ordered expiry index, so the cost is proportional to what
    expired, not to the size of the cache.
    """
    assert limit > 0
    cutoff = now_ms - expiry_ms
    if cutoff <= 0:
        return []
    deletes: list[om_pb2.TableOp] = []
    for key, _ in view.scan(om_pb2.CLIENT_REQUEST_EXPIRY, b"", None, limit):
        if tables.expiry_key_time_ms(key) >= cutoff:
            break
        deletes.append(om_pb2.TableOp(table=om_pb2.CLIENT_REQUEST_EXPIRY, key=key, delete=True))
        deletes.append(om_pb2.TableOp(table=om_pb2.CLIENT_REQUEST_REPLY,
                                      key=tables.expiry_key_reply_key(key), delete=True))
    return deletes
