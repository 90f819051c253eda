"""Accepting client connections: TLS handshakes paced so that requests keep their share.

A TLS handshake costs the serving process's event loop about a millisecond of
CPU (key exchange, signature, the client certificate's check), in a few steps
that each run whole. A server that accepts whatever the listen queue holds runs
a burst's handshakes back to back: 500 new connections in one second raised a
running write load's p99 4.1-4.5-fold on 2 cores, 2.8-fold paced at 4
(docs/PERFORMANCE.md, *Connection bursts*). ``PacedTlsServer`` accepts a connection only while fewer
than ``limits.tls_handshakes_max`` handshakes are in progress; the others wait
in the kernel's listen queue (sized to the kernel's limit, ``listen_backlog``),
costing nothing, and each loop turn runs at most that many handshake steps
between the requests.

A handshake stops counting after ``HANDSHAKE_SLOT_S`` even if unfinished, so
clients that connect and say nothing delay the next accepts by at most that
long rather than holding the slots until ``HANDSHAKE_TIMEOUT_S`` closes them.
Plain TCP has nothing to pace: ``client_server`` serves it with the loop's own
server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT_S = 10.0    # a client that has not finished its handshake by then is closed
HANDSHAKE_SLOT_S = 0.5        # a handshake slower than this frees its slot for the next
ACCEPT_RETRY_S = 0.1          # after an accept error (out of descriptors): retry after this


class ClientServer(Protocol):
    """What the node does with its client port's server: asyncio.Server's part of it."""

    async def start_serving(self) -> None: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class PacedTlsServer:
    """Accepts TLS connections on ``listener`` with at most ``handshakes_max`` handshakes
    in progress (each counted for at most HANDSHAKE_SLOT_S)."""

    def __init__(self, listener: socket.socket, factory: Callable[[], asyncio.BaseProtocol],
                 context: ssl.SSLContext, handshakes_max: int) -> None:
        assert handshakes_max > 0
        listener.setblocking(False)
        self._listener = listener
        self._factory = factory
        self._context = context
        self._slots = asyncio.Semaphore(handshakes_max)
        self._accepting: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()

    async def start_serving(self) -> None:
        self._accepting = asyncio.get_running_loop().create_task(self._accept_forever())

    def close(self) -> None:
        """Accepts no more; handshakes under way finish (or time out) on their own."""
        if self._accepting is not None:
            self._accepting.cancel()
        self._listener.close()

    async def wait_closed(self) -> None:
        if self._accepting is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting

    async def _accept_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except OSError as error:
                self._slots.release()
                if error.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM,
                                       errno.ECONNABORTED):
                    raise
                logger.warning("accepting a client connection failed: %s", error)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            task = loop.create_task(self._handshake(conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, conn: socket.socket) -> None:
        """Serves ``conn`` once its handshake succeeds; frees the slot when the handshake
        ends or after HANDSHAKE_SLOT_S. A failed handshake (a client without a valid
        certificate, or that timed out) is the client's problem: logged at debug level;
        its socket belongs to the loop's transport, which closes it."""
        loop = asyncio.get_running_loop()
        handshake = loop.create_task(loop.connect_accepted_socket(
            self._factory, conn, ssl=self._context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S))
        try:
            await asyncio.wait([handshake], timeout=HANDSHAKE_SLOT_S)
        finally:
            self._slots.release()
        try:
            await handshake
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as error:
            logger.debug("TLS handshake failed: %s", error)


async def client_server(listener: socket.socket, factory: Callable[[], asyncio.BaseProtocol],
                        context: ssl.SSLContext | None, handshakes_max: int,
                        backlog: int) -> ClientServer:
    """The client port's server on a listening socket: TLS handshakes paced, plain
    TCP as the loop serves it (not yet serving: ``start_serving``). The loop's server
    listens again with ``backlog`` (its default would shrink the queue to 100)."""
    if context is not None:
        return PacedTlsServer(listener, factory, context, handshakes_max)
    return await asyncio.get_running_loop().create_server(
        factory, sock=listener, backlog=backlog, start_serving=False)
