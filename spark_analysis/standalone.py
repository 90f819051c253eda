"""A local Spark standalone cluster, one master and one worker on 127.0.0.1.

    python -m spark_analysis.standalone up   [--dir D] [--master-port 7077] [--webui-port 8080]
    python -m spark_analysis.standalone down [--dir D]
    python -m spark_analysis.standalone status [--dir D]

The pip PySpark ships no ``sbin`` start scripts, but it ships ``bin/spark-class``,
which runs Spark's daemons: ``up`` starts ``org.apache.spark.deploy.master.Master``
and ``org.apache.spark.deploy.worker.Worker`` with it, each in a process group
of its own (the executors a worker launches join the worker's group), logs in
``D/master.log`` and ``D/worker.log``, and returns once the master's JSON page
(``http://127.0.0.1:WEBUI/json/``) lists the worker as ALIVE; then
``python -m spark_analysis RUN --master spark://127.0.0.1:PORT`` runs the job on it.

Bounded by construction: everything binds to 127.0.0.1 (``--host`` and
``SPARK_LOCAL_IP``, which Spark's web UIs and executors bind to as well); the
worker offers 1 core and 1 GB to executors, and the two daemons' heaps are capped
at 512 MB. ``down`` signals both process groups (SIGTERM, then SIGKILL after a
timeout), so no JVM outlives it; ``up`` refuses ports in use, and stops what it
started when a daemon exits or the worker does not register in time.
``D/standalone.json`` records the pids, ports and master URL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyspark

HOST = "127.0.0.1"
DEFAULT_DIR = Path("spark-standalone")
STATE_FILE = "standalone.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "512m"
WORKER_CORES = 1
WORKER_MEMORY = "1g"
# Daemons this process started, kept so they are reaped (not left as zombies) and
# so Python does not warn that a running child's Popen object was dropped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class StandaloneError(Exception):
    """The cluster could not be started, found or stopped."""


@dataclass(frozen=True)
class Standalone:
    """A started cluster: where it lives, how to reach it, which process groups are its."""

    directory: Path
    master_port: int
    webui_port: int
    worker_webui_port: int
    master_pid: int
    worker_pid: int

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def json_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}/json/"

    def save(self) -> None:
        record = {**asdict(self), "directory": str(self.directory),
                  "master_url": self.master_url}
        (self.directory / STATE_FILE).write_text(json.dumps(record, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Standalone:
        try:
            record = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError) as error:
            raise StandaloneError(f"no standalone cluster recorded in {directory}: {error}") \
                from None
        record.pop("master_url", None)
        record["directory"] = Path(record["directory"])
        return cls(**record)


def spark_class() -> Path:
    """The ``bin/spark-class`` of the installed PySpark (its SPARK_HOME)."""
    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


def _environment(directory: Path) -> dict[str, str]:
    """The daemons' environment: 127.0.0.1 only, bounded heaps, files under ``directory``."""
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP=HOST, SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
               SPARK_HOME=str(spark_class().parent.parent),
               SPARK_LOG_DIR=str(directory), SPARK_WORKER_DIR=str(directory / "work"))
    # The master's REST submission server would listen on a fixed port (6066) that
    # two clusters, or another user's, would share; jobs here come from spark-submit
    # or PySpark, which use the master URL. A taken port must fail the start, not
    # move the daemon to the next port, where the recorded URLs would not find it.
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false -Dspark.port.maxRetries=0"
    env["SPARK_WORKER_OPTS"] = "-Dspark.port.maxRetries=0"
    env.pop("SPARK_MASTER_HOST", None)
    return env


def _start(directory: Path, name: str, args: Sequence[str]) -> int:
    """Starts one daemon in a new process group, output to ``directory/<name>.log``."""
    with (directory / f"{name}.log").open("ab") as log:
        process = subprocess.Popen([str(spark_class()), *args], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_environment(directory), start_new_session=True)
    _CHILDREN[process.pid] = process
    return process.pid


