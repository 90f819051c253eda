"""A node's front workers, seen from the node: the client port served by N processes.

With ``workers`` > 1 the node does not serve client connections itself. At
start it binds ``workers`` listening sockets to the client port with
``SO_REUSEPORT`` (the kernel spreads new connections over them), before the
node starts, so a port held by another process stops the start with nothing
begun; then it starts one front process per socket (``python -m
om.node.front_worker``, ``om/node/front_worker.py``), each joined to the node by a private
socketpair (``om.protocol.channel`` frames). A front does TLS, framing and
back-pressure for its connections and forwards each read's request frames;
the node runs them through the same ``Intake`` as its own connections would
and sends each answer frame back. Messages:

* node to front: ``setup(config, index)`` first, then ``replies([(connection,
  frame), ...])`` (one message per loop iteration), ``stop()`` (accept no more);
* front to node: ``requests([(connection, peer, identity, [frame, ...]), ...])``
  (one message per loop iteration) and ``connections(open, refused, closed
  idle, cut unsent)`` about once a second, summed into the node's connection gauges.

Bounds: each front admits ``connections_max / workers`` connections, each
connection ``connection_in_flight_max`` frames in flight, so the messages
between them are bounded too. Fate sharing, as with the Raft process: a front
that dies stops the node (fail-stop); a node that dies closes the socketpairs
and every front exits.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
from dataclasses import dataclass, field

from om.config import ServerConfig
from om.node.connections import Requester
from om.node.intake import Intake
from om.protocol.channel import FrameReader, Message, encode
from om.security.tls import PeerIdentity

logger = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 10.0


def listening_sockets(host: str, port: int, count: int, backlog: int) -> list[socket.socket]:
    """``count`` sockets listening on host:port, with SO_REUSEPORT when more than one
    (the kernel spreads connections over them; one alone keeps the port its own) and
    nonblocking (OSError: taken)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if count > 1:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            listener.bind((host, port))
            listener.listen(backlog)
            listener.setblocking(False)
    except OSError:
        for listener in sockets:
            listener.close()
        raise
    return sockets


@dataclass
class _Remote:
    """The node's side of one front connection: who it is, and where its answers go."""

    link: FrontLink
    connection: int
    peer: str
    identity: PeerIdentity | None

    def deliver(self, frame: bytes) -> None:
        self.link.reply(self.connection, frame)


class FrontLink(asyncio.Protocol):
    """The node's end of one front's socketpair."""

    def __init__(self, intake: Intake, on_lost: asyncio.Future[int]) -> None:
        self._intake = intake
        self._reader = FrameReader()
        self._outbox: list[tuple[int, bytes]] = []
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        # open, refused, closed idle, cut unsent: as last reported
        self.connections: tuple[int, ...] = (0, 0, 0, 0)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        for message in self._reader.feed(data):
            if message[0] == "requests":
                for connection, peer, identity, frames in message[1]:
                    requester: Requester = _Remote(self, connection, peer, identity)
                    self._intake(requester, frames)
            else:
                assert message[0] == "connections", f"unexpected message {message[0]}"
                self.connections = message[1:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self._on_lost.done():
            self._on_lost.set_result(0)

    def reply(self, connection: int, frame: bytes) -> None:
        """Queues an answer; a loop iteration's answers travel in one message."""
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append((connection, frame))

    def send(self, message: Message) -> None:
        if self.transport is not None:
            self.transport.write(encode(message))

    def _flush(self) -> None:
        replies, self._outbox = self._outbox, []
        self.send(("replies", replies))


def _spawn(listener: socket.socket) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """A front process holding ``listener`` (closed here) and the node's socketpair end."""
    ours, theirs = socket.socketpair()
    process = subprocess.Popen(
        [sys.executable, "-m", "om.node.front_worker", str(theirs.fileno()),
         str(listener.fileno())],
        pass_fds=(theirs.fileno(), listener.fileno()))
    theirs.close()
    listener.close()
    ours.setblocking(False)
    return process, ours


async def _connect(link: FrontLink, ours: socket.socket) -> FrontLink:
    await asyncio.get_running_loop().connect_accepted_socket(lambda: link, ours)
    return link


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    link: FrontLink
    lost: asyncio.Future[int]


@dataclass
class Fronts:
    """The node's front workers: started, watched, summed, stopped."""

    config: ServerConfig
    intake: Intake
    workers: list[_Worker] = field(default_factory=list)
    closing: bool = False

    async def start(self, listeners: list[socket.socket]) -> None:
        """Starts one front per listening socket and sends each its setup."""
        for index, listener in enumerate(listeners):
            process, ours = _spawn(listener)
            lost: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            link = await _connect(FrontLink(self.intake, lost), ours)
            link.send(("setup", self.config, index))
            self.workers.append(_Worker(process, link, lost))

    def state(self) -> dict[str, float]:
        """The connection gauges, summed over the fronts' last reports."""
        open_, refused, closed_idle, cut_unsent = (
            sum(w.link.connections[i] for w in self.workers) for i in range(4))
        return {"open": open_, "refused": refused, "closed_idle": closed_idle,
                "cut_unsent": cut_unsent}

    async def watch(self) -> int:
        """Returns the index of the first front whose link closed (it exited)."""
        done, _ = await asyncio.wait([w.lost for w in self.workers],
                                     return_when=asyncio.FIRST_COMPLETED)
        return next(i for i, w in enumerate(self.workers) if w.lost in done)

    def stop_accepting(self) -> None:
        """Every front stops accepting connections; they still relay answers."""
        self.closing = True
        for worker in self.workers:
            worker.link.send(("stop",))

    async def close(self) -> None:
        """Closes the links (each front writes what it holds and exits) and waits."""
        self.closing = True
        for worker in self.workers:
            if worker.link.transport is not None:
                worker.link.transport.close()
        for worker in self.workers:
            try:
                await asyncio.to_thread(worker.process.wait, CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                await asyncio.to_thread(worker.process.wait, CLOSE_TIMEOUT_S)
