"""Raft frames: protocol-5 pickles, optional compression, no objects, bounded length."""

from __future__ import annotations

import pickle
import socket
import struct
from pathlib import Path

import pytest

from om.consensus.port import ReplicateStatus
from om.consensus.pysyncobj.transport import (
    COMPRESS_MIN_BYTES,
    FRAME_BYTES_MAX,
    decode_frame,
    encode_frame,
)
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
