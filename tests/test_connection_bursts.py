"""Connection bursts are answered: the listen backlog is the kernel's limit, a burst of
connections each sending one request is answered within 5 s, and a client that sends
writes and never reads its replies is cut off at ``connection_unsent_bytes_max``
with its writes applied exactly once, while another client stays served."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.config import ConfigError, Limits, ServerConfig
from om.node.accept import HANDSHAKE_SLOT_S
from om.node.connections import SOMAXCONN, SOMAXCONN_UNKNOWN, listen_backlog
from om.protocol import om_pb2
from om.protocol.client_version import CURRENT_VERSION
from om.protocol.framing import FrameDecoder, encode_frame
from om.security.certificates import CertificateAuthority
from om.security.tls import ClientTls
from tests.bursts import burst, create_volume_frame
from tests.processes import REPO, ServerProcess, free_port, read_answer

BURST_S = 5.0


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """This process may hold a few thousand sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 6_000:
        pytest.skip(f"the file-descriptor limit ({hard}) is too low for a burst")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 6_000), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_backlog_is_the_kernels_limit_capped_by_the_config(tmp_path: Path) -> None:
    kernel = tmp_path / "somaxconn"
    kernel.write_text("4096\n")
    assert listen_backlog(65_535, kernel) == 4096
    assert listen_backlog(100, kernel) == 100
    kernel.write_text("65535\n")
    assert listen_backlog(65_535, kernel) == 65_535
    assert listen_backlog(65_535, tmp_path / "absent") == SOMAXCONN_UNKNOWN
    if SOMAXCONN.exists():
        assert listen_backlog(1 << 20) == int(SOMAXCONN.read_text())


def test_an_unsent_bound_below_one_frame_is_refused() -> None:
    with pytest.raises(ConfigError, match="connection_unsent_bytes_max"):
        ServerConfig(limits=Limits(max_frame_bytes=1 << 20,
                                   connection_unsent_bytes_max=(1 << 20) - 1)).validate()
    ServerConfig(limits=Limits(max_frame_bytes=1 << 20,
                               connection_unsent_bytes_max=1 << 20)).validate()


def _connect_all(port: int, count: int, within_s: float) -> list[socket.socket]:
    """Starts ``count`` connects at once; the sockets whose handshake completed within
    ``within_s`` (the others are closed)."""
    selector = selectors.DefaultSelector()
    pending: set[socket.socket] = set()
    for _ in range(count):
        conn = socket.socket()
        conn.setblocking(False)
        conn.connect_ex(("127.0.0.1", port))
        selector.register(conn, selectors.EVENT_WRITE, conn)
        pending.add(conn)
    connected: list[socket.socket] = []
    deadline = time.monotonic() + within_s
    while pending and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
            conn = key.data
            selector.unregister(conn)
            pending.discard(conn)
            if conn.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                connected.append(conn)
            else:
                conn.close()
    for conn in pending:
        conn.close()
    selector.close()
    return connected


@pytest.mark.integration
@pytest.mark.usefixtures("many_descriptors")
def test_a_burst_past_1024_waits_in_the_backlog_and_is_answered(tmp_path: Path) -> None:
    """With the node stopped (SIGSTOP) the kernel alone completes handshakes, into the
    accept queue up to the backlog, and drops the SYNs past it (retried by the client's
    kernel a second or more later): 1,500 handshakes complete only with a backlog
    above 1,024. Once resumed, each connection's one request is answered."""
    count = 1_500
    kernel = int(SOMAXCONN.read_text()) if SOMAXCONN.exists() else 0
    if kernel <= count:
        pytest.skip(f"the kernel's somaxconn ({kernel}) is not above {count}")
    server = ServerProcess(tmp_path / "data", free_port())
    connected: list[socket.socket] = []
    try:
        time.sleep(0.3)   # the start-up probe's connection is accepted and gone
        server.process.send_signal(signal.SIGSTOP)
        try:
            connected = _connect_all(int(server.address.rsplit(":", 1)[1]), count, 0.8)
        finally:
            server.process.send_signal(signal.SIGCONT)
        assert len(connected) == count, "handshakes past the backlog were dropped"
        client_id = str(uuid.uuid4())
        started = time.monotonic()
        for call_id, conn in enumerate(connected, 1):
            conn.setblocking(True)
            conn.sendall(create_volume_frame(f"queued-{call_id}", client_id, call_id))
        for conn in connected:
            conn.settimeout(max(0.1, started + BURST_S - time.monotonic()))
            assert read_answer(conn).status == om_pb2.OK
        print(f"{count} connections queued while stopped, all answered in "
              f"{time.monotonic() - started:.2f} s")
    finally:
        for conn in connected:
            conn.close()
        server.stop()