def master_state(json_url: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The master's JSON status page (workers, apps), or None while it does not answer."""
    try:
        with urllib.request.urlopen(json_url, timeout=timeout_s) as answer:
            state = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def alive_workers(state: dict[str, Any] | None) -> int:
    """How many workers the master lists as ALIVE."""
    if state is None:
        return 0
    return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def up(directory: Path = DEFAULT_DIR, master_port: int = 7077, webui_port: int = 8080,
       worker_webui_port: int = 8081, timeout_s: float = 120.0) -> Standalone:
    """Starts a master and one worker; returns once the worker registered.

    StandaloneError, with the last log lines, when a daemon exits or the worker is
    not ALIVE within ``timeout_s``; both daemons are stopped again then."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / STATE_FILE).exists():
        raise StandaloneError(f"a standalone cluster is recorded in {directory}: "
                              "`down` it first")
    taken = [port for port in (master_port, webui_port, worker_webui_port)
             if not _port_free(port)]
    if taken:
        raise StandaloneError(f"ports in use on {HOST}: {taken}; nothing started")
    master = _start(directory, "master", [
        MASTER_CLASS, "--host", HOST, "--port", str(master_port),
        "--webui-port", str(webui_port)])
    worker = _start(directory, "worker", [
        WORKER_CLASS, f"spark://{HOST}:{master_port}", "--host", HOST,
        "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
        "--webui-port", str(worker_webui_port), "--work-dir", str(directory / "work")])
    cluster = Standalone(directory, master_port, webui_port, worker_webui_port, master, worker)
    cluster.save()
    try:
        _wait_registered(cluster, timeout_s)
    except BaseException:
        down(directory)
        raise
    return cluster


def _port_free(port: int) -> bool:
    """Whether a daemon could listen on 127.0.0.1:``port`` now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _wait_registered(cluster: Standalone, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, pid in (("master", cluster.master_pid), ("worker", cluster.worker_pid)):
            if not _alive(pid):
                raise StandaloneError(f"the {name} exited; last lines of its log:\n"
                                      f"{log_tail(cluster.directory / f'{name}.log')}")
        if alive_workers(master_state(cluster.json_url)) >= 1:
            return
        time.sleep(0.5)
    raise StandaloneError(f"no worker registered within {timeout_s:g} s; last lines of "
                          f"the worker's log:\n{log_tail(cluster.directory / 'worker.log')}")


def down(directory: Path = DEFAULT_DIR, timeout_s: float = 20.0) -> None:
    """Stops the worker (and its executors), then the master: SIGTERM to each process
    group, SIGKILL to what is left after ``timeout_s``. A no-op when nothing is recorded."""
    directory = directory.resolve()
    try:
        cluster = Standalone.load(directory)
    except StandaloneError:
        return
    for pid in (cluster.worker_pid, cluster.master_pid):
        _stop_group(pid, timeout_s)
    (directory / STATE_FILE).unlink(missing_ok=True)


def _stop_group(pid: int, timeout_s: float) -> None:
    """SIGTERM to the process group ``pid`` leads; SIGKILL once ``timeout_s`` passed."""
    if not _signal_group(pid, signal.SIGTERM):
        return
    deadline = time.monotonic() + timeout_s
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(pid, signal.SIGKILL)
    _reap(pid)


def _signal_group(pid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pid: int) -> bool:
    """Whether any process of the group ``pid`` leads still exists (zombies aside)."""
    _reap(pid)
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return any(_alive(member) for member in group_members(pid))


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (from /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _reap(pid: int) -> None:
    """Collects ``pid``'s exit status if it is our exited child (no zombie is left)."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"


def main(argv: Sequence[str] | None = None) -> int:
    """``up``, ``down`` or ``status``; exit 1 when the cluster failed or is not there."""
    parser = argparse.ArgumentParser(prog="python -m spark_analysis.standalone",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, dest="directory",
                        help=f"logs, work and state files (default ./{DEFAULT_DIR})")
    parser.add_argument("--master-port", type=int, default=7077)
    parser.add_argument("--webui-port", type=int, default=8080,
                        help="the master's web UI, whose /json up polls")
    parser.add_argument("--worker-webui-port", type=int, default=8081)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds up waits for the worker to register")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            cluster = up(args.directory, args.master_port, args.webui_port,
                         args.worker_webui_port, args.timeout)
            print(f"master {cluster.master_url} (UI http://{HOST}:{cluster.webui_port}), "
                  f"1 worker: {WORKER_CORES} core, {WORKER_MEMORY}; logs in {cluster.directory}")
        elif args.action == "down":
            down(args.directory)
        else:
            cluster = Standalone.load(args.directory.resolve())
            workers = alive_workers(master_state(cluster.json_url))
            print(f"master {cluster.master_url}: {workers} worker(s) alive")
            return 0 if workers else 1
    except StandaloneError as error:
        print(f"spark_analysis.standalone: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
