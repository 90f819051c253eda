"""Length-prefixed framing, sans-IO: bytes in, frames out.

A frame is a 4-byte big-endian unsigned length followed by that many bytes.
The decoder never buffers more than one frame plus its header: a length over
``max_frame_bytes`` raises ``FrameTooLarge`` before any payload is read, so a
hostile peer cannot make the server allocate unbounded memory.

Invariant: for any byte stream fed in any split, ``FrameDecoder`` either
yields exactly the frames that were encoded, or raises ``WireError``; never
any other exception (tests/test_framing.py fuzzes it).
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024


class WireError(Exception):
    """The peer sent bytes that are not a valid frame or message."""


class FrameTooLarge(WireError):
    """A frame's announced length is over the limit."""


def encode_frame(payload: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """Returns the payload with its length prefix."""
    if len(payload) > max_frame_bytes:
        raise FrameTooLarge(f"frame of {len(payload)} bytes is over the {max_frame_bytes} limit")
    return HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Accumulates received bytes and splits them into frames."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        assert max_frame_bytes > 0
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Adds received bytes; returns every frame now complete, in order.

        Raises:
            FrameTooLarge: a frame announces a length over the limit.
        """
        self._buffer += data
        frames: list[bytes] = []
        while len(self._buffer) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buffer)
            if length > self._max_frame_bytes:
                raise FrameTooLarge(
                    f"frame of {length} bytes is over the {self._max_frame_bytes} limit"
                )
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append(bytes(self._buffer[HEADER.size : end]))
            del self._buffer[:end]
        assert len(self._buffer) < HEADER.size + self._max_frame_bytes
        return frames

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)
