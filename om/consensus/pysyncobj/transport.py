"""pysyncobj's TCP transport, adapted: group-commit syncs, cheaper frames, bounds.

pysyncobj lets a SyncObj take its transport class (``transportClass``). This
one subclasses its ``TCPTransport`` and changes five things:

* **Sync before promising, without waiting for the disk.** A follower's
  append acknowledgement (``next_node_idx``) claiming entries is held until
  the journal has synced them (``GroupCommitJournal.synced_index``), and goes
  at once when it has (a heartbeat's answer, usually); one that claims nothing
  (a reset, a transmission step) waits only behind those held before it, so
  the answers keep their order. The transport wraps the SyncObj's poller:
  before each poll (after the leader appended and *sent* its entries:
  send-before-sync) and after it (after a follower appended what
  it received) it takes the journal's finished syncs, sends the
  acknowledgements they cover (consecutive successful ones to the same node
  coalesced into the last), and hands what was appended since to the
  journal's sync thread, which never blocks this thread; the journal's
  ``wake_fd`` is in the poller, so a finished sync wakes the poll. Meanwhile
  heartbeats, their answers and (pre-)votes go on. A follower whose
  acknowledgement has waited ``ALIVE_AFTER_S`` for its disk says it is alive
  (an answer that claims nothing, ``success`` and ``reset`` false, at most once
  per ``ALIVE_AFTER_S``): pysyncobj's leader steps down when a majority has
  not answered for ``leaderFallbackTimeout``, and a disk slow on every node at
  once (they share one here) must not look like a partition. An
  acknowledgement held for entries a truncation then dropped is dropped too:
  it would claim entries the follower no longer has. (The leader counts
  itself toward a quorum only for synced entries: ``raft_log.RaftLog``.)
* **No zlib, no protocol 2.** pysyncobj pickles every message with protocol
  2 (``bytes`` go through latin-1 text, ~1.5x larger) and zlib-compresses it
  once per follower (~21 % of the leader's CPU in a durable run). Frames here
  are protocol-5 pickles, compressed only when ``compress`` is on and the
  payload is at least ``COMPRESS_MIN_BYTES`` (worth it off loopback).
* **No code from the network.** Frames are unpickled with an unpickler that
  refuses every global: Raft messages are dicts, lists, tuples, bytes, str and
  numbers, so a stranger on the Raft port cannot make pysyncobj import and
  call anything.
* **Bounded frames.** A frame longer than ``FRAME_BYTES_MAX`` (or negative)
  closes the connection instead of growing the read buffer without limit.
* **Linear sending.** pysyncobj appends every frame to one ``bytes`` write
  buffer and, after each partial ``send``, keeps the rest by slicing: both copy
  the whole buffer, so a buffer that grows (a leader streaming a snapshot to a
  follower that reads slowly: pysyncobj sends chunks for a whole append period
  a tick) costs time quadratic in its size. At 10M keys a 210 MB snapshot
  starved the leader's Raft process until it stepped down. Frames now wait in
  a queue and move into the write buffer ``WRITE_CHUNK_BYTES`` at a time, so
  each byte is copied a bounded number of times; a queue past
  ``OUTBOX_BYTES_MAX`` closes the connection (pysyncobj reconnects and starts
  the transmission again).

Connections are pysyncobj's ``TcpConnection`` with their class switched to
``FrameConnection`` as soon as they exist (both are plain Python objects of
the same layout), so connecting, buffering and reconnecting stay pysyncobj's.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import TcpConnection
from pysyncobj.transport import TCPTransport

from om.consensus.pysyncobj.journal import GroupCommitJournal

FRAME_BYTES_MAX = 64 * 1024 * 1024
WRITE_CHUNK_BYTES = 256 * 1024       # the write buffer is topped up to about this
OUTBOX_BYTES_MAX = 1024 * 1024 * 1024  # frames waiting for a peer that does not read
COMPRESS_MIN_BYTES = 4096
ALIVE_AFTER_S = 0.1   # an acknowledgement held this long for the disk: say "alive"
_RAW = b"\x00"
_ZLIB = b"\x01"
_LENGTH = struct.Struct("i")  # pysyncobj's own length prefix


class _NoGlobals(pickle.Unpickler):
    """Unpickles plain data only."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"Raft frames carry no objects ({module}.{name})")


def encode_frame(message: Any, compress: bool) -> bytes:
    """The frame body: a flag byte, then the (maybe compressed) protocol-5 pickle."""
    payload = pickle.dumps(message, protocol=5)
    if compress and len(payload) >= COMPRESS_MIN_BYTES:
        return _ZLIB + zlib.compress(payload, 1)
    return _RAW + payload


