"""A connection hands the node at most ``frames_per_turn`` frames per turn of the event
loop, in order, so what became ready meanwhile (a commit notice) runs between turns."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from om.config import Limits
from om.node.connections import ClientConnection, Connections, Requester
from om.protocol.framing import encode_frame


class _Transport:
    """Just enough of an asyncio transport for ClientConnection."""

    def __init__(self) -> None:
        self.closing = False
        self.written: list[bytes] = []

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def get_write_buffer_size(self) -> int:
        return 0   # the kernel took every write

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None


def _feed(connection: ClientConnection, frames: list[bytes]) -> None:
    data = b"".join(encode_frame(f) for f in frames)
    buffer = connection.get_buffer(len(data))
    buffer[:len(data)] = data
    connection.buffer_updated(len(data))


async def test_a_read_of_many_frames_is_handed_over_in_turns() -> None:
    """A notice readable on another socket (the Raft process's channel) is handled
    between two turns, not after the last of the read's frames."""
    events: list[str] = []

    def sink(connection: Requester, frames: list[bytes]) -> None:
        events.append(",".join(f.decode() for f in frames))
        for _ in frames:
            connection.deliver(b"")

    loop = asyncio.get_running_loop()
    notice, notifier = socket.socketpair()
    notifier.send(b"!")

    def noticed() -> None:
        loop.remove_reader(notice.fileno())
        events.append("commit notice")

    connection = ClientConnection(Limits(frames_per_turn=4), Connections(10, 60.0), sink)
    connection.connection_made(_Transport())  # type: ignore[arg-type]
    _feed(connection, [str(i).encode() for i in range(14)])
    loop.add_reader(notice.fileno(), noticed)
    _feed(connection, [b"14", b"15"])      # a later read waits behind the earlier frames
    assert events == ["0,1,2,3"]
    for _ in range(8):
        await asyncio.sleep(0)
    notice.close()
    notifier.close()
    frames = [e for e in events if e != "commit notice"]
    assert frames == ["0,1,2,3", "4,5,6,7", "8,9,10,11", "12,13,14,15"]
    assert 0 < events.index("commit notice") < len(events) - 1
    assert connection.in_flight == 0


async def test_a_small_read_is_handed_over_at_once_and_a_closed_connections_frames_dropped(
        ) -> None:
    handed: list[list[bytes]] = []
    connection = ClientConnection(Limits(frames_per_turn=4), Connections(10, 60.0),
                                  lambda connection, frames: handed.append(frames))
    transport = _Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    _feed(connection, [b"a", b"b"])
    assert handed == [[b"a", b"b"]]
    _feed(connection, [b"c", b"d", b"e", b"f", b"g", b"h"])
    transport.closing = True
    for _ in range(3):
        await asyncio.sleep(0)
    assert handed == [[b"a", b"b"], [b"c", b"d", b"e", b"f"]]
