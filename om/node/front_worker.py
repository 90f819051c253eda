"""A front worker: serves client connections of one node, in a process of its own.

``python -m om.node.front_worker LINK_FD LISTEN_FD`` is started by its node
(``om.node.front_pool``) with the node's end of a socketpair and one of the node's
listening sockets on the client port (``SO_REUSEPORT``: the kernel spreads new
connections over the fronts). It takes its setup (the node's configuration and
its index) from the link, then serves with the same ``ClientConnection`` as the
node's own process would: TLS (with the node's certificate, CA and client
certificate rules), framing, back-pressure, the connection bounds (its share,
``connections_max / workers``) and idle closing. What it does not do is answer:
each loop iteration's request frames go to the node in one ``requests``
message, with each connection's peer and certificate identity, and each answer
frame the node sends back is written to its connection (dropped when that
connection has closed). The node keeps identity checks, tokens, audit and
execution, so the rules are the same for every worker count.

It exits when the link closes (its node stopped or died, even before it sent
the setup), after writing the answers it holds; SIGINT and SIGTERM are ignored: its node stops it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
import sys
import weakref

import uvloop

from om.config import ServerConfig
from om.node import gc_policy
from om.node.accept import client_server
from om.node.connections import (
    ClientConnection,
    Connections,
    Requester,
    listen_backlog,
    raise_fd_limit,
)
from om.protocol.channel import FrameReader, Message, encode
from om.security.tls import PeerIdentity, server_context

logger = logging.getLogger(__name__)
REPORT_INTERVAL_S = 1.0


def client_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The client port's TLS context, as the node would build it (None without TLS)."""
    tls = config.tls
    if not tls.enabled:
        return None
    context = server_context(config.tls_path(tls.cert_file), config.tls_path(tls.key_file),
                             config.tls_path(tls.ca_file))
    if config.tls.enabled and config.tokens.enabled:
        # a client without a certificate may connect; each of its requests needs a
        # delegation token, which the node checks
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


class NodeLink(asyncio.Protocol):
    """The front's end of the socketpair: forwards request frames, delivers answers."""

    def __init__(self) -> None:
        self._reader = FrameReader()
        self._outbox: list[tuple[int, str, PeerIdentity | None, list[bytes]]] = []
        self._connections: weakref.WeakValueDictionary[int, ClientConnection] = (
            weakref.WeakValueDictionary())
        self._ids: weakref.WeakKeyDictionary[ClientConnection, int] = weakref.WeakKeyDictionary()
        self._next_id = 1
        self.transport: asyncio.Transport | None = None
        self.setup: asyncio.Future[tuple[ServerConfig, int]] = (
            asyncio.get_running_loop().create_future())
        self.stop = asyncio.Event()
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for message in self._reader.feed(data):
            kind = message[0]
            if kind == "replies":
                for connection_id, frame in message[1]:
                    connection = self._connections.get(connection_id)
                    if connection is not None:
                        connection.deliver(frame)
            elif kind == "setup":
                self.setup.set_result((message[1], message[2]))
            else:
                assert kind == "stop", f"unexpected message {kind}"
                self.stop.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.setup.done():   # the node died while this front was starting
            self.setup.set_exception(ConnectionError("the node closed the link before setup"))
        self.stop.set()
        self.closed.set()

    def forward(self, connection: Requester, frames: list[bytes]) -> None:
        """``FrameSink``: queues a read's frames; a loop iteration's go in one message."""
        assert isinstance(connection, ClientConnection)
        connection_id = self._ids.get(connection)
        if connection_id is None:
            connection_id = self._next_id
            self._next_id += 1
            self._ids[connection] = connection_id
            self._connections[connection_id] = connection
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append((connection_id, connection.peer, connection.identity, frames))

    def send(self, message: Message) -> None:
        if self.transport is not None:
            self.transport.write(encode(message))

    def _flush(self) -> None:
        requests, self._outbox = self._outbox, []
        self.send(("requests", requests))


async def _report(link: NodeLink, connections: Connections) -> None:
    while True:
        state = connections.state()
        link.send(("connections", int(state["open"]), int(state["refused"]),
                   int(state["closed_idle"]), int(state["cut_unsent"])))
        await asyncio.sleep(REPORT_INTERVAL_S)


async def serve(link_socket: socket.socket, listener: socket.socket) -> None:
    """Serves the listener's connections until the node stops this front."""
    loop = asyncio.get_running_loop()
    link = NodeLink()
    link_socket.setblocking(False)
    await loop.connect_accepted_socket(lambda: link, link_socket)
    try:
        config, index = await link.setup
    except ConnectionError:
        logger.warning("node gone before this front started; exiting")
        return
    limits = config.limits
    workers = max(config.workers_count(), 1)
    connections = Connections(max(raise_fd_limit(limits.connections_max) // workers, 1),
                              limits.connection_idle_s)
    server = await client_server(
        listener, lambda: ClientConnection(limits, connections, link.forward),
        client_context(config), limits.tls_handshakes_max,
        listen_backlog(limits.listen_backlog_max))
    await server.start_serving()
    tasks = [loop.create_task(_report(link, connections)),
             loop.create_task(connections.close_idle_forever())]
    logger.info("front %d of OM %s serving", index, config.node_id)
    with gc_policy.serving():
        await link.stop.wait()
        server.close()              # accept no more; answers still flow
        await link.closed.wait()
    for task in tasks:
        task.cancel()
    for connection in list(connections.open):
        connection.close()
    await server.wait_closed()


def main(argv: list[str]) -> int:
    """Runs a front on the descriptors ``argv[0]`` (link) and ``argv[1]`` (listener)."""
    logging.basicConfig(level=os.environ.get("OM_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s[front]: %(message)s")
    for ignored in (signal.SIGINT, signal.SIGTERM):   # the node stops it, through the link
        signal.signal(ignored, signal.SIG_IGN)
    link_socket = socket.socket(fileno=int(argv[0]))
    listener = socket.socket(fileno=int(argv[1]))
    uvloop.run(serve(link_socket, listener))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
