"""Client connections: framing, back-pressure and bounds, wherever they are served.

A ``ClientConnection`` is one client's TCP (or TLS) connection, served by the
node's own process (``workers = 1``) or by a front worker (``om.node.front_worker``).
It cuts the stream into frames and hands each read's frames, in order, to a
``FrameSink``; the sink answers every frame it was handed with exactly one
``deliver`` of a reply frame, now or later, in any order. The connection:

* lets each client pipeline up to ``connection_in_flight_max`` frames; past
  that it stops reading until answers go out (back-pressure through TCP);
* hands the sink at most ``frames_per_turn`` frames in one turn of the event
  loop, in order; the rest wait for the next turn (``call_soon``), so the
  replies and commit notices that became ready meanwhile (the Raft process's
  channel) are handled between them: a pipelining client's read of 64 requests
  no longer holds the loop for all 64 executions;
* writes the answers delivered in one loop iteration with one ``write`` (one
  TLS record for a committed batch's answers instead of one each);
* closes on a frame over the size limit, after an INVALID_REQUEST answer (the
  stream cannot be resynchronised); a client that half-closes after sending
  still gets every answer;
* cuts off (aborts) a connection whose replies waiting to be sent pass
  ``connection_unsent_bytes_max``: a client that sends and never reads. Reading
  pauses only on requests in flight, so without this bound its answered replies
  would pile up in the transport's buffer without end. The requests it had
  handed on still run once (a retry with the same call id gets the stored
  reply); those still waiting for their turn are dropped unrun.

``Connections`` bounds them: at most ``connections_max`` open (one more is
answered with SERVER_BUSY and closed, logged at most once per
``REFUSAL_LOG_INTERVAL_S``), and a connection with nothing in flight that
sends nothing for ``connection_idle_s`` is closed. ``raise_fd_limit`` raises the
process's file-descriptor limit at start to fit the cap; ``listen_backlog`` sizes
the client port's accept queue to the kernel's limit, so a burst of connections
waits there instead of having its handshakes dropped (and retried by the client's
kernel one or more seconds later).
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import time
from collections import deque
from pathlib import Path
from typing import Protocol, cast

from om.config import Limits
from om.observe.metrics import StateGauge
from om.protocol import om_pb2
from om.protocol.framing import FrameBuffer, FrameTooLarge, encode_frame
from om.security.tls import PeerIdentity, peer_identity

logger = logging.getLogger(__name__)
FD_HEADROOM = 1024          # descriptors beyond client connections: RocksDB, Raft, logs
REFUSAL_LOG_INTERVAL_S = 10.0
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
SOMAXCONN_UNKNOWN = 4096    # Linux's default since 5.4, where the file cannot be read

CONNECTION_GAUGES = (
    StateGauge("open", "om_connections_open", "Client connections open now"),
    StateGauge("refused", "om_connections_refused", "Client connections refused at the cap "
               "(limits.connections_max)", counter=True),
    StateGauge("closed_idle", "om_connections_closed_idle", "Client connections closed "
               "after limits.connection_idle_s without traffic", counter=True),
    StateGauge("cut_unsent", "om_connections_cut_unsent", "Client connections cut off with "
               "more reply bytes unsent than limits.connection_unsent_bytes_max (a client "
               "that does not read)", counter=True),
)


def listen_backlog(limit: int, somaxconn: Path = SOMAXCONN) -> int:
    """The listen backlog: the kernel's limit (``somaxconn``), at most ``limit``.

    The kernel caps any backlog at somaxconn; asking for exactly it means a burst
    of connections queues up to what the kernel allows, where a fixed smaller
    backlog drops the SYNs past it."""
    assert limit > 0
    try:
        kernel = int(somaxconn.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        kernel = SOMAXCONN_UNKNOWN
    return max(1, min(kernel, limit))


def status_frame(status: om_pb2.Status.ValueType, message: str, call_id: int = 0) -> bytes:
    """A framed response carrying only a status (a refusal before any request ran)."""
    response = om_pb2.OMResponse(status=status, message=message, call_id=call_id)
    return encode_frame(response.SerializeToString())


def invalid_frame(message: str, call_id: int = 0) -> bytes:
    """A framed INVALID_REQUEST."""
    return status_frame(om_pb2.INVALID_REQUEST, message, call_id)


class Requester(Protocol):
    """The side of a client connection a node answers: who it is and where replies go."""

    @property
    def peer(self) -> str:
        """The client's IP address ("" when unknown)."""
        ...

    @property
    def identity(self) -> PeerIdentity | None:
        """What its client certificate proves: user, groups, serial (None without one)."""
        ...

    def deliver(self, frame: bytes) -> None:
        """Sends one reply frame: exactly one for each frame the sink was handed."""
        ...