def decode_frame(body: bytes) -> Any:
    """The message of a frame body; raises on anything malformed."""
    flag, payload = body[:1], body[1:]
    if flag == _ZLIB:
        payload = zlib.decompress(payload)
    elif flag != _RAW:
        raise ValueError(f"unknown frame flag {flag!r}")
    return _NoGlobals(io.BytesIO(payload)).load()


class FrameConnection(TcpConnection):  # type: ignore[misc]
    """A pysyncobj connection that sends and parses ``encode_frame`` bodies."""

    compress = False
    _TcpConnection__readBuffer: bytes   # pysyncobj's attributes used here
    _TcpConnection__writeBuffer: bytes
    recvLastTimestamp: int
    _om_outbox: deque[bytes]
    _om_outbox_bytes: int

    def send(self, message: Any) -> None:
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = encode_frame(message, self.compress)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(monotonic_time()))
        outbox = self._outbox()
        outbox.append(_LENGTH.pack(len(data)) + data)
        self._om_outbox_bytes = getattr(self, "_om_outbox_bytes", 0) + len(outbox[-1])
        if self._om_outbox_bytes > OUTBOX_BYTES_MAX:
            self.disconnect()
            return
        self._TcpConnection__trySendBuffer()

    def _outbox(self) -> deque[bytes]:
        """The frames not yet in the write buffer (made on first use: pysyncobj builds
        the connection, and its class is switched afterwards)."""
        outbox: deque[bytes] | None = self.__dict__.get("_om_outbox")
        if outbox is None:
            outbox = deque()
            self._om_outbox = outbox
        return outbox

    def _TcpConnection__processSend(self) -> bool:
        """pysyncobj's, after topping the write buffer up from the queue."""
        buffer: bytes = self._TcpConnection__writeBuffer
        outbox = self._outbox()
        if outbox and len(buffer) < WRITE_CHUNK_BYTES:
            parts = [buffer]
            size = len(buffer)
            while outbox and size < WRITE_CHUNK_BYTES:
                frame = outbox.popleft()
                parts.append(frame)
                size += len(frame)
                self._om_outbox_bytes -= len(frame)
            self._TcpConnection__writeBuffer = b"".join(parts)
        sent: bool = TcpConnection._TcpConnection__processSend(self)
        return sent

    def connect(self, host: str, port: int) -> bool:
        self._forget_outbox()
        connected: bool = super().connect(host, port)
        return connected

    def disconnect(self) -> None:
        self._forget_outbox()
        super().disconnect()

    def _forget_outbox(self) -> None:
        """A connection starts clean: frames queued for the last one (sealed with its
        random key) are dropped, as pysyncobj drops its write buffer."""
        self._outbox().clear()
        self._om_outbox_bytes = 0

    def _TcpConnection__processParseMessage(self) -> Any:
        buffer = self._TcpConnection__readBuffer
        if len(buffer) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buffer)
        if length < 0 or length > FRAME_BYTES_MAX:
            self.disconnect()
            return None
        if len(buffer) - _LENGTH.size < length:
            return None
        data = buffer[_LENGTH.size:_LENGTH.size + length]
        try:
            if self.encryptor:
                timestamp = self.encryptor.extract_timestamp(data)
                assert timestamp >= self.recvLastTimestamp
                self.recvLastTimestamp = timestamp
                data = self.encryptor.decrypt(data)
            message = decode_frame(data)
            if self.recvRandKey:
                rand_key, message = message
                assert rand_key == self.recvRandKey
        except Exception:  # anything malformed: drop the peer, as pysyncobj does
            self.disconnect()
            return None
        self._TcpConnection__readBuffer = buffer[_LENGTH.size + length:]
        return message


class _SyncingPoller:
    """The SyncObj's poller, with the journal's group commit around every poll."""

    def __init__(self, inner: Any, around_poll: Callable[[], None]) -> None:
        self._inner = inner
        self._around_poll = around_poll

    def subscribe(self, descr: int, callback: Any, event_mask: int) -> None:
        self._inner.subscribe(descr, callback, event_mask)

    def unsubscribe(self, descr: int) -> None:
        self._inner.unsubscribe(descr)

    def poll(self, timeout: float) -> None:
        self._around_poll()
        self._inner.poll(timeout)
        self._around_poll()


@dataclass(frozen=True)
class _Held:
    """An append acknowledgement waiting until the journal holds what it claims."""

    node: Any
    message: dict[str, Any]
    claims: int    # the last index it says the follower holds (0: nothing)
    since: float   # when it was held (monotonic seconds)


