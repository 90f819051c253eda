"""Catch-up from checkpoint files on a real 3-node cluster (Raft secret, TLS): a wiped
follower gets the leader's small Raft snapshot and downloads the checkpoint it names
over FetchCheckpointFile, with no election and its Raft process kept; a download
cut half-way (the node stops, as if killed) resumes from the files staged when the
node restarts; the RPC refuses bad input and callers without the cluster secret with
a status and no data."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from om.client import OMClient, OMClientError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.node.catchup import mac_key, sign
from om.protocol import om_pb2
from tests import cluster_harness as harness

pytestmark = [pytest.mark.integration, pytest.mark.slow]
COMPACTING = """compaction_min_entries = 20
compaction_min_time_s = 3.0

[catchup]
chunk_bytes = 4096
kept = 10
"""
CATCH_UP_S = 30.0
DOWNLOADED = re.compile(r"downloaded checkpoint \S+ from OM:\S+ in [0-9.]+ s: \d+ files, "
                        r"(\d+) bytes fetched in \d+ chunks; kept from an earlier attempt: "
                        r"(\d+) bytes")


def terms(cluster: om_cluster.Cluster) -> set[int]:
    return {i.term for i in cluster.node_infos() if i.role != "UNREACHABLE"}


def raft_child(node_pid: int) -> int | None:
    """The pid of the Raft process of the node process ``node_pid`` (None: none yet)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == node_pid and b"om.consensus.pysyncobj.child" in command:
            return int(entry.name)
    return None


def applied(cluster: om_cluster.Cluster, node_id: str) -> int:
    address = next(n.address for n in cluster.nodes if n.id == node_id)
    info = om_cluster.node_infos([address], 1.0, cluster.client_tls())[0]
    return info.applied_index if info.role != "UNREACHABLE" else -1


def fill_and_compact(cluster: om_cluster.Cluster, keys: int = 300) -> None:
    """Writes ``keys`` keys, then waits for every node to compact past them."""
    with harness.client(cluster) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(keys):
            om.put_key("vol", "bkt", f"k{i:04d}", 10)
    time.sleep(4.0)


def wipe(cluster: om_cluster.Cluster, victim: str) -> None:
    cluster.stop_node(victim)
    shutil.rmtree(cluster.config.data_dir / victim)


def wait_caught_up(cluster: om_cluster.Cluster, victim: str, target: int) -> float:
    """Seconds until ``victim`` applied ``target``."""
    started = time.monotonic()
    while time.monotonic() - started < CATCH_UP_S:
        if applied(cluster, victim) >= target:
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{victim} did not catch up to {target} in {CATCH_UP_S} s")


def test_a_wiped_follower_downloads_the_checkpoint_with_no_election_nor_raft_restart(
        tmp_path: Path) -> None:
    """The download is paced (rate_bytes_per_s) to last a few seconds: meanwhile the
    follower's Raft process takes the entries the leader commits (the leader's match
    index for it passes the snapshot's position while its store is not yet there),
    and the node answers requests with LEADER_NOT_READY; then it applies them."""
    cluster = harness.start(tmp_path / "cluster", COMPACTING + "rate_bytes_per_s = 60000\n")
    try:
        fill_and_compact(cluster)
        leader = harness.leader_id(cluster)
        victim = next(n for n in cluster.nodes if n.id != leader)
        before = terms(cluster)
        target = cluster.wait_for_leader().applied_index
        wipe(cluster, victim.id)
        process = cluster.start_node(victim.id)
        child = None
        while child is None and process.poll() is None:
            child = raft_child(process.pid)
            time.sleep(0.02)
        load = harness.WriteLoad(cluster, threads=1)
        load.start()
        raft_ahead, refused = False, ""
        started = time.monotonic()
        while time.monotonic() - started < CATCH_UP_S and not (raft_ahead and refused):
            infos = {i.node_id: i for i in cluster.node_infos()}
            if 0 <= infos[victim.id].applied_index < target and infos[victim.id].role != \
                    "UNREACHABLE" and infos[leader].match_index.get(victim.id, 0) > target:
                raft_ahead = True
                refused = refused or local_read_refusal(cluster, victim.address)
            time.sleep(0.05)
        took = wait_caught_up(cluster, victim.id, target)
        load.stop()
        print(f"wiped follower caught up in {took:.2f} s after the download began, paced "
              f"to 60 kB/s (load average {os.getloadavg()[0]:.2f})")
        assert raft_ahead, "Raft took no entry while the store was installed"
        assert "catching up" in refused
        assert raft_child(process.pid) == child, "the Raft process was restarted"
        assert terms(cluster) == before == {min(before)}, "an election happened"
        log = cluster.log_tail(victim.id, 400)
        found = DOWNLOADED.search(log)
        assert found, "caught up from the log, not from checkpoint files"
        assert int(found.group(1)) > 0
        assert "installed a snapshot" in log
        harness.wait_converged(cluster)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1