class FrameSink(Protocol):
    """Takes the request frames one read of a connection delivered, in order."""

    def __call__(self, connection: Requester, frames: list[bytes]) -> None: ...


class Connections:
    """The open client connections, bounded in number and in idle time."""

    def __init__(self, open_max: int, idle_s: float) -> None:
        assert open_max > 0
        assert idle_s > 0
        self.open_max = open_max
        self.idle_s = idle_s
        self.open: set[ClientConnection] = set()
        self.refused = 0
        self.closed_idle = 0
        self.cut_unsent = 0
        self._refusal_logged_s = -math.inf
        self._cut_logged_s = -math.inf

    def admit(self, connection: ClientConnection) -> bool:
        """False (and logs, at most once per interval) when the cap is reached."""
        if len(self.open) >= self.open_max:
            self.refused += 1
            now = time.monotonic()
            if now - self._refusal_logged_s >= REFUSAL_LOG_INTERVAL_S:
                self._refusal_logged_s = now
                logger.warning("%d client connections open, the limit (limits.connections_max):"
                               " refusing new ones (%d refused so far)", len(self.open),
                               self.refused)
            return False
        self.open.add(connection)
        return True

    def cut_off(self, connection: ClientConnection, unsent: int) -> None:
        """Counts (and logs, at most once per interval) a connection cut off for unsent
        replies."""
        self.cut_unsent += 1
        now = time.monotonic()
        if now - self._cut_logged_s >= REFUSAL_LOG_INTERVAL_S:
            self._cut_logged_s = now
            logger.warning("client %s does not read its replies: %d bytes unsent, more than "
                           "limits.connection_unsent_bytes_max; connection cut off (%d so far)",
                           connection.peer or "?", unsent, self.cut_unsent)

    def state(self) -> dict[str, float]:
        """Gauges for /prom."""
        return {"open": len(self.open), "refused": self.refused, "closed_idle": self.closed_idle,
                "cut_unsent": self.cut_unsent}

    def leave(self, connection: ClientConnection) -> None:
        self.open.discard(connection)

    async def close_idle_forever(self) -> None:
        """Closes connections idle for ``idle_s``, checking a few times per period."""
        while True:
            await asyncio.sleep(min(self.idle_s / 4, 5.0))
            now = time.monotonic()
            for connection in [c for c in self.open if c.idle_since(now) >= self.idle_s]:
                connection.close()
                self.closed_idle += 1


def raise_fd_limit(connections_max: int) -> int:
    """Raises RLIMIT_NOFILE to fit the connections; the connections that fit."""
    wanted = connections_max + FD_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
        soft = ceiling
    fitting = max(soft - FD_HEADROOM, 1)
    if fitting < connections_max:
        logger.warning("the file-descriptor limit (%d) fits only %d client connections, not "
                       "limits.connections_max = %d", soft, fitting, connections_max)
    return min(fitting, connections_max)