def _burst_answered(tmp_path: Path, count: int) -> None:
    server = ServerProcess(tmp_path / "data", free_port())
    try:
        times = asyncio.run(burst(server.address, count, 0.0))
        answered = sorted(t for t in times if t is not None)
        late = [t for t in answered if t > BURST_S]
        print(f"{count} simultaneous connections: {len(answered)} answered, slowest "
              f"{answered[-1] if answered else float('nan'):.2f} s")
        assert len(answered) == count, f"{count - len(answered)} not answered"
        assert not late, f"{len(late)} answered after {BURST_S} s"
    finally:
        server.stop()


@pytest.mark.integration
@pytest.mark.usefixtures("many_descriptors")
def test_200_simultaneous_connections_are_all_answered_within_5s(tmp_path: Path) -> None:
    _burst_answered(tmp_path, 200)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.usefixtures("many_descriptors")
def test_2000_simultaneous_connections_are_all_answered_within_5s(tmp_path: Path) -> None:
    _burst_answered(tmp_path, 2_000)


UNSENT_MAX = 256 * 1024


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[ServerProcess]:
    config = tmp_path / "om.toml"
    config.write_text(f"[limits]\nmax_frame_bytes = {UNSENT_MAX}\n"
                      f"connection_unsent_bytes_max = {UNSENT_MAX}\n")
    server = ServerProcess(tmp_path / "data", free_port(), "--config", str(config))
    yield server
    server.stop()


def _flood_without_reading(address: str, client_id: str, writes_max: int,
                           timeout_s: float, listings_after: int = 0) -> int:
    """Sends CreateVolume writes in chunks and reads nothing, until the node cuts the
    connection off; the number of writes sent (at most ``writes_max``). With
    ``listings_after``, once that many writes are sent it sends listings of those
    volumes instead (a reply of ~60 KB each, where a write's is ~50 bytes): the
    kernel's socket buffers, megabytes, fill in seconds rather than minutes."""
    host, port = address.rsplit(":", 1)
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # little room to hide in
    conn.connect((host, int(port)))
    conn.settimeout(timeout_s)
    sent = 0
    listing = encode_frame(om_pb2.OMRequest(
        cmd_type=om_pb2.ListVolume, client_id=client_id, client_version=CURRENT_VERSION,
        user="bursts", list_volume=om_pb2.ListVolumeRequest(prefix="flood-", max_keys=1000),
    ).SerializeToString())
    try:
        for _ in range(writes_max):   # each turn sends 500 frames at least
            if listings_after and sent >= listings_after:
                conn.sendall(listing * 100)
                continue
            if sent >= writes_max:
                break
            chunk = [create_volume_frame(f"flood-{sent + i + 1}", client_id, sent + i + 1)
                     for i in range(500)]
            conn.sendall(b"".join(chunk))
            sent += len(chunk)
    except (ConnectionResetError, BrokenPipeError):
        return sent
    finally:
        conn.close()
    return sent


def _served_meanwhile(address: str, stop: threading.Event, latencies: list[float]) -> None:
    with OMClient([address], policy=RetryPolicy(deadline_s=30)) as om:
        while not stop.is_set() and len(latencies) < 100_000:
            started = time.perf_counter()
            om.info_volume("other")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.005)


