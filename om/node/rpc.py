"""The client RPC server: length-prefixed protobuf frames over TCP, on uvloop.

Each connection may pipeline up to ``connection_in_flight_max`` requests;
past that the server stops reading from it until answers go out
(back-pressure through TCP). Responses carry the request's call id and may
return out of order. A frame over the size limit gets an INVALID_REQUEST
answer and the connection is closed (the stream cannot be resynchronised); a
frame that is not an OMRequest gets INVALID_REQUEST and the connection lives
on. Neither affects other connections.

At most ``connections_max`` connections are open: one more is answered with
SERVER_BUSY and closed (logged at most once per ``REFUSAL_LOG_INTERVAL_S``),
and the process's file-descriptor limit is raised at start to fit the cap. A
connection with nothing in flight that sends nothing for
``connection_idle_s`` is closed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import resource
import ssl
import time
from typing import cast

from google.protobuf.message import DecodeError

from om.node import gc_policy
from om.node.node import Node
from om.observe.http_endpoint import MetricsEndpoint
from om.observe.metrics import StateGauge
from om.protocol import om_pb2
from om.protocol.framing import FrameBuffer, FrameTooLarge, encode_frame
from om.security.tls import claimed_user_problem, peer_user, server_context

logger = logging.getLogger(__name__)
FD_HEADROOM = 1024          # descriptors beyond client connections: RocksDB, Raft, logs
REFUSAL_LOG_INTERVAL_S = 10.0


def _answer(status: om_pb2.Status.ValueType, message: str, call_id: int = 0) -> bytes:
    response = om_pb2.OMResponse(status=status, message=message, call_id=call_id)
    return encode_frame(response.SerializeToString())


def _invalid(message: str, call_id: int = 0) -> bytes:
    return _answer(om_pb2.INVALID_REQUEST, message, call_id)


class Connections:
    """The open client connections, bounded in number and in idle time."""

    def __init__(self, open_max: int, idle_s: float) -> None:
        assert open_max > 0
        assert idle_s > 0
        self.open_max = open_max
        self.idle_s = idle_s
        self.open: set[OMProtocol] = set()
        self.refused = 0
        self.closed_idle = 0
        self._refusal_logged_s = -math.inf

    def admit(self, connection: OMProtocol) -> bool:
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

    def state(self) -> dict[str, float]:
        """Gauges for /prom."""
        return {"open": len(self.open), "refused": self.refused, "closed_idle": self.closed_idle}

    def leave(self, connection: OMProtocol) -> None:
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


class OMProtocol(asyncio.BufferedProtocol):
    """One client connection; reads land in one reused buffer (``FrameBuffer``)."""

    def __init__(self, node: Node, connections: Connections) -> None:
        self._node = node
        self._connections = connections
        self._active_s = time.monotonic()
        limits = node.config.limits
        self._frames = FrameBuffer(limits.max_frame_bytes)
        self._in_flight_max = limits.connection_in_flight_max
        self._max_frame_bytes = limits.max_frame_bytes
        self._in_flight = 0
        self._paused = False
        self._transport: asyncio.Transport | None = None
        # Answers finished in one loop iteration, written together at its end: one send
        # (and one TLS record) for a committed batch's answers instead of one each.
        # At most connection_in_flight_max frames (each answer was in flight).
        self._replies: list[bytes] = []
        self._eof = False
        self._peer = ""
        self._user: str | None = None    # the client certificate's CN, with TLS
        # TLS admits clients without a certificate: each request must carry a token
        self._token_auth = node.tokens_enabled

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) else ""
        self._user = peer_user(transport.get_extra_info("peercert"))
        if not self._connections.admit(self):
            self._transport.write(_answer(
                om_pb2.SERVER_BUSY, f"{self._connections.open_max} client connections are "
                "open, the most this OM accepts; retry shortly"))
            self._transport.close()
            self._transport = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._connections.leave(self)

    def idle_since(self, now: float) -> float:
        """Seconds with nothing in flight and nothing received (0 while busy)."""
        return 0.0 if self._in_flight else now - self._active_s

    def close(self) -> None:
        """Closes the connection (idle for too long)."""
        if self._transport is not None:
            self._transport.close()

    def eof_received(self) -> bool:
        """A client that half-closes after sending still gets every answer."""
        self._eof = True
        return self._in_flight > 0   # True keeps the transport open until the last reply

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.writable()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._frames.received(nbytes)
        except FrameTooLarge as error:
            if self._transport is not None:
                self._transport.write(_invalid(str(error)))
                self._transport.close()
            return
        if self._transport is not None:   # else refused at connection_made
            self._requests_received(frames)

    def _requests_received(self, frames: list[bytes]) -> None:
        """Hands every request of one read to the node, in order: a group that the
        leader flow executes synchronously where nothing must wait."""
        assert self._transport is not None
        self._active_s = time.monotonic()
        for frame in frames:
            try:
                request = om_pb2.OMRequest.FromString(frame)
            except DecodeError:
                self._transport.write(_invalid("frame is not an OMRequest"))
                continue
            if self._user is not None:
                problem = claimed_user_problem(request.user, self._user)
                if problem is not None:
                    self._transport.write(_answer(om_pb2.PERMISSION_DENIED, problem,
                                                  request.call_id))
                    self._node.audit_refused(request, self._peer, problem)
                    continue
                request.user = self._user
            elif self._token_auth and not self._token_user(request):
                continue
            if request.HasField("token"):
                request.ClearField("token")   # authenticated: the flows never see it
            self._in_flight += 1
            self._node.submit(request, self._peer).add_done_callback(
                functools.partial(self._reply, request.call_id))
        if self._in_flight >= self._in_flight_max and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def _token_user(self, request: om_pb2.OMRequest) -> bool:
        """Sets the user of a request on a connection without a certificate from its
        delegation token; False (answered, and audited unless sent to the leader) when
        the token does not stand."""
        verdict = self._node.token_user(request)
        if isinstance(verdict, str) and request.user not in ("", verdict):
            verdict = om_pb2.OMResponse(
                cmd_type=request.cmd_type, status=om_pb2.PERMISSION_DENIED,
                call_id=request.call_id, message=f"User '{request.user}' is not the owner "
                f"'{verdict}' of the delegation token: a request may not act for another user")
        if isinstance(verdict, str):
            request.user = verdict
            return True
        assert self._transport is not None
        self._transport.write(self._frame(request.call_id, verdict))
        if verdict.status not in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY):
            self._node.audit_refused(request, self._peer, verdict.message,
                                     om_pb2.Status.Name(verdict.status))
        return False

    def _reply(self, call_id: int, answer: asyncio.Future[om_pb2.OMResponse]) -> None:
        """Sends the answer of one request (nothing when shutdown cancelled it)."""
        self._in_flight -= 1
        self._active_s = time.monotonic()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if not answer.cancelled():
            if not self._replies:
                asyncio.get_running_loop().call_soon(self._write_replies)
            self._replies.append(self._frame(call_id, answer.result()))
        if self._eof and self._in_flight == 0:
            self._write_replies()
            transport.close()
        elif self._paused and self._in_flight < self._in_flight_max // 2:
            self._paused = False
            transport.resume_reading()

    def _write_replies(self) -> None:
        """Writes the queued answers in one call (none once the connection closes)."""
        replies, self._replies = self._replies, []
        transport = self._transport
        if replies and transport is not None and not transport.is_closing():
            transport.write(b"".join(replies))

    def _frame(self, call_id: int, response: om_pb2.OMResponse) -> bytes:
        payload = response.SerializeToString()
        if len(payload) + 4 > self._max_frame_bytes:
            return _invalid("response over the frame limit; ask for fewer keys", call_id)
        return encode_frame(payload, self._max_frame_bytes)


CONNECTION_GAUGES = (
    StateGauge("open", "om_connections_open", "Client connections open now"),
    StateGauge("refused", "om_connections_refused", "Client connections refused at the cap "
               "(limits.connections_max)", counter=True),
    StateGauge("closed_idle", "om_connections_closed_idle", "Client connections closed "
               "after limits.connection_idle_s without traffic", counter=True),
)


def raft_security(node: Node) -> str:
    """", raft=..." for the start line: whether peers must hold the cluster secret."""
    if len(node.config.nodes) == 1:
        return ""
    if node.config.raft.secret:
        return ", raft=authenticated"
    return ", raft=UNAUTHENTICATED: no raft_secret_file"


def client_security(node: Node, context: ssl.SSLContext | None) -> str:
    """What the start line says of the client port."""
    if context is None:   # om serve alone, or om cluster up --insecure / --no-tls
        return "PLAIN, UNAUTHENTICATED: no [tls], any client may claim any user"
    tokens = " (or a delegation token)" if node.tokens_enabled else ""
    return f"TLS, certificate required{tokens}"


def start_metrics_endpoint(node: Node) -> MetricsEndpoint | None:
    """Serves the node's registry at http://host:http_port/prom (None when off)."""
    address = node.config.node
    if not address.http_port:
        return None
    return MetricsEndpoint(node.metrics.registry, address.host, address.http_port)


