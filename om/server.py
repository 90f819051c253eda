"""The client RPC server: length-prefixed protobuf frames over TCP, on uvloop.

Each connection may pipeline up to ``connection_in_flight_max`` requests;
past that the server stops reading from it until answers go out
(back-pressure through TCP). Responses carry the request's call id and may
return out of order. A frame over the size limit gets an INVALID_REQUEST
answer and the connection is closed (the stream cannot be resynchronised); a
frame that is not an OMRequest gets INVALID_REQUEST and the connection lives
on. Neither affects other connections.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import cast

from google.protobuf.message import DecodeError

from om import gc_policy
from om.node import Node
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, FrameTooLarge, encode_frame

logger = logging.getLogger(__name__)


def _invalid(message: str, call_id: int = 0) -> bytes:
    response = om_pb2.OMResponse(status=om_pb2.INVALID_REQUEST, message=message,
                                 call_id=call_id)
    return encode_frame(response.SerializeToString())


class OMProtocol(asyncio.Protocol):
    """One client connection."""

    def __init__(self, node: Node) -> None:
        self._node = node
        limits = node.config.limits
        self._decoder = FrameDecoder(limits.max_frame_bytes)
        self._in_flight_max = limits.connection_in_flight_max
        self._max_frame_bytes = limits.max_frame_bytes
        self._in_flight = 0
        self._paused = False
        self._transport: asyncio.Transport | None = None
        self._eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def eof_received(self) -> bool:
        """A client that half-closes after sending still gets every answer."""
        self._eof = True
        return self._in_flight > 0   # True keeps the transport open until the last reply

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as error:
            self._transport.write(_invalid(str(error)))
            self._transport.close()
            return
        for frame in frames:
            try:
                request = om_pb2.OMRequest.FromString(frame)
            except DecodeError:
                self._transport.write(_invalid("frame is not an OMRequest"))
                continue
            self._in_flight += 1
            self._node.submit(request).add_done_callback(
                functools.partial(self._reply, request.call_id))
        if self._in_flight >= self._in_flight_max and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def _reply(self, call_id: int, answer: asyncio.Future[om_pb2.OMResponse]) -> None:
        """Sends the answer of one request (nothing when shutdown cancelled it)."""
        self._in_flight -= 1
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if not answer.cancelled():
            transport.write(self._frame(call_id, answer.result()))
        if self._eof and self._in_flight == 0:
            transport.close()
        elif self._paused and self._in_flight < self._in_flight_max // 2:
            self._paused = False
            transport.resume_reading()

    def _frame(self, call_id: int, response: om_pb2.OMResponse) -> bytes:
        payload = response.SerializeToString()
        if len(payload) + 4 > self._max_frame_bytes:
            return _invalid("response over the frame limit; ask for fewer keys", call_id)
        return encode_frame(payload, self._max_frame_bytes)


async def serve(node: Node, stop: asyncio.Event) -> None:
    """Serves clients until ``stop`` is set, then drains and closes the node."""
    address = node.config.node
    await node.start()
    server = await asyncio.get_running_loop().create_server(
        lambda: OMProtocol(node), address.host, address.port, reuse_address=True)
    print(f"OM {node.config.node_id} listening on {address.address} "
          f"(execution={node.config.execution}, data={node.config.node_data_dir}, "
          f"durable={'yes' if node.config.raft.fsync else 'NO: fsync = false'})", flush=True)
    try:
        with gc_policy.serving():
            await stop.wait()
    finally:
        server.close()
        await node.close()
        await server.wait_closed()
        print(f"OM {node.config.node_id} stopped", flush=True)