@pytest.mark.integration
@pytest.mark.parametrize("listings_after", [
    pytest.param(2_000, id="writes-then-listings"),   # 2,000 writes, then big replies: ~10 s
    pytest.param(0, marks=pytest.mark.slow, id="writes-only"),   # ~66,000 writes: minutes
])
def test_a_client_that_never_reads_is_cut_off_with_its_writes_applied_once(
        bounded: ServerProcess, listings_after: int) -> None:
    with OMClient([bounded.address], policy=RetryPolicy(deadline_s=30)) as om:
        om.create_volume("other")
    stop = threading.Event()
    latencies: list[float] = []
    other = threading.Thread(target=_served_meanwhile, args=(bounded.address, stop, latencies))
    other.start()
    client_id = str(uuid.uuid4())
    try:
        sent = _flood_without_reading(bounded.address, client_id, 200_000, 60.0,
                                      listings_after)
    finally:
        stop.set()
        other.join(timeout=30)
    assert sent < 200_000, "a client that never reads was never cut off"
    assert not listings_after or sent == listings_after
    found = re.search(r"(\d+) bytes unsent, more than limits.connection_unsent_bytes_max",
                      bounded.log.read_text())
    assert found, "the cut-off is logged"
    # one loop iteration's replies past it: at most frames_per_turn, each a write's
    # (under 4 KiB) or a listing's (under a frame)
    reply_max = UNSENT_MAX if listings_after else 4096
    assert UNSENT_MAX < int(found.group(1)) < UNSENT_MAX + Limits().frames_per_turn * reply_max
    latencies.sort()
    p99_ms = latencies[int(0.99 * (len(latencies) - 1))] * 1000
    print(f"cut off after {sent} writes sent; another client's p99 meanwhile {p99_ms:.1f} ms "
          f"over {len(latencies)} calls")
    assert len(latencies) >= 10, "the other client was served meanwhile"
    assert p99_ms < 1000
    _retried_writes_answer_ok(bounded.address, client_id, sent)


def _retried_writes_answer_ok(address: str, client_id: str, sent: int) -> None:
    """Every write sent, retried with its call id on a new connection, answers OK: run
    once before (the stored reply) or dropped unrun and run now, never twice
    (VOLUME_ALREADY_EXISTS); and each volume exists."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        decoder = FrameDecoder()
        for first in range(1, sent + 1, 500):
            call_ids = range(first, min(first + 500, sent + 1))
            conn.sendall(b"".join(create_volume_frame(f"flood-{c}", client_id, c)
                                  for c in call_ids))
            answers: list[bytes] = []
            while len(answers) < len(call_ids):
                data = conn.recv(1 << 20)
                assert data, "closed while retrying"
                answers.extend(decoder.feed(data))
            statuses = {om_pb2.OMResponse.FromString(a).status for a in answers}
            assert statuses == {om_pb2.OK}, [om_pb2.Status.Name(s) for s in statuses]
    volumes: set[str] = set()
    with OMClient([address], policy=RetryPolicy(deadline_s=30)) as om:
        for _ in range(sent // 1000 + 2):
            page = om.list_volumes(prefix="flood-", start_key=max(volumes, default=""),
                                   max_keys=1000)
            volumes.update(v.volume for v in page.volume_info)
            if not page.truncated:
                break
    assert volumes == {f"flood-{c}" for c in range(1, sent + 1)}


LOAD_S = 7.0
LOAD_WRITERS = 4
BURST_AT_S = 2.5          # after the load process starts
WINDOW_S = 2.0            # writes started in this long from the burst's start
TLS_BURST = 500
PAIRS = 5
# The write p99 with the burst stays within this many times its value without: 2 where
# the node's loop, the Raft process and both clients have a core each. On 2 cores each
# new connection costs the node's loop about 2 ms of CPU, so 500 in a second take half
# of it whatever their order; measured x1.1-x2.7 over the runs with
# tls_handshakes_max = 4 (docs/PERFORMANCE.md, *Connection bursts*).
RATIO_MAX = 2.0 if len(os.sched_getaffinity(0)) >= 4 else 4.0


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """One TLS node; its address and the client certificate's files."""
    directory = tmp_path_factory.mktemp("tls-burst")
    authority = CertificateAuthority.create(directory / "ca")
    server_cert = authority.issue_server("om1")
    client_cert = authority.issue_client("bursts")
    config = directory / "om.toml"
    config.write_text(f'[tls]\ncert_file = "{server_cert.cert_file}"\n'
                      f'key_file = "{server_cert.key_file}"\nca_file = "{authority.ca_file}"\n')
    server = ServerProcess(directory / "data", free_port(), "--config", str(config))
    yield server.address, [str(client_cert.cert_file), str(client_cert.key_file),
                           str(authority.ca_file)]
    server.stop()


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[int(0.99 * (len(ordered) - 1))]