class ClientConnection(asyncio.BufferedProtocol):
    """One client connection; reads land in one reused buffer (``FrameBuffer``).

    Invariants: ``in_flight`` counts the frames handed to the sink and not yet
    answered; it never exceeds ``connection_in_flight_max`` by more than one read's
    frames (reading pauses at the limit and resumes at half of it). The reply bytes
    in the transport's buffer exceed ``connection_unsent_bytes_max`` by at most one
    write's (one loop iteration's replies), and then only until that write returns:
    the connection is aborted, which frees them."""

    def __init__(self, limits: Limits, connections: Connections, sink: FrameSink) -> None:
        self._connections = connections
        self._sink = sink
        self._active_s = time.monotonic()
        self._frames = FrameBuffer(limits.max_frame_bytes)
        self._in_flight_max = limits.connection_in_flight_max
        self._frames_per_turn = limits.frames_per_turn
        self._unsent_max = limits.connection_unsent_bytes_max
        # frames received, counted in flight, not yet handed to the sink (their turn is
        # to come: at most connection_in_flight_max plus one read's)
        self._waiting: deque[bytes] = deque()
        self.in_flight = 0
        self._paused = False
        self._transport: asyncio.Transport | None = None
        # Answers delivered in one loop iteration, written together at its end. At
        # most connection_in_flight_max frames (each answer was in flight).
        self._replies: list[bytes] = []
        self._eof = False
        self.peer = ""
        self.identity: PeerIdentity | None = None   # the client certificate's, with TLS

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) else ""
        self.identity = peer_identity(transport.get_extra_info("peercert"))
        if not self._connections.admit(self):
            self._transport.write(status_frame(
                om_pb2.SERVER_BUSY, f"{self._connections.open_max} client connections are "
                "open, the most this OM accepts; retry shortly"))
            self._transport.close()
            self._transport = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._connections.leave(self)

    def idle_since(self, now: float) -> float:
        """Seconds with nothing in flight and nothing received (0 while busy)."""
        return 0.0 if self.in_flight else now - self._active_s

    def close(self) -> None:
        """Closes the connection (idle for too long, or its server is stopping)."""
        if self._transport is not None:
            self._transport.close()

    def eof_received(self) -> bool:
        """A client that half-closes after sending still gets every answer."""
        self._eof = True
        return self.in_flight > 0   # True keeps the transport open until the last reply

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.writable()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._frames.received(nbytes)
        except FrameTooLarge as error:
            if self._transport is not None:
                self._transport.write(invalid_frame(str(error)))
                self._transport.close()
            return
        if self._transport is None or not frames:   # refused at connection_made
            return
        self._active_s = time.monotonic()
        self.in_flight += len(frames)
        if self._waiting:        # earlier frames still wait for their turn: behind them
            self._waiting.extend(frames)
        elif len(frames) > self._frames_per_turn:
            self._waiting.extend(frames)
            self._hand_waiting()
        else:
            self._sink(self, frames)
        if self.in_flight >= self._in_flight_max and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def _hand_waiting(self) -> None:
        """Hands the sink the next ``frames_per_turn`` waiting frames; the rest get the
        next turn. Frames of a connection that closed meanwhile are dropped: their
        answers could not reach the client, which retries them elsewhere."""
        if self._transport is None or self._transport.is_closing():
            self._waiting.clear()
            return
        turn = [self._waiting.popleft()
                for _ in range(min(self._frames_per_turn, len(self._waiting)))]
        if self._waiting:
            asyncio.get_running_loop().call_soon(self._hand_waiting)
        self._sink(self, turn)

    def deliver(self, frame: bytes) -> None:
        """Queues one answer; the answers of a loop iteration go out in one write."""
        assert self.in_flight > 0, "an answer for a frame never received"
        self.in_flight -= 1
        self._active_s = time.monotonic()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if not self._replies:
            asyncio.get_running_loop().call_soon(self._write_replies)
        self._replies.append(frame)
        if self._eof and self.in_flight == 0:
            self._write_replies()
            transport.close()
        elif self._paused and self.in_flight < self._in_flight_max // 2:
            self._paused = False
            transport.resume_reading()

    def _write_replies(self) -> None:
        """Writes the queued answers in one call (none once the connection closes)."""
        replies, self._replies = self._replies, []
        transport = self._transport
        if replies and transport is not None and not transport.is_closing():
            transport.write(b"".join(replies))
            unsent = transport.get_write_buffer_size()
            if unsent > self._unsent_max:
                self._cut_off(transport, unsent)

    def _cut_off(self, transport: asyncio.Transport, unsent: int) -> None:
        """Aborts a connection whose client does not read: its unsent replies are freed
        now (``close`` would keep them until the client read them, which it may never
        do); the frames still waiting for their turn are dropped unrun."""
        self._waiting.clear()
        self._connections.cut_off(self, unsent)
        transport.abort()
