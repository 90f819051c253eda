"""Connections are bounded: a cap that refuses and recovers, idle ones closed,
and a flood of idle connections and garbage that leaves a good client served."""

from __future__ import annotations

import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.protocol import om_pb2
from tests.processes import ServerProcess, free_port, read_answer

pytestmark = pytest.mark.integration


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[ServerProcess]:
    config = tmp_path / "om.toml"
    config.write_text("[limits]\nconnections_max = 20\nconnection_idle_s = 2.0\n")
    server = ServerProcess(tmp_path / "data", free_port(), "--config", str(config))
    yield server
    server.stop()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def test_the_connection_cap_refuses_and_recovers(capped: ServerProcess) -> None:
    time.sleep(0.2)  # the start-up probe's connection is gone
    held = [_connect(capped.address) for _ in range(20)]
    with _connect(capped.address) as refused:
        answer = read_answer(refused)
        assert answer.status == om_pb2.SERVER_BUSY
        assert "connections" in answer.message
        assert refused.recv(1) == b"", "a refused connection is closed"
    with OMClient([capped.address], policy=RetryPolicy(deadline_s=1)) as om:
        busy = om.call_raw(om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume,
                                            create_volume=om_pb2.CreateVolumeRequest(
                                                volume="while-full")))
        assert busy.status == om_pb2.SERVER_BUSY
    for conn in held[:5]:
        conn.close()
    time.sleep(0.2)
    with OMClient([capped.address], policy=RetryPolicy(deadline_s=5)) as om:
        assert om.create_volume("after").volume == "after"
    log = capped.log.read_text()
    assert log.count("client connections open") == 1, "refusals are logged once per interval"
    for conn in held[5:]:
        conn.close()


def test_idle_connections_are_closed(capped: ServerProcess) -> None:
    with _connect(capped.address) as idle:
        started = time.monotonic()
        assert idle.recv(1) == b""
        assert 1.5 < time.monotonic() - started < 8


def test_a_good_client_is_served_through_thousands_of_idle_connections_and_garbage(
        tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 6_000:
        pytest.skip(f"the file-descriptor limit ({hard}) is too low for 5,000 connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 6_000), hard))
    server = ServerProcess(tmp_path / "data", free_port())
    idle: list[socket.socket] = []
    stop = threading.Event()
    try:
        idle = [_connect(server.address) for _ in range(5_000)]
        garbage = threading.Thread(target=_send_garbage, args=(server.address, stop))
        garbage.start()
        latencies: list[float] = []
        with OMClient([server.address], policy=RetryPolicy(deadline_s=10)) as om:
            om.create_volume("vol")
            for _ in range(300):
                started = time.perf_counter()
                om.info_volume("vol")
                latencies.append(time.perf_counter() - started)
        stop.set()
        garbage.join(timeout=10)
        latencies.sort()
        p99_ms = latencies[int(0.99 * (len(latencies) - 1))] * 1000
        print(f"good client with 5,000 idle connections and garbage: p99 {p99_ms:.1f} ms")
        assert p99_ms < 1000
    finally:
        stop.set()
        for conn in idle:
            conn.close()
        server.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _send_garbage(address: str, stop: threading.Event) -> None:
    """Malformed frames in a loop: not protobuf, then a frame over the size limit."""
    while not stop.is_set():
        with _connect(address) as conn:
            conn.sendall(b"\x00\x00\x00\x05hello" * 20)
            conn.sendall(b"\x7f\xff\xff\xff")
            time.sleep(0.01)
