"""Blocking connections to a peer node's client port (catch-up and integrity calls):
the client TLS context, the connection, and one answer off it.

A node calls its peers from worker threads over plain blocking sockets (the event
loop keeps serving clients); the answer to a request is the first frame carrying
its call id, or call id 0 (a refusal the peer sends before it read the id). Frames
for other call ids are answers to requests given up on earlier, and are skipped.
"""

from __future__ import annotations

import socket
import ssl

from om.config import ServerConfig
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, encode_frame
from om.security.tls import ClientTls


def client_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The node's client TLS context towards its peers (None when TLS is off)."""
    tls = config.tls
    if not tls.enabled:
        return None
    return ClientTls(config.tls_path(tls.client_cert_file), config.tls_path(tls.client_key_file),
                     config.tls_path(tls.ca_file)).context()


def connect(address: str, context: ssl.SSLContext | None,
            timeout_s: float) -> socket.socket | ssl.SSLSocket:
    """A blocking connection to ``address`` ("host:port"), TLS when ``context``."""
    host, _, port = address.rpartition(":")
    plain = socket.create_connection((host, int(port)), timeout=timeout_s)
    return plain if context is None else context.wrap_socket(plain, server_hostname=host)


def exchange(sock: socket.socket | ssl.SSLSocket, decoder: FrameDecoder,
             request: om_pb2.OMRequest, frame_max: int, address: str) -> om_pb2.OMResponse:
    """Sends ``request`` as one frame and reads until its answer; ConnectionResetError
    when the peer closes first (socket timeouts propagate)."""
    sock.sendall(encode_frame(request.SerializeToString(), frame_max))
    while True:
        data = sock.recv(1 << 20)
        if not data:
            raise ConnectionResetError(f"OM at {address} closed the connection")
        for payload in decoder.feed(data):
            response = om_pb2.OMResponse.FromString(payload)
            if response.call_id in (request.call_id, 0):
                return response