def _load_run(address: str, tls: list[str], with_burst: bool,
              out: Path) -> tuple[float, int]:
    """A write load of LOAD_WRITERS connections, with a burst of TLS_BURST new TLS
    connections within one second BURST_AT_S into it or not: the p99 of the writes
    started in the WINDOW_S from the burst's start (or where it would have started),
    and the burst's connections answered. The load writes to a file: its one line is
    longer than a pipe holds while nobody reads it."""
    command = [sys.executable, "-m", "tests.bursts"]
    launched = time.monotonic()
    with out.open("wb") as sink:
        load = subprocess.Popen([*command, "load", address, str(LOAD_S), str(LOAD_WRITERS),
                                 *tls], stdout=sink, cwd=REPO)
    time.sleep(BURST_AT_S)
    began, answered = launched + BURST_AT_S + 0.4, 0   # about when a burst would begin
    if with_burst:
        done = subprocess.run([*command, "burst", address, str(TLS_BURST), "1.0", *tls],
                              stdout=subprocess.PIPE, check=True, cwd=REPO, timeout=120)
        result = json.loads(done.stdout)
        began = result["began"]
        answered = sum(1 for t in result["times"] if t is not None)
        slowest = max((t for t in result["times"] if t is not None), default=math.inf)
        print(f"burst: {answered} answered, slowest {slowest:.2f} s")
        assert slowest <= BURST_S, f"a burst connection answered after {slowest:.2f} s"
    assert load.wait(timeout=120) == 0
    latencies = json.loads(out.read_text())["latencies"]
    window = [took for start, took in latencies if began <= start < began + WINDOW_S]
    assert len(window) >= 100, f"only {len(window)} writes in the window"
    return _p99(window), answered


@pytest.mark.integration
@pytest.mark.slow
def test_500_new_tls_connections_in_a_second_keep_the_write_p99(
        tls_node: tuple[str, list[str]], tmp_path: Path) -> None:
    """Alternated runs with and without the burst; the medians of their p99s."""
    address, tls = tls_node
    quiet: list[float] = []
    bursty: list[float] = []
    for _ in range(PAIRS):
        quiet.append(_load_run(address, tls, False, tmp_path / "load.json")[0])
        p99, answered = _load_run(address, tls, True, tmp_path / "load.json")
        assert answered == TLS_BURST, f"{TLS_BURST - answered} burst connections not answered"
        bursty.append(p99)
    ratio = statistics.median(bursty) / statistics.median(quiet)
    print(f"write p99 without a burst {[round(q * 1000, 1) for q in quiet]} ms, with "
          f"{TLS_BURST} new TLS connections in 1 s {[round(b * 1000, 1) for b in bursty]} ms: "
          f"x{ratio:.2f} (medians); load average {os.getloadavg()[0]:.2f}")
    assert ratio <= RATIO_MAX


@pytest.fixture
def one_handshake_node(tmp_path: Path) -> Iterator[tuple[str, ClientTls]]:
    """A TLS node that runs one handshake at a time (tls_handshakes_max = 1)."""
    authority = CertificateAuthority.create(tmp_path / "ca")
    server_cert = authority.issue_server("om1")
    client_cert = authority.issue_client("bursts")
    config = tmp_path / "om.toml"
    config.write_text(f'[limits]\ntls_handshakes_max = 1\n[tls]\n'
                      f'cert_file = "{server_cert.cert_file}"\n'
                      f'key_file = "{server_cert.key_file}"\nca_file = "{authority.ca_file}"\n')
    server = ServerProcess(tmp_path / "data", free_port(), "--config", str(config))
    yield server.address, ClientTls(client_cert.cert_file, client_cert.key_file,
                                    authority.ca_file)
    server.stop()


@pytest.mark.integration
def test_silent_connections_do_not_hold_the_handshake_slots(
        one_handshake_node: tuple[str, ClientTls]) -> None:
    """Four connections that never start their handshake delay a good client by at most
    HANDSHAKE_SLOT_S each, not until the handshake timeout (10 s) closes them."""
    address, tls = one_handshake_node
    host, port = address.rsplit(":", 1)
    time.sleep(0.3)   # the start-up probe's connection is gone
    silent = [socket.create_connection((host, int(port)), timeout=10) for _ in range(4)]
    try:
        started = time.monotonic()
        with OMClient([address], user="bursts", tls=tls,
                      policy=RetryPolicy(deadline_s=30, attempt_timeout_s=30)) as om:
            om.create_volume("behind-silent-ones")
        waited = time.monotonic() - started
        print(f"a good client behind 4 silent connections answered in {waited:.2f} s")
        assert waited < 4 * HANDSHAKE_SLOT_S + 2.0
    finally:
        for conn in silent:
            conn.close()
