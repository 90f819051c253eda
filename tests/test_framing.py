"""Framing: any byte stream, whole or in pieces, decodes to its frames or WireError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from om.protocol.framing import FrameDecoder, FrameTooLarge, WireError, encode_frame

LIMIT = 1024


@given(st.lists(st.binary(max_size=LIMIT), max_size=20), st.data())
def test_frames_survive_any_split(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(p, LIMIT) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder(LIMIT)
    received: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        received.extend(decoder.feed(stream[start:cut]))
        start = cut
    assert received == payloads
    assert decoder.buffered_bytes == 0


@given(st.binary(max_size=4096))
def test_arbitrary_bytes_give_frames_or_wire_error(garbage: bytes) -> None:
    decoder = FrameDecoder(LIMIT)
    try:
        for i in range(len(garbage)):
            for frame in decoder.feed(garbage[i:i + 1]):
                assert len(frame) <= LIMIT
    except WireError:
        pass
    assert decoder.buffered_bytes < 4 + LIMIT


def test_oversized_frame_is_refused_before_its_payload() -> None:
    decoder = FrameDecoder(LIMIT)
    with pytest.raises(FrameTooLarge):
        decoder.feed((LIMIT + 1).to_bytes(4, "big"))
    with pytest.raises(FrameTooLarge):
        encode_frame(b"x" * (LIMIT + 1), LIMIT)