def local_read_refusal(cluster: om_cluster.Cluster, address: str) -> str:
    """The message of a read the node at ``address`` refuses as not ready ("": none)."""
    with OMClient([address], policy=RetryPolicy(deadline_s=0.5, attempt_timeout_s=0.5),
                  tls=cluster.client_tls(), read_mode="local") as om:
        try:
            response = om.call_raw(build.info_volume("vol"))
        except OMClientError:
            return ""
    return response.message if response.status == om_pb2.LEADER_NOT_READY else ""


def test_a_catch_up_stopped_half_way_resumes_from_the_files_staged(tmp_path: Path) -> None:
    cluster = harness.start(tmp_path / "cluster", COMPACTING + "unsafe_cut_at_fraction = 0.5\n")
    try:
        victim, target = cut_half_way(cluster)
        cluster.start_node(victim)
        resumes_and_converges(cluster, victim, target)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1


def test_a_catch_up_whose_checkpoint_was_dropped_installs_the_newest(tmp_path: Path) -> None:
    """The node that kept the checkpoint the dump names dropped it (``kept = 1``, and it
    compacted again) before the cut catch-up's restart: the follower installs the
    newest checkpoint instead, ahead of the position Raft gave it, and the entries
    up to it are skipped as applied."""
    cluster = harness.start(tmp_path / "cluster", COMPACTING.replace("kept = 10", "kept = 1")
                            + "unsafe_cut_at_fraction = 0.5\nlease_s = 0.5\n")
    try:
        victim, target = cut_half_way(cluster)
        named = next((cluster.config.data_dir / victim / "catchup-staging").iterdir()).name
        held = [cluster.config.data_dir / n.id / "checkpoints" / named for n in cluster.nodes]
        deadline = time.monotonic() + CATCH_UP_S
        with harness.client(cluster) as om:
            for i in range(10_000):           # writes, so that every node compacts again
                if not any(path.exists() for path in held):
                    break
                assert time.monotonic() < deadline, "the checkpoint was never dropped"
                om.put_key("vol", "bkt", f"later{i:05d}", 10)
                time.sleep(0.02)
        target = cluster.wait_for_leader().applied_index
        cluster.start_node(victim)
        wait_caught_up(cluster, victim, target)
        log = cluster.log_tail(victim, 400)
        assert f"checkpoint {named} is not kept" in log
        assert "fetching the newest one" in log
        harness.wait_converged(cluster)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1


def test_a_catch_up_whose_source_dies_fetches_another_nodes_checkpoint(
        tmp_path: Path) -> None:
    """The node serving the checkpoint is killed mid-download: after
    ``source_timeout_s`` the follower installs the newest checkpoint another node keeps
    at the position Raft gave it or later (the survivor takes one once it compacts)."""
    cluster = harness.start(tmp_path / "cluster", COMPACTING + "rate_bytes_per_s = 60000\n"
                            "source_timeout_s = 2.0\n")
    try:
        victim, target, staged = downloading(cluster)
        named = next(staged.iterdir()).name
        source = next(n.id for n in cluster.nodes
                      if (cluster.config.data_dir / n.id / "checkpoints" / named).exists())
        cluster.kill_node(source)
        wait_caught_up(cluster, victim, target)
        log = cluster.log_tail(victim, 400)
        assert f"checkpoint {named} is not served" in log
        assert "fetching the newest one" in log
        cluster.start_node(source)
        harness.wait_converged(cluster)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1


def downloading(cluster: om_cluster.Cluster) -> tuple[str, int, Path]:
    """Wipes a follower, starts it, and returns once its (paced) download has staged a
    file: the follower's id, the position it must reach, its staging directory."""
    fill_and_compact(cluster)
    leader = harness.leader_id(cluster)
    victim = next(n.id for n in cluster.nodes if n.id != leader)
    target = cluster.wait_for_leader().applied_index
    wipe(cluster, victim)
    cluster.start_node(victim)
    staged = cluster.config.data_dir / victim / "catchup-staging"
    deadline = time.monotonic() + CATCH_UP_S
    while not any(p.is_file() for p in staged.rglob("*")):
        assert time.monotonic() < deadline, "the download did not start"
        time.sleep(0.05)
    return victim, target, staged


def resumes_and_converges(cluster: om_cluster.Cluster, victim: str, target: int) -> None:
    """The restarted ``victim`` catches up to ``target`` by resuming its download (its
    first download after the restart starts past byte 0), and the cluster converges."""
    wait_caught_up(cluster, victim, target)
    resumed = [int(m.group(2)) for m in DOWNLOADED.finditer(cluster.log_tail(victim, 400))]
    assert resumed, "the restarted node did not download"
    assert resumed[0] > 0, "the restarted node fetched everything again"
    harness.wait_converged(cluster)