class GroupCommitTransport(TCPTransport):  # type: ignore[misc]
    """TCPTransport with held acknowledgements, group syncs and ``FrameConnection``s.

    The SyncObj must carry ``om_journal`` (its journal: with a
    ``GroupCommitJournal`` acknowledgements wait for its syncs; pysyncobj's own
    journals never sync, and nothing is held) and ``om_compress`` (bool) before
    it builds its transport, ``om_peer_disconnected(node)``, told when a peer's
    connection drops, and ``om_answering_prev`` (the previous index of the
    append being answered, added to the answer as ``for_prev``).
    """

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        journal = syncObj.om_journal
        self._journal = journal if isinstance(journal, GroupCommitJournal) else None
        self._compress: bool = syncObj.om_compress
        self._held: list[_Held] = []
        self._alive_sent: dict[Any, float] = {}   # node -> when "alive" last went to it
        syncObj._poller = _SyncingPoller(syncObj._poller, self.flush)
        if self._journal is not None:
            self._journal.on_truncate = self._forget_claims_above
            syncObj._poller.subscribe(self._journal.wake_fd, self._on_synced,
                                      POLL_EVENT_TYPE.READ)
        super().__init__(syncObj, selfNode, otherNodes)

    def addNode(self, node: Any) -> None:
        super().addNode(node)
        connection = self._connections.get(node)
        if connection is not None:
            self._adopt(connection)

    def _onNewIncomingConnection(self, conn: Any) -> None:
        self._adopt(conn)
        super()._onNewIncomingConnection(conn)

    def _onDisconnected(self, conn: Any) -> None:
        node = self._connToNode(conn)
        super()._onDisconnected(conn)
        if node is not None:
            self._syncObj.om_peer_disconnected(node)

    def _adopt(self, connection: TcpConnection) -> None:
        connection.__class__ = FrameConnection
        connection.compress = self._compress

    def send(self, node: Any, message: Any) -> bool:
        """Sends ``message``; holds an append acknowledgement until the journal holds
        what it claims (and behind any held before it)."""
        if not isinstance(message, dict) or message.get("type") != "next_node_idx":
            return bool(super().send(node, message))
        answering = self._syncObj.om_answering_prev
        if answering is not None:
            message = {**message, "for_prev": answering}
        if self._journal is None:
            return bool(super().send(node, message))
        claims = message["next_node_idx"] - 1 if message["success"] else 0
        self._held.append(_Held(node, message, claims, monotonic_time()))
        self._release()
        return True

    def flush(self) -> None:
        """Takes the journal's finished syncs, sends the acknowledgements they cover,
        says "alive" where one waits long, and hands what was appended since to
        the sync thread."""
        if self._journal is None:
            return
        self._journal.collect()
        self._release()
        self._say_alive()
        self._journal.begin_sync()

    def _say_alive(self) -> None:
        """To each node an acknowledgement has waited ``ALIVE_AFTER_S`` for, at most once
        per ``ALIVE_AFTER_S``: an answer that claims nothing (pysyncobj's leader only
        notes that this follower answered)."""
        now = monotonic_time()
        for held in self._held:
            if now - held.since < ALIVE_AFTER_S:
                break    # the rest were held later still
            if now - self._alive_sent.get(held.node, 0.0) >= ALIVE_AFTER_S:
                self._alive_sent[held.node] = now
                super().send(held.node, {"type": "next_node_idx",
                                         "next_node_idx": held.message["next_node_idx"],
                                         "reset": False, "success": False})

    def _on_synced(self, descr: int, event: int) -> None:
        self.flush()

    def _release(self) -> None:
        """Sends the held acknowledgements the journal now holds, in order (coalesced)."""
        assert self._journal is not None
        synced = self._journal.synced_index
        held = self._held
        ready = 0
        while ready < len(held) and held[ready].claims <= synced:
            ready += 1
        if not ready:
            return
        self._held = held[ready:]
        for position in range(ready):
            if _superseded(held[position], held[position + 1:ready]):
                continue
            super().send(held[position].node, held[position].message)

    def _forget_claims_above(self, last_index: int) -> None:
        """The journal dropped the entries after ``last_index``: a held acknowledgement
        claiming any of them is no longer true."""
        self._held = [h for h in self._held if h.claims <= last_index]


def _superseded(held: _Held, later: list[_Held]) -> bool:
    """A plain success followed by another plain success to the same node says less."""
    message = held.message
    if not message["success"] or message["reset"] or not later:
        return False
    following = later[0]
    return bool(following.node == held.node and following.message["success"]
                and not following.message["reset"])
