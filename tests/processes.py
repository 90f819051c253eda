"""Starting real OM processes on 127.0.0.1 for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def worker_free_ports(worker: int, workers: int) -> tuple[int, int]:
    """The share [low, high) of ``free_port_base``'s ports for pytest-xdist worker
    ``worker`` of ``workers``: disjoint from every other worker's, so two workers starting
    clusters at once never pick one base (``$OM_FREE_PORTS``)."""
    assert 0 <= worker < workers
    low, high = om_cluster.FREE_PORTS_LOW, om_cluster.EPHEMERAL_BELOW
    share = (high - low) // workers // om_cluster.PORT_RANGE * om_cluster.PORT_RANGE
    assert share >= om_cluster.PORT_RANGE, f"{workers} workers leave no port range each"
    return low + worker * share, low + (worker + 1) * share


def read_answer(conn: socket.socket) -> om_pb2.OMResponse:
    """The first response frame ``conn`` receives."""
    decoder = FrameDecoder()
    while True:
        data = conn.recv(65536)
        assert data, "closed without an answer"
        frames = decoder.feed(data)
        if frames:
            return om_pb2.OMResponse.FromString(frames[0])


def om_command(*args: str) -> list[str]:
    """The command line running ``om`` with this interpreter."""
    return [sys.executable, "-m", "om", *args]


# The plugins the suites that tests write for pytest runs of their own use.
INNER_PYTEST_PLUGINS = ("xdist.plugin", "pytest_timeout", "pytest_asyncio.plugin")


def inner_pytest(directory: Path, *args: str,
                 timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Runs pytest on the suite a test wrote in ``directory``, with only the plugins
    such suites use: autoloading every installed one (hypothesis, locust) costs about
    2 s of CPU a process, and these runs start a dozen processes (xdist workers too)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    plugins = [arg for plugin in INNER_PYTEST_PLUGINS for arg in ("-p", plugin)]
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugins,
                           *args], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)


class ServerProcess:
    """``om serve`` as a child process; ``stop`` sends SIGTERM and waits."""

    def __init__(self, data_dir: Path, port: int, *extra: str) -> None:
        if "--http-port" not in extra:  # not Ozone's 9874: tests run side by side
            extra = (*extra, "--http-port", "0")
        self.address = f"127.0.0.1:{port}"
        self.log = data_dir.parent / f"serve-{port}.log"
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                om_command("serve", "--data-dir", str(data_dir), "--port", str(port), *extra),
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        self._wait_listening(port)

    def _wait_listening(self, port: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"om serve exited: {self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"om serve did not listen within {timeout_s} s")

    def stop(self, timeout_s: float = 20.0) -> int:
        """Graceful shutdown; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """kill -9."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass(frozen=True)
class BenchRun:
    """A finished ``om bench`` run: its directory and what it printed."""

    out: Path
    stdout: str