def cut_half_way(cluster: om_cluster.Cluster) -> tuple[str, int]:
    """Wipes a follower and starts it with the cut knob on: its download stops half-way
    and the node with it. The follower's id and the position it must reach."""
    fill_and_compact(cluster)
    leader = harness.leader_id(cluster)
    victim = next(n.id for n in cluster.nodes if n.id != leader)
    target = cluster.wait_for_leader().applied_index
    wipe(cluster, victim)
    first = cluster.start_node(victim)
    assert first.wait(timeout=60) != 0, "the cut download did not stop the node"
    staged = cluster.config.data_dir / victim / "catchup-staging"
    assert any(p.is_file() for p in staged.rglob("*")), "nothing was staged"
    assert "installing a snapshot failed: stopping" in cluster.log_tail(victim, 400)
    return victim, target


def test_a_node_stopped_mid_download_stops_at_once_and_resumes(tmp_path: Path) -> None:
    """``om cluster stop`` during a (paced) download does not wait for it: the node
    stops within seconds, keeps what it staged, and its restart resumes from there."""
    cluster = harness.start(tmp_path / "cluster", COMPACTING + "rate_bytes_per_s = 60000\n")
    try:
        victim, target, _ = downloading(cluster)
        time.sleep(0.5)
        stopping = time.monotonic()
        cluster.stop_node(victim)
        assert time.monotonic() - stopping < 5.0, "the stop waited for the download"
        assert applied(cluster, victim) == -1
        assert "stopped before the snapshot's store was installed" in \
            cluster.log_tail(victim, 400)
        cluster.start_node(victim)
        resumes_and_converges(cluster, victim, target)
    finally:
        digests = harness.digests_after_stop(cluster)
    assert len({str(d) for d in digests.values()}) == 1


def test_fetch_checkpoint_file_refuses_bad_input_and_callers_without_the_secret(
        tmp_path: Path) -> None:
    cluster = harness.start(tmp_path / "cluster", COMPACTING)
    try:
        fill_and_compact(cluster, keys=30)
        node = cluster.nodes[0]
        key = mac_key((cluster.directory / om_cluster.SECRET_FILE).read_text().strip())
        with OMClient([node.address], policy=RetryPolicy(deadline_s=10),
                      tls=cluster.client_tls()) as om:
            def fetch(checkpoint_id: str, path: str = "", offset: int = 0,
                      length: int = 4096, signing: bytes | None = key,
                      issued_ms: int | None = None) -> om_pb2.OMResponse:
                body = om_pb2.FetchCheckpointFileRequest(
                    checkpoint_id=checkpoint_id, path=path, offset=offset, length=length,
                    node_id="om9",
                    issued_ms=issued_ms if issued_ms is not None else time.time_ns() // 10**6)
                if signing is not None:
                    sign(body, signing)
                return om.call_raw(om_pb2.OMRequest(cmd_type=om_pb2.FetchCheckpointFile,
                                                    fetch_checkpoint_file=body))

            newest = fetch("")
            assert newest.status == om_pb2.OK, newest.message
            manifest = newest.fetch_checkpoint_file
            checkpoint = manifest.checkpoint_id
            on_disk = (cluster.config.data_dir / node.id / "checkpoints" / checkpoint
                       / "db" / "CURRENT").read_bytes()
            good = fetch(checkpoint, "db/CURRENT")
            assert good.status == om_pb2.OK, good.message
            assert good.fetch_checkpoint_file.data == on_disk

            refusals = {
                "unknown checkpoint": (fetch("00000000000000000001-deadbeef", "db/CURRENT"),
                                       om_pb2.INVALID_SNAPSHOT_ERROR),
                "traversal": (fetch(checkpoint, "../manifest.json"), om_pb2.INVALID_REQUEST),
                "traversal to the journal": (fetch(checkpoint, "../../raft/raft.wal"),
                                             om_pb2.INVALID_REQUEST),
                "absolute": (fetch(checkpoint, "/etc/passwd"), om_pb2.INVALID_REQUEST),
                "past the end": (fetch(checkpoint, "db/CURRENT", offset=len(on_disk) + 1),
                                 om_pb2.INVALID_REQUEST),
                "over the chunk": (fetch(checkpoint, "db/CURRENT", length=4097),
                                   om_pb2.INVALID_REQUEST),
                "unsigned": (fetch(checkpoint, "db/CURRENT", signing=None),
                             om_pb2.PERMISSION_DENIED),
                "another key": (fetch(checkpoint, "db/CURRENT", signing=mac_key("guess")),
                                om_pb2.PERMISSION_DENIED),
                "replayed": (fetch(checkpoint, "db/CURRENT",
                                   issued_ms=time.time_ns() // 10**6 - 3_600_000),
                             om_pb2.PERMISSION_DENIED),
            }
            for case, (response, status) in refusals.items():
                assert response.status == status, (case, response)
                assert response.message, case
                assert not response.fetch_checkpoint_file.data, case
    finally:
        om_cluster.down(cluster)
