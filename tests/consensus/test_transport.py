"""Raft frames: protocol-5 pickles, optional compression, no objects, bounded length;
acknowledgements held for the disk."""

from __future__ import annotations

import contextlib
import pickle
import select
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from om.cluster import lifecycle as om_cluster
from om.config import Raft
from om.consensus.port import ReplicateStatus
from om.consensus.pysyncobj import journal, transport
from om.consensus.pysyncobj.raft_log import RaftLog
from om.consensus.pysyncobj.transport import (
    COMPRESS_MIN_BYTES,
    FRAME_BYTES_MAX,
    WRITE_CHUNK_BYTES,
    FrameConnection,
    GroupCommitTransport,
    decode_frame,
    encode_frame,
)
from tests.consensus.raft_nodes import Applied as RaftApplied
from tests.consensus.raft_nodes import close_all, ready_leader, start_nodes


def test_frames_round_trip_raft_messages() -> None:
    message = {"type": "append_entries", "term": 3, "commit_index": 7,
               "entries": [(bytes(range(256)), 8, 3)], "prevLogIdx": 7, "prevLogTerm": 3}
    for compress in (False, True):
        assert decode_frame(encode_frame(message, compress)) == message


def test_bytes_are_not_inflated_and_small_frames_are_not_compressed() -> None:
    payload = bytes(range(256)) * 40
    assert len(encode_frame({"entries": [(payload, 1, 1)]}, compress=False)) < len(payload) + 80
    small = {"type": "next_node_idx", "next_node_idx": 5}
    assert encode_frame(small, compress=True)[:1] == b"\x00"
    big = {"entries": [(b"a" * COMPRESS_MIN_BYTES, 1, 1)]}
    assert encode_frame(big, compress=True)[:1] == b"\x01"
    assert len(encode_frame(big, compress=True)) < COMPRESS_MIN_BYTES // 4


class _Exploit:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("pwned",))


def test_a_frame_that_names_any_object_is_refused() -> None:
    with pytest.raises(pickle.UnpicklingError, match="no objects"):
        decode_frame(b"\x00" + pickle.dumps(_Exploit(), protocol=5))
    with pytest.raises(ValueError, match="flag"):
        decode_frame(b"\x07" + pickle.dumps({}, protocol=5))


async def test_a_stranger_on_the_raft_port_runs_nothing_and_stops_nothing(
        tmp_path: Path) -> None:
    nodes = await start_nodes(tmp_path)
    marker = tmp_path / "marker"
    try:
        leader = await ready_leader(nodes)
        payload = b"\x00" + pickle.dumps(_Touch(str(marker)), protocol=5)
        for node in nodes:
            raft = node.address
            for frame in (struct.pack("i", len(payload)) + payload,
                          struct.pack("i", FRAME_BYTES_MAX + 1) + b"x" * 100,
                          struct.pack("i", -5), b"\xff" * 64):
                with socket.create_connection((raft.host, raft.raft_port), timeout=5) as conn:
                    conn.sendall(frame)
        results = [await leader.replicator.replicate(b"after-%d" % i) for i in range(20)]
        assert all(r.status is ReplicateStatus.COMMITTED for r in results)
        assert leader.replicator.role().ready
        assert not marker.exists(), "a pickled call ran on a Raft port"
    finally:
        await close_all(nodes)


class _Touch:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


