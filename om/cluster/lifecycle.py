"""Local clusters of real OM processes: configuration, start, stop, inspect.

``om cluster up`` writes ``DIR/cluster.toml``, starts one ``om serve`` process
per node (logs in ``DIR/<id>.log``, pids in ``DIR/<id>.pid``), waits until a
leader is ready, and remembers ``DIR`` as the last cluster started (so
``om admin roles`` and ``om cluster down`` find it with no options), after the
others it remembers (``known``: the tools find a cluster's certificate from any
of its current members' addresses, ``serving``).
"""

from __future__ import annotations

import getpass
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from om import config as om_config
from om.client import OMClient, OMClientError, OMTlsError
from om.client.retry_policy import RetryPolicy
from om.config import ConfigError, NodeAddress, ServerConfig
from om.consensus.pysyncobj.journal import stall_file
from om.protocol import om_pb2
from om.security.certificates import CertificateAuthority
from om.security.tls import ClientTls
from om.statemachine.store import Store

DEFAULT_DIR = Path("om-cluster")
# The clusters started here, the last one first, one directory a line; under
# $XDG_CACHE_HOME when set (the test suite sets it, so it never touches the user's).
LAST_CLUSTER_FILE = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                     / "om" / "last-cluster")
KNOWN_CLUSTERS_MAX = 32
RAFT_PORT_OFFSET = 10
HTTP_PORT_OFFSET = 20


def port_range(shards: int = 1) -> int:
    """The ports a cluster of up to 9 nodes with ``shards`` shards spans from its base:
    client, Raft and HTTP ports (30), then each shard k >= 1's client ports at
    ``port + 20 + 10 k`` (``NodeAddress.shard_port``): 20 + 10 shards."""
    assert 1 <= shards <= om_config.SHARDS_MAX
    return om_config.SHARD_PORT_OFFSET + om_config.SHARD_PORT_STEP * shards


PORT_RANGE = port_range(1)   # one shard: client, Raft and HTTP ports of up to 9 nodes
SECRET_FILE = "raft.secret"
# Linux hands out outgoing connections' local ports from 32768 up (ip_local_port_range):
# a cluster's ports stay below, so no client connection can take one between the check
# and the bind.
EPHEMERAL_BELOW = 32_768
# free_port_base draws from [FREE_PORTS_LOW, EPHEMERAL_BELOW), or from the range
# $OM_FREE_PORTS names ("LOW-HIGH", inside that one): processes that start clusters side
# by side (the test suite's parallel workers) each take a range of their own, so two of
# them never pick one base between the check and the bind.
FREE_PORTS_LOW = EPHEMERAL_BELOW - 12_000
FREE_PORTS_ENV = "OM_FREE_PORTS"
TLS_DIR = "tls"
# Nodes this process started, kept so they are reaped (not left as zombies).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ClusterError(Exception):
    """The cluster could not be started, found or stopped."""


def node_addresses(nodes: int, port_base: int) -> tuple[NodeAddress, ...]:
    """The nodes ``write_config`` lays out: om1.. on 127.0.0.1 from ``port_base``."""
    return tuple(NodeAddress(f"om{i + 1}", "127.0.0.1", port_base + i,
                             port_base + RAFT_PORT_OFFSET + i,
                             port_base + HTTP_PORT_OFFSET + i) for i in range(nodes))


