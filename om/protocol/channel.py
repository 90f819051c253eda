"""The channel between processes of one node: pickled messages, length-framed.

Messages are tuples whose first item names them, pickled (protocol 5) and
framed with a 4-byte length. A channel is a private socketpair between two
processes of the same program (a node and its Raft process,
``om.consensus.pysyncobj.process``; a node and its front workers,
``om.node.front_pool``), so the pickles may carry objects; nothing from the network
reaches it. Sans-IO: ``encode`` makes a frame, ``FrameReader`` cuts them.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

FRAME_BYTES_MAX = 64 * 1024 * 1024
_LENGTH = struct.Struct("<I")
Message = tuple[Any, ...]


class ChannelError(Exception):
    """The other side sent something that is not a frame of this channel."""


def encode(message: Message) -> bytes:
    """One frame."""
    payload = pickle.dumps(message, protocol=5)
    assert len(payload) <= FRAME_BYTES_MAX, "entries are bounded far below the frame limit"
    return _LENGTH.pack(len(payload)) + payload


class FrameReader:
    """Splits a byte stream into messages."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        """The messages completed by ``data``."""
        self._buffer += data
        messages: list[Message] = []
        offset = 0
        while len(self._buffer) - offset >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer, offset)
            if length > FRAME_BYTES_MAX:
                raise ChannelError(f"a frame of {length} bytes")
            end = offset + _LENGTH.size + length
            if end > len(self._buffer):
                break
            message = pickle.loads(self._buffer[offset + _LENGTH.size:end])
            if not isinstance(message, tuple) or not message:
                raise ChannelError(f"not a message: {type(message).__name__}")
            messages.append(message)
            offset = end
        del self._buffer[:offset]
        return messages