def _connection_to_a_peer_that_does_not_read() -> tuple[FrameConnection, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    connection = TcpConnection(createPoller("auto"), socket=ours, timeout=60.0)
    connection.__class__ = FrameConnection     # as GroupCommitTransport does
    return connection, theirs


def _frames(received: bytes) -> list[Any]:
    """The complete frames at the start of ``received``."""
    messages, offset = [], 0
    while offset + 4 <= len(received):
        (length,) = struct.unpack_from("i", received, offset)
        if offset + 4 + length > len(received):
            break
        messages.append(decode_frame(received[offset + 4:offset + 4 + length]))
        offset += 4 + length
    return messages


def test_a_peer_that_reads_slowly_costs_bounded_copies_and_gets_every_frame() -> None:
    """A leader streaming a snapshot chunk by chunk to a follower that does not read:
    the write buffer stays about WRITE_CHUNK_BYTES (pysyncobj's grew with every frame,
    and each send copied it whole), the rest waits, and all arrives in order."""
    connection, peer = _connection_to_a_peer_that_does_not_read()
    chunk = bytes(64 * 1024)
    try:
        for index in range(200):                       # 12.5 MB
            connection.send({"serialized": (index, chunk)})
            assert len(connection._TcpConnection__writeBuffer) <= WRITE_CHUNK_BYTES + 70_000
        assert connection._om_outbox
        received = bytearray()
        peer.settimeout(0.05)
        deadline = time.monotonic() + 30
        while len(received) < 200 * len(chunk) and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                received += peer.recv(1 << 20)
            connection._TcpConnection__trySendBuffer()
        with contextlib.suppress(TimeoutError):
            while len(_frames(bytes(received))) < 200 and time.monotonic() < deadline:
                received += peer.recv(1 << 20)
        assert [m["serialized"][0] for m in _frames(bytes(received))] == list(range(200))
    finally:
        connection.disconnect()
        peer.close()


def test_a_queue_past_its_bound_closes_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "OUTBOX_BYTES_MAX", 2 * 1024 * 1024)
    connection, peer = _connection_to_a_peer_that_does_not_read()
    try:
        for index in range(200):
            connection.send({"serialized": (index, bytes(64 * 1024))})
            if connection.state == CONNECTION_STATE.DISCONNECTED:
                break
        assert connection.state == CONNECTION_STATE.DISCONNECTED
        assert not connection._om_outbox, "a closed connection keeps no frames"
    finally:
        peer.close()


def test_an_acknowledgement_waits_for_the_disk_says_alive_and_dies_with_its_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower whose journal hangs: its acknowledgement is held (the Raft thread is
    not), after ALIVE_AFTER_S it sends an answer that claims nothing, a truncation
    of the entries it claims drops it, and the one for what replaced them goes
    once the disk is back."""
    sent: list[dict[str, Any]] = []

    def record(_self: object, _node: object, message: dict[str, Any]) -> bool:
        sent.append(message)
        return True

    monkeypatch.setattr(TCPTransport, "send", record)
    path = tmp_path / "raft.wal"
    spec = journal.spec_for(Raft(unsafe_journal_stall=True), path, tmp_path / "dump")
    assert spec.stall_file is not None
    spec.stall_file.touch()
    base = om_cluster.free_port_base(2)
    follower = RaftLog(f"127.0.0.1:{base}", [f"127.0.0.1:{base + 1}"],
                       SyncObjConf(autoTick=False, appendEntriesUseBatch=False,
                                   journalFile=str(path)),
                       lambda position, _entry: RaftApplied(position), False,
                       GroupCommitTransport)
    try:
        leader = next(iter(follower.otherNodes))
        sender = follower._SyncObj__transport

        def append(term: int, prev: int, prev_term: int, *indices: int) -> None:
            follower._SyncObj__onMessageReceived(leader, {
                "type": "append_entries", "term": term, "commit_index": 1,
                "prevLogIdx": prev, "prevLogTerm": prev_term,
                "entries": [(b"\x01", index, term) for index in indices]})
            sender.flush()          # as around every poll

        append(1, 1, 0, 2, 3)
        assert not sent, "an acknowledgement went before its entries were synced"
        time.sleep(transport.ALIVE_AFTER_S)
        sender.flush()
        assert sent == [{"type": "next_node_idx", "next_node_idx": 4, "reset": False,
                         "success": False}], "a follower waiting for its disk says alive"
        append(2, 2, 1, 3)          # a new leader replaces entry 3
        assert [h.message["for_prev"] for h in sender._held] == [2], \
            "the acknowledgement of the replaced entry 3 is gone"
        spec.stall_file.unlink()
        deadline = time.monotonic() + 5
        while not any(m["success"] for m in sent):
            assert time.monotonic() < deadline, "the acknowledgement never went"
            select.select([spec.journal.wake_fd], [], [], 0.05)   # type: ignore[union-attr]
            sender.flush()
        assert [m.get("for_prev") for m in sent if m["success"]] == [2]
    finally:
        follower._destroy()
