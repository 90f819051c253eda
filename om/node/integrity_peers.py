"""A node's blocking link to a peer's client port, for the continuous verification.

Each node's self-check (``om.integrity.continuous``) asks its peers for their
roots, levels and leaf rows at a verify position, on the verifier's worker
thread: one connection a peer (TLS with the [tls] client certificate when the
port needs it, as catch-up uses it), opened on first use, reopened after a
failure, each answer awaited for at most ``ANSWER_TIMEOUT_S``. A refusal or a
lost connection is a ``ReplicaError``: the check goes on without that peer.
"""

from __future__ import annotations

import socket
import threading

from om.config import ServerConfig
from om.integrity.compare import ReplicaError
from om.node.peer_answer import client_context, connect, exchange
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder

ANSWER_TIMEOUT_S = 60.0    # a level or a page of leaf rows from a busy peer's checkpoint


class PeerLink:
    """Requests to one peer, one at a time."""

    def __init__(self, config: ServerConfig, address: str) -> None:
        self._address = address
        self._frame_max = config.limits.max_frame_bytes
        self._client_id = f"verify-{config.node_id}"
        self._context = client_context(config)
        self._socket: socket.socket | None = None
        self._decoder = FrameDecoder(self._frame_max)
        self._next_call = 1
        self._lock = threading.Lock()

    def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """The peer's OK answer; ReplicaError otherwise."""
        with self._lock:
            request.client_id, request.call_id = self._client_id, self._next_call
            self._next_call += 1
            try:
                response = self._round_trip(request)
            except (OSError, ValueError) as error:
                self.close()
                raise ReplicaError(f"{self._address} did not answer: {error}") from None
        if response.status != om_pb2.OK:
            raise ReplicaError(f"{om_pb2.Status.Name(response.status)} {response.message}")
        return response

    def _round_trip(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        if self._socket is None:
            self._socket = connect(self._address, self._context, ANSWER_TIMEOUT_S)
            self._decoder = FrameDecoder(self._frame_max)
        return exchange(self._socket, self._decoder, request, self._frame_max, self._address)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