def write_secret(path: Path) -> None:
    """A fresh random Raft secret in ``path``, readable by its owner only."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_urlsafe(32) + "\n")


def write_tls(directory: Path, nodes: tuple[NodeAddress, ...]) -> str:
    """A CA, a certificate per node and one for this user in ``DIR/tls``; the [tls]
    table that points the nodes and the tools at them."""
    authority = CertificateAuthority.create(directory / TLS_DIR)
    for node in nodes:
        authority.issue_server(node.id, (node.host,))
    client = authority.issue_client(getpass.getuser())
    tls = directory.resolve() / TLS_DIR
    return "\n".join(["", "[tls]", f'cert_file = "{tls}/{{node_id}}.pem"',
                      f'key_file = "{tls}/{{node_id}}.key"', f'ca_file = "{tls}/ca.pem"',
                      f'client_cert_file = "{client.cert_file.resolve()}"',
                      f'client_key_file = "{client.key_file.resolve()}"', ""])


def write_config(directory: Path, nodes: int, port_base: int, execution: str,
                 extra_toml: str = "", top_level_toml: str = "", secure: bool = True,
                 tls: bool | None = None, acls: bool = False, shards: int = 1) -> Path:
    """Writes ``DIR/cluster.toml`` for ``nodes`` nodes on 127.0.0.1, and with ``secure``
    (the default) a Raft secret in ``DIR/raft.secret`` (mode 0600) that the nodes
    authenticate with; with ``tls`` (by default as ``secure``), a CA and certificates
    (``write_tls``) for TLS with client certificates on the client port; with ``acls``,
    native ACLs on (``acl_enabled``) and the user running this as their administrator
    (``admins``: ``top_level_toml`` must then set neither); with ``shards`` > 1,
    ``shards = N`` (``top_level_toml`` must then not set it).

    ``top_level_toml`` holds top-level keys; ``extra_toml`` holds tables (it is
    appended after the nodes, where a bare key would land in the last node)."""
    assert 1 <= nodes <= 9
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f'execution = "{execution}"', f'data_dir = "{directory.resolve() / "data"}"',
             top_level_toml]
    if acls:
        lines += ["acl_enabled = true", f'admins = ["{getpass.getuser()}"]']
    if shards > 1:
        lines.append(f"shards = {shards}")
    if secure and nodes > 1:
        write_secret(directory / SECRET_FILE)
        lines.append(f'raft_secret_file = "{directory.resolve() / SECRET_FILE}"')
    lines.append("")
    layout = node_addresses(nodes, port_base)
    for node in layout:
        lines += ["[[nodes]]", f'id = "{node.id}"', f'host = "{node.host}"',
                  f"port = {node.port}", f"raft_port = {node.raft_port}",
                  f"http_port = {node.http_port}", ""]
    if secure if tls is None else tls:   # TLS follows ``secure`` unless told
        extra_toml += write_tls(directory, layout)
    path = directory / "cluster.toml"
    path.write_text("\n".join(lines) + extra_toml)
    om_config.load(path)
    return path


@dataclass
class Cluster:
    """A cluster directory and its configuration."""

    directory: Path

    @property
    def config_path(self) -> Path:
        return self.directory / "cluster.toml"

    @property
    def config(self) -> ServerConfig:
        return om_config.load(self.config_path)

    @property
    def nodes(self) -> tuple[NodeAddress, ...]:
        return self.config.nodes

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes]

    def pid_file(self, node_id: str) -> Path:
        return self.directory / f"{node_id}.pid"

    def start_node(self, node_id: str, *extra: str) -> subprocess.Popen[bytes]:
        """Starts one node's process (detached from this process group)."""
        log = (self.directory / f"{node_id}.log").open("ab")
        process = subprocess.Popen(
            [sys.executable, "-m", "om", "serve", "--config", str(self.config_path),
             "--node-id", node_id, *extra],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.pid_file(node_id).write_text(str(process.pid))
        _CHILDREN[process.pid] = process
        return process

    def pid(self, node_id: str) -> int | None:
        try:
            return int(self.pid_file(node_id).read_text())
        except (OSError, ValueError):
            return None

    def journal_stall_file(self, node_id: str) -> Path:
        """The file that hangs ``node_id``'s Raft journal syncs while it exists (with
        ``[raft] unsafe_journal_stall``, test-only)."""
        return stall_file(self.config.data_dir / node_id / "raft" / "raft.wal")

    def signal_node(self, node_id: str, sig: signal.Signals) -> bool:
        """Sends ``sig`` to every process of a node (its process group: the server and
        its Raft process; the Raft process ignores SIGTERM and SIGINT and stops when
        the server closes it); False when it is not running."""
        pid = self.pid(node_id)
        if pid is None:
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def kill_node(self, node_id: str) -> None:
        """kill -9, and reap the process."""
        pid = self.pid(node_id)
        self.signal_node(node_id, signal.SIGKILL)
        child = _CHILDREN.pop(pid, None) if pid is not None else None
        if child is not None:
            child.wait(timeout=15)
        self.pid_file(node_id).unlink(missing_ok=True)

    def stop_node(self, node_id: str, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``."""
        pid = self.pid(node_id)
        if pid is None:
            return
        if self.signal_node(node_id, signal.SIGCONT) and self.signal_node(node_id, signal.SIGTERM):
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                self.signal_node(node_id, signal.SIGKILL)
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            child.wait(timeout=timeout_s)
        self.pid_file(node_id).unlink(missing_ok=True)

    def client_tls(self) -> ClientTls | None:
        """The certificate the tools present to this cluster (None without TLS)."""
        return client_tls(self.config)

    def node_infos(self, timeout_s: float = 1.0) -> list[om_pb2.NodeInfo]:
        """Each node's own view (role UNREACHABLE when it does not answer)."""
        return node_infos(self.addresses, timeout_s, self.client_tls())

    def shard_addresses(self) -> list[str]:
        """Every node's client address of every shard, shard 0's (``addresses``) first."""
        return [node.shard_address(shard) for shard in range(self.config.shards)
                for node in self.nodes]

    def wait_converged(self, timeout_s: float = 30.0) -> int:
        """Waits until every node (every shard of it) reports the same applied position,
        equal to the commit index; returns that position."""
        deadline = time.monotonic() + timeout_s
        infos: list[om_pb2.NodeInfo] = []
        addresses = self.shard_addresses()
        while time.monotonic() < deadline:
            infos = node_infos(addresses, 1.0, self.client_tls())
            positions = {i.applied_index for i in infos} | {i.commit_index for i in infos}
            if all(i.role != "UNREACHABLE" for i in infos) and len(positions) == 1:
                return positions.pop()
            time.sleep(0.1)
        raise ClusterError(f"nodes did not converge within {timeout_s} s: "
                           f"{[(i.address, i.role, i.applied_index) for i in infos]}"
                           f"{self._silent_nodes(infos[:len(self.nodes)])}")

    def _silent_nodes(self, infos: list[om_pb2.NodeInfo]) -> str:
        """For each node that did not answer: whether its process runs, and its log's
        last lines (a node that stopped answering says why there, if anywhere)."""
        report = ""
        for node, info in zip(self.nodes, infos, strict=True):
            if info.role != "UNREACHABLE":
                continue
            pid = self.pid(node.id)
            state = ("not started" if pid is None else "running" if _alive(pid)
                     else f"exited (status {_exit_status(pid)})")
            report += (f"\n{node.id} does not answer; its process: {state}; last lines of "
                       f"{self.directory / node.id}.log:\n{self.log_tail(node.id, 30)}")
        return report

    def stopped_digests(self, shard: int = 0) -> dict[str, dict[str, str]]:
        """Each stopped node's per-table digests of ``shard``'s store, read from its
        RocksDB files."""
        assert all(self.pid(n.id) is None for n in self.nodes), "stop the cluster first"
        config = self.config
        assert 0 <= shard < config.shards
        result = {}
        for node in self.nodes:
            store = Store(om_config.shard_data_dir(config.data_dir / node.id, shard) / "db")
            try:
                result[node.id] = store.digests()
            finally:
                store.close()
        return result

    def log_tail(self, node_id: str, lines: int = 20) -> str:
        """The last ``lines`` lines of a node's log."""
        try:
            text = (self.directory / f"{node_id}.log").read_text(errors="replace")
        except OSError as error:
            return f"(no log: {error})"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float) -> om_pb2.NodeInfo:
        """Waits until every node answers and one leader is ready; returns the leader.

        ClusterError, with the failed node's log tail, as soon as a node's process
        exits, or when ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        infos: list[om_pb2.NodeInfo] = []
        while time.monotonic() < deadline:
            self.raise_if_exited()
            infos = self.node_infos()
            leaders = [i for i in infos if i.role == "LEADER"]
            if len(leaders) == 1 and all(i.role != "UNREACHABLE" for i in infos):
                return leaders[0]
            time.sleep(0.1)
        silent = [n.id for n, i in zip(self.nodes, infos, strict=True) if i.role == "UNREACHABLE"]
        culprit = silent[0] if silent else self.nodes[0].id
        raise ClusterError(
            f"not ready within {timeout_s} s: roles "
            f"{ {n.id: i.role for n, i in zip(self.nodes, infos, strict=True)} }; "
            f"last lines of {self.directory / culprit}.log:\n{self.log_tail(culprit)}")

    def raise_if_exited(self) -> None:
        for node in self.nodes:
            pid = self.pid(node.id)
            if pid is not None and not _alive(pid):
                raise ClusterError(
                    f"{node.id} exited (status {_exit_status(pid)}) while the cluster "
                    f"started; last lines of {self.directory / node.id}.log:\n"
                    f"{self.log_tail(node.id)}")

    def wait_for_leader(self, timeout_s: float = 30.0) -> om_pb2.NodeInfo:
        """The ready leader, once there is exactly one."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leaders = [i for i in self.node_infos() if i.role == "LEADER"]
            if len(leaders) == 1:
                return leaders[0]
            time.sleep(0.1)
        raise ClusterError(f"no leader within {timeout_s} s; see the logs in {self.directory}")


def client_tls(config: ServerConfig) -> ClientTls | None:
    """The tools' certificate named in a cluster configuration's [tls] table."""
    tls = config.tls
    if not tls.enabled:
        return None
    return ClientTls(Path(tls.client_cert_file), Path(tls.client_key_file), Path(tls.ca_file))


def node_infos(addresses: list[str], timeout_s: float,
               tls: ClientTls | None = None) -> list[om_pb2.NodeInfo]:
    """Asks every address for its own view; unreachable nodes are reported as such.

    OMTlsError when ``tls`` cannot work with a node (plain TCP to a TLS port, an
    untrusted or refused certificate): no node would answer, and the error says why."""
    infos: list[om_pb2.NodeInfo] = []
    for address in addresses:
        policy = RetryPolicy(deadline_s=timeout_s, attempt_timeout_s=timeout_s)
        try:
            with OMClient([address], policy=policy, tls=tls) as client:
                response = client.call_raw(om_pb2.OMRequest(
                    cmd_type=om_pb2.ServiceList, service_list=om_pb2.ServiceListRequest()))
        except OMTlsError:
            raise
        except OMClientError:
            infos.append(om_pb2.NodeInfo(address=address, role="UNREACHABLE"))
            continue
        if response.status != om_pb2.OK:
            infos.append(om_pb2.NodeInfo(address=address, role=om_pb2.Status.Name(response.status)))
            continue
        infos.extend(n for n in response.service_list.nodes if n.address == address)
    return infos


def _exit_status(pid: int) -> str:
    """An exited node process's status ("?" when this process did not start it)."""
    child = _CHILDREN.get(pid)
    return str(child.returncode) if child is not None else "?"


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def up(directory: Path, nodes: int, port_base: int, execution: str,
       extra_toml: str = "", timeout_s: float = 60.0, remember_it: bool = True,
       top_level_toml: str = "",
       node_args: Callable[[str], Sequence[str]] = lambda node_id: (),
       secure: bool = True, tls: bool | None = None, acls: bool = False,
       shards: int = 1) -> Cluster:
    """Starts a fresh cluster in ``directory``; returns once a leader is ready (on
    shard 0's ports; with ``shards`` > 1 each node starts its shard processes on
    ``NodeAddress.shard_port`` after that, every port checked free first).

    Secure by default (``write_config``): a Raft secret, and TLS with client
    certificates on the client port (``Cluster.client_tls()`` is the tools'
    certificate); ``secure=False`` turns both off, ``tls=False`` only TLS; ``acls``
    turns native ACLs on with this user as administrator (``om cluster up`` does
    with TLS, unless ``--no-acls``).

    ``node_args`` gives extra ``om serve`` flags per node id (e.g. its own trace
    file). ``remember_it`` records it as the last cluster (for ``om admin roles``
    and ``om cluster down`` without options); tools that start their own
    clusters leave the user's pointer alone. On failure every started node is
    stopped again."""
    cluster = Cluster(directory)
    if directory.exists() and any(cluster.pid(n) for n in _ids(nodes)):
        raise ClusterError(f"a cluster already runs in {directory}: om cluster down first")
    check_ports_free(node_addresses(nodes, port_base), shards)
    write_config(directory, nodes, port_base, execution, extra_toml, top_level_toml, secure,
                 tls, acls, shards)
    try:
        for node in cluster.nodes:
            cluster.start_node(node.id, *node_args(node.id))
        cluster.wait_ready(timeout_s)
    except BaseException:
        down(cluster)
        raise
    if remember_it:
        remember(directory)
    return cluster


def _port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:port now (with SO_REUSEADDR, as ours do,
    so a port only in TIME_WAIT counts as free)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_holder(port: int) -> str:
    """Who listens on ``port``: "pid N (command line)", or why that is unknown."""
    try:
        listeners = [c for c in psutil.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    except psutil.AccessDenied:
        return "a process this user may not inspect"
    for listener in listeners:
        if listener.pid is None:
            continue
        try:
            command = " ".join(psutil.Process(listener.pid).cmdline())[:120]
        except psutil.Error:
            command = "?"
        return f"pid {listener.pid} ({command})"
    return "another process (not visible to this user)"


def _kinds_of_ports(node: NodeAddress, shards: int) -> list[tuple[str, int]]:
    """Each port ``node`` listens on with ``shards`` shards, and what it serves."""
    return [("client", node.port), ("Raft", node.raft_port), ("HTTP", node.http_port),
            *((f"shard {k} client", node.shard_port(k)) for k in range(1, shards))]


def check_ports_free(nodes: Sequence[NodeAddress], shards: int = 1) -> None:
    """ClusterError naming every port of ``nodes`` (with ``shards`` shards each) that
    is taken, and its holder."""
    taken = [(node, kind, port) for node in nodes for kind, port in _kinds_of_ports(node, shards)
             if port and not _port_free(port)]
    if taken:
        lines = [f"  {port} ({node.id}'s {kind} port): held by {port_holder(port)}"
                 for node, kind, port in taken]
        raise ClusterError("ports in use, nothing started (choose another --port-base or "
                           "stop what holds them):\n" + "\n".join(lines))


def free_port_range() -> tuple[int, int]:
    """The ports free_port_base draws from, [low, high): $OM_FREE_PORTS or the default."""
    text = os.environ.get(FREE_PORTS_ENV, "")
    if not text:
        return FREE_PORTS_LOW, EPHEMERAL_BELOW
    low_text, _, high_text = text.partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise ClusterError(f"${FREE_PORTS_ENV}={text!r}: expected LOW-HIGH") from None
    if not FREE_PORTS_LOW <= low <= high - PORT_RANGE or high > EPHEMERAL_BELOW:
        raise ClusterError(f"${FREE_PORTS_ENV}={text!r}: a range of at least {PORT_RANGE} "
                           f"ports within {FREE_PORTS_LOW}-{EPHEMERAL_BELOW}")
    return low, high


def free_port_base(nodes: int = 3, attempts: int = 100, shards: int = 1) -> int:
    """A base port whose client, Raft and HTTP ports on 127.0.0.1, and with ``shards`` >
    1 the shard ports, are all free now, all of them in ``free_port_range()``."""
    low, high = free_port_range()
    assert 0 < nodes <= RAFT_PORT_OFFSET
    span = port_range(shards)
    if high - low < span:
        raise ClusterError(f"${FREE_PORTS_ENV}: {low}-{high} holds no range of {span} ports "
                           f"for {shards} shards")
    for _ in range(attempts):
        base = random.randrange(low, high - span + 1, span)
        assert base + span <= high
        ports = [p for node in node_addresses(nodes, base)
                 for p in node.ports_with_shards(shards)]
        assert max(ports) < base + span
        if all(_port_free(p) for p in ports):
            return base
    raise ClusterError("no free port range on 127.0.0.1")


def down(cluster: Cluster) -> None:
    """Stops every node of the cluster, the leader last: stopped first, it would leave
    the others to elect a new leader, whose first entry the stopped node never sees
    (and a failover takes only a few hundred milliseconds)."""
    running = [n.id for n in cluster.nodes if cluster.pid(n.id) is not None]
    leaders = {i.node_id for i in node_infos([n.address for n in cluster.nodes
                                              if n.id in running], 0.5, cluster.client_tls())
               if i.role in ("LEADER", "LEADER_NOT_READY")}
    for node_id in sorted(running, key=lambda n: n in leaders):
        cluster.stop_node(node_id)


def _ids(nodes: int) -> list[str]:
    return [f"om{i + 1}" for i in range(nodes)]


def remember(directory: Path) -> None:
    """Records ``directory`` as the last cluster started, before the others remembered
    (at most KNOWN_CLUSTERS_MAX, the oldest forgotten first)."""
    path = str(directory.resolve())
    earlier = [str(cluster.directory) for cluster in known() if str(cluster.directory) != path]
    LAST_CLUSTER_FILE.parent.mkdir(parents=True, exist_ok=True)
    LAST_CLUSTER_FILE.write_text("\n".join([path, *earlier][:KNOWN_CLUSTERS_MAX]) + "\n")


def known() -> list[Cluster]:
    """The clusters ``om cluster up`` started here, the last one first."""
    try:
        lines = LAST_CLUSTER_FILE.read_text().splitlines()
    except OSError:
        return []
    return [Cluster(Path(line)) for line in lines[:KNOWN_CLUSTERS_MAX] if line.strip()]


def last() -> Cluster:
    """The cluster ``om cluster up`` started last."""
    clusters = known()
    if not clusters:
        raise ClusterError("no cluster started yet: om cluster up, or pass --dir")
    return clusters[0]


def serving(addresses: Sequence[str]) -> Cluster | None:
    """The cluster started here most recently whose current ring (its ``cluster.toml``,
    which ``om admin om add`` and ``decommission`` keep true) holds any of
    ``addresses``; None when none does."""
    wanted = set(addresses)
    for cluster in known():
        try:
            ring = cluster.addresses
        except ConfigError:
            continue   # its directory is gone, or no longer a cluster's
        if wanted & set(ring):
            return cluster
    return None
