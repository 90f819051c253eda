"""A node's Raft runs in a child process: the two share their fate.

* The Raft process dies: the server stops (fail-stop), it does not go on
  serving reads from a store nothing updates.
* The server dies: the Raft process exits, it does not go on voting and
  heartbeating for a node that cannot serve.
* The server stops (SIGSTOP of that process alone): the Raft process stops
  ticking, so the others elect a leader that can serve.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from om.protocol.channel import ChannelError, FrameReader, encode
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration


def _raft_child(cluster: om_cluster.Cluster, node_id: str) -> int:
    pid = cluster.pid(node_id)
    assert pid is not None
    (child,) = (int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    assert "om.consensus.pysyncobj.child" in Path(f"/proc/{child}/cmdline").read_text()
    return child


def _gone(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path / "cluster")
    yield started
    om_cluster.down(started)


def test_when_the_raft_process_dies_the_server_stops(cluster: om_cluster.Cluster) -> None:
    leader = harness.leader_id(cluster)
    server = cluster.pid(leader)
    assert server is not None
    os.kill(_raft_child(cluster, leader), signal.SIGKILL)
    assert _gone(server), "the server outlived its Raft process"
    assert "the Raft process exited" in (cluster.directory / f"{leader}.log").read_text()
    assert harness.leader_id(cluster) != leader
    with harness.client(cluster) as om:
        om.create_volume("after")


def test_when_the_server_dies_the_raft_process_exits(cluster: om_cluster.Cluster) -> None:
    leader = harness.leader_id(cluster)
    server = cluster.pid(leader)
    child = _raft_child(cluster, leader)
    assert server is not None
    os.kill(server, signal.SIGKILL)  # the server alone, not its process group
    assert _gone(child), "the Raft process outlived its server"
    assert harness.leader_id(cluster) != leader


def test_a_stopped_server_gives_up_leadership(cluster: om_cluster.Cluster) -> None:
    leader = harness.leader_id(cluster)
    server = cluster.pid(leader)
    assert server is not None
    os.kill(server, signal.SIGSTOP)  # its Raft process keeps running
    try:
        deadline = time.monotonic() + 20
        while True:
            infos = [i for i in cluster.node_infos() if i.role == "LEADER"]
            if infos and infos[0].node_id != leader:
                break
            assert time.monotonic() < deadline, "a stopped server kept the leadership"
            time.sleep(0.1)
        with harness.client(cluster) as om:
            om.create_volume("while-stopped")
    finally:
        os.kill(server, signal.SIGCONT)
    harness.wait_converged(cluster)


def test_channel_frames_round_trip_and_refuse_garbage() -> None:
    reader = FrameReader()
    frames = encode(("apply", 7, b"entry")) + encode(("state", True, 3, "n1", 9, False))
    assert reader.feed(frames[:5]) == []
    assert reader.feed(frames[5:]) == [("apply", 7, b"entry"), ("state", True, 3, "n1", 9, False)]
    with pytest.raises(ChannelError, match="bytes"):
        FrameReader().feed(b"\xff\xff\xff\xff")
    listed = pickle.dumps([1, 2], protocol=5)
    with pytest.raises(ChannelError, match="not a message"):
        FrameReader().feed(struct.pack("<I", len(listed)) + listed)
