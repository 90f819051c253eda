"""Front workers: a node's client port served by several processes (om/node/front_pool.py).

Real ``om serve`` processes on 127.0.0.1: requests over many connections reach
the node through every front and are answered once each; a front that dies
stops its node (fail-stop, as the Raft process); a node that dies takes its
fronts with it; the connection cap is shared among the fronts.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.node.front_pool import listening_sockets
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder
from tests.processes import ServerProcess, free_port

pytestmark = pytest.mark.integration
WORKERS = 2


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _fronts(server: ServerProcess, timeout_s: float = 20.0) -> list[int]:
    """The node's front processes, once it has started all of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        fronts = [child for child in _children(server.process.pid)
                  if b"om.node.front_worker" in Path(f"/proc/{child}/cmdline").read_bytes()]
        if len(fronts) == WORKERS or time.monotonic() > deadline:
            return fronts
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0


def _established(pid: int) -> int:
    """TCP sockets process ``pid`` holds (its client connections and listener)."""
    return sum(1 for fd in Path(f"/proc/{pid}/fd").iterdir()
               if os.readlink(fd).startswith("socket:"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", free_port(), "--workers", str(WORKERS))
    yield process
    process.kill()


def test_the_node_starts_its_fronts_and_says_so(server: ServerProcess) -> None:
    assert len(_fronts(server)) == WORKERS
    deadline = time.monotonic() + 10
    while "workers=2 (front processes" not in server.log.read_text():
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.05)


def test_many_connections_are_spread_over_the_fronts_and_answered_once(
        server: ServerProcess) -> None:
    clients = [OMClient([server.address], user="alice", client_id=f"c{i}",
                        policy=RetryPolicy(deadline_s=20, attempt_timeout_s=5))
               for i in range(16)]
    try:
        clients[0].create_volume("vol")
        clients[0].create_bucket("vol", "bkt")
        before = {pid: _established(pid) for pid in _fronts(server)}
        for i, client in enumerate(clients):
            client.put_key("vol", "bkt", f"k{i}", 10)
        after = {pid: _established(pid) for pid in _fronts(server)}
        assert all(after[pid] > before[pid] for pid in after), \
            f"every front serves some of the 16 connections: {before} -> {after}"
        listed = clients[0].list_keys("vol", "bkt").key_info
        assert sorted(k.key_name for k in listed) == sorted(f"k{i}" for i in range(16))
        assert clients[0].info_bucket("vol", "bkt").used_namespace == 16, "each put once"
    finally:
        for client in clients:
            client.close()


def test_a_front_that_dies_stops_its_node(server: ServerProcess) -> None:
    victim = _fronts(server)[0]
    os.kill(victim, signal.SIGKILL)
    assert server.process.wait(timeout=20) == 70, "fail-stop, as when the Raft process dies"


def test_a_node_that_dies_takes_its_fronts_with_it(server: ServerProcess) -> None:
    fronts = _fronts(server)
    server.kill()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in fronts):
        assert time.monotonic() < deadline, "a front outlived its node"
        time.sleep(0.05)


def test_a_front_whose_node_dies_before_its_setup_exits() -> None:
    """The node killed while its front was still starting: the front must not wait forever."""
    listener = listening_sockets("127.0.0.1", free_port(), 1, 128)[0]
    ours, theirs = socket.socketpair()
    front = subprocess.Popen(
        [sys.executable, "-m", "om.node.front_worker", str(theirs.fileno()),
         str(listener.fileno())],
        pass_fds=(theirs.fileno(), listener.fileno()))
    theirs.close()
    listener.close()
    ours.close()                    # the node is gone before it sent the setup
    try:
        assert front.wait(timeout=30) == 0
    finally:
        front.kill()


def test_a_graceful_stop_answers_what_is_in_flight_then_stops_the_fronts(
        server: ServerProcess) -> None:
    with OMClient([server.address], user="alice") as om:
        om.create_volume("vol")
    fronts = _fronts(server)
    assert server.stop() == 0
    assert not any(_alive(pid) for pid in fronts)


def test_the_connection_cap_is_shared_by_the_fronts(tmp_path: Path) -> None:
    config = tmp_path / "om.toml"
    config.write_text(f"workers = {WORKERS}\n[limits]\nconnections_max = {WORKERS}\n")
    server = ServerProcess(tmp_path / "data", free_port(), "--config", str(config))
    host, port = server.address.split(":")
    opened: list[socket.socket] = []
    try:
        opened.extend(socket.create_connection((host, int(port)), timeout=5)
                      for _ in range(12))
        # An admitted connection hears nothing (the server waits for a request); each
        # refused one gets SERVER_BUSY, sooner or later on a busy machine.
        answered: set[socket.socket] = set()
        deadline = time.monotonic() + 20
        while len(answered) < 12 - WORKERS and time.monotonic() < deadline:
            readable, _, _ = select.select([c for c in opened if c not in answered], [], [],
                                           0.5)
            for conn in readable:
                (frame,) = FrameDecoder().feed(conn.recv(65536))
                assert om_pb2.OMResponse.FromString(frame).status == om_pb2.SERVER_BUSY
                answered.add(conn)
        assert len(answered) >= 12 - WORKERS, "each front admits its share, one connection"
    finally:
        for conn in opened:
            conn.close()
        server.kill()