async def serve(node: Node, stop: asyncio.Event) -> None:
    """Serves clients until ``stop`` is set, then drains and closes the node.

    Every endpoint is bound before the node starts: a port taken by another
    process stops the start with nothing begun (OSError)."""
    address = node.config.node
    limits = node.config.limits
    connections = Connections(raise_fd_limit(limits.connections_max),
                              limits.connection_idle_s)
    node.metrics.add_state(CONNECTION_GAUGES, connections.state)
    endpoint = start_metrics_endpoint(node)
    tls = node.config.tls
    context = server_context(node.config.tls_path(tls.cert_file),
                             node.config.tls_path(tls.key_file),
                             node.config.tls_path(tls.ca_file)) if tls.enabled else None
    if context is not None and node.tokens_enabled:
        # a client without a certificate may connect; every request of it needs a
        # delegation token (OMProtocol._token_user)
        context.verify_mode = ssl.CERT_OPTIONAL
    try:
        server = await asyncio.get_running_loop().create_server(
            lambda: OMProtocol(node, connections), address.host, address.port,
            reuse_address=True, backlog=1024, start_serving=False, ssl=context)
    except OSError:
        if endpoint is not None:
            endpoint.close()
        raise
    await node.start()
    await server.start_serving()
    idle_closer = asyncio.get_running_loop().create_task(connections.close_idle_forever())
    metrics = f", metrics=http://{address.http_address}/prom" if endpoint else ""
    print(f"OM {node.config.node_id} listening on {address.address} "
          f"(execution={node.config.execution}, data={node.config.node_data_dir}, "
          f"durable={'yes' if node.config.raft.fsync else 'NO: fsync = false'}"
          f"{raft_security(node)}, clients={client_security(node, context)}"
          f"{metrics})",
          flush=True)
    try:
        with gc_policy.serving():
            await stop.wait()
    finally:
        idle_closer.cancel()
        server.close()
        await node.close()
        await server.wait_closed()
        if endpoint is not None:
            endpoint.close()
        print(f"OM {node.config.node_id} stopped", flush=True)
