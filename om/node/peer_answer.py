"""One answer off a blocking connection to a peer node (catch-up and integrity calls).

A node calls its peers from worker threads over plain blocking sockets (the event
loop keeps serving clients); the answer to a request is the first frame carrying
its call id, or call id 0 (a refusal the peer sends before it read the id). Frames
for other call ids are answers to requests given up on earlier, and are skipped.
"""

from __future__ import annotations

import socket
import ssl

from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, encode_frame


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
