"""``om cluster up`` and ``status`` cannot lie: a taken port starts nothing and names its
holder; a node that dies at start fails ``up`` with its log tail and nothing left
running; ``status`` exits non-zero without a ready leader."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from om.cluster import lifecycle as om_cluster
from tests.processes import REPO, om_command

pytestmark = pytest.mark.integration


def om(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(om_command(*args), capture_output=True, text=True, cwd=REPO,
                          timeout=timeout_s)


def om_processes(directory: Path) -> list[int]:
    """Pids of processes whose command line names ``directory``."""
    return [process.info["pid"] for process in psutil.process_iter(["pid", "cmdline"])
            if str(directory) in " ".join(process.info["cmdline"] or ())]


def test_up_on_a_taken_port_starts_nothing_and_names_the_holder(tmp_path: Path) -> None:
    base = om_cluster.free_port_base()
    taken = base + om_cluster.HTTP_PORT_OFFSET + 1        # om2's metrics port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        result = om("cluster", "up", "--dir", str(tmp_path / "c"), "--port-base", str(base))
    assert result.returncode == 1
    assert f"{taken} (om2's HTTP port): held by pid {os.getpid()}" in result.stderr
    assert not (tmp_path / "c" / "om1.pid").exists()
    assert om_processes(tmp_path / "c") == []


def test_a_node_that_dies_at_start_fails_up_with_its_log(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    (directory / "data").mkdir(parents=True)
    (directory / "data" / "om3").write_text("a file where om3's data directory belongs")
    result = om("cluster", "up", "--dir", str(directory), "--port-base",
                str(om_cluster.free_port_base()))
    assert result.returncode == 1
    assert "om3 exited" in result.stderr
    assert "last lines of" in result.stderr
    assert "om serve: cannot start: [Errno 20] Not a directory" in result.stderr
    assert om_processes(directory) == []
    assert not any(directory.glob("*.pid"))



def test_a_cluster_that_does_not_converge_says_which_node_is_silent_and_why(
        tmp_path: Path) -> None:
    """No node answers (om1 never started, om2's process gone): the error names each,
    its process's state and its log's last lines, not only the positions."""
    directory = tmp_path / "c"
    om_cluster.write_config(directory, 2, om_cluster.free_port_base(), "leader", secure=False)
    cluster = om_cluster.Cluster(directory)
    gone = subprocess.Popen(["true"])
    gone.wait()
    cluster.pid_file("om2").write_text(str(gone.pid))
    (directory / "om2.log").write_text("OM om2 listening\nCRITICAL the reason om2 stopped\n")
    with pytest.raises(om_cluster.ClusterError) as failed:
        cluster.wait_converged(timeout_s=0.3)
    message = str(failed.value)
    assert "om1 does not answer; its process: not started" in message
    assert "om2 does not answer; its process: exited (status ?)" in message
    assert "CRITICAL the reason om2 stopped" in message

@pytest.mark.slow
def test_status_says_which_nodes_are_up_and_fails_without_a_leader(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    started = om("cluster", "up", "--dir", str(directory), "--port-base",
                 str(om_cluster.free_port_base()))
    assert started.returncode == 0, started.stderr
    assert "metrics: http://127.0.0.1:" in started.stdout
    assert "clients: TLS with client certificates" in started.stdout   # the default
    assert (f"ACLs:    native ACLs on; administrator: {getpass.getuser()} (admins)"
            in started.stdout)                                          # the default too
    assert "INSECURE" not in started.stdout
    cluster = om_cluster.Cluster(directory)
    try:
        assert f"acls=on (admins: {getpass.getuser()})" in (directory / "om1.log").read_text()
        listed = om("admin", "user", "list", "--dir", str(directory))   # up recorded its user
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1].startswith(f"{getpass.getuser()} "), listed.stdout
        assert " VALID " in listed.stdout
        # the tools find the cluster's certificate through --dir
        created = om("sh", "--dir", str(directory), "volume", "create", "/tlsvol")
        assert created.returncode == 0, created.stderr
        loaded = om("freon", "omkg", "--dir", str(directory), "-n", "20", "-t", "4")
        assert loaded.returncode == 0, loaded.stderr
        assert "Failures: 0" in loaded.stdout, loaded.stdout
        # no certificate to find (no cluster remembered in this cache): refused
        plain = subprocess.run(om_command("sh", "--om", cluster.addresses[0], "--timeout", "3",
                                          "volume", "info", "/tlsvol"),
                               capture_output=True, text=True, cwd=REPO, timeout=60,
                               env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
        assert plain.returncode != 0, plain.stdout
        assert "speaks TLS and this client connected in plain TCP" in plain.stderr
        healthy = om("cluster", "status", "--dir", str(directory))
        assert healthy.returncode == 0, healthy.stderr
        assert healthy.stdout.count("UP ") == 3
        assert "3 of 3 nodes up; leader om" in healthy.stdout
        leader = cluster.wait_for_leader().node_id
        followers = [n.id for n in cluster.nodes if n.id != leader]
        cluster.kill_node(followers[0])
        cluster.kill_node(leader)
        degraded = om("cluster", "status", "--dir", str(directory))
        assert degraded.returncode == 1
        assert degraded.stdout.count("DOWN") == 2
        assert "1 of 3 nodes up, no ready leader" in degraded.stderr
    finally:
        om_cluster.down(cluster)


def test_no_acls_turns_them_off_and_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    started = om("cluster", "up", "--no-acls", "--nodes", "1", "--dir", str(directory),
                 "--port-base", str(om_cluster.free_port_base(1)))
    assert started.returncode == 0, started.stderr
    try:
        assert ("INSECURE: ACLs are off: every user with a certificate may do anything "
                "(--no-acls)") in started.stdout
        assert "clients: TLS with client certificates" in started.stdout
        assert "acls=OFF" in (directory / "om1.log").read_text()
    finally:
        om_cluster.down(om_cluster.Cluster(directory))


def test_insecure_turns_off_the_secret_and_tls_and_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    started = om("cluster", "up", "--insecure", "--dir", str(directory), "--port-base",
                 str(om_cluster.free_port_base()))
    assert started.returncode == 0, started.stderr
    assert "INSECURE: Raft is unauthenticated (--insecure)" in started.stdout
    assert "INSECURE: clients are unauthenticated, in plain TCP (--insecure)" in started.stdout
    cluster = om_cluster.Cluster(directory)
    try:
        assert cluster.client_tls() is None
        assert not (directory / om_cluster.SECRET_FILE).exists()
        log = (directory / "om1.log").read_text()
        assert "raft=UNAUTHENTICATED" in log
        assert "clients=PLAIN, UNAUTHENTICATED" in log
        created = om("sh", "--om", ",".join(cluster.addresses), "volume", "create", "/plain")
        assert created.returncode == 0, created.stderr
    finally:
        om_cluster.down(cluster)
