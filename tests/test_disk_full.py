"""A follower whose disk fills stops cleanly, and catches up once space is back.

Each node's data directory is a small tmpfs of its own; the test fills a
follower's with a file, keeps writing through the leader, and expects that
follower to stop (fail-stop, exit status 70) with one clear line naming the
file and the error, the others to keep serving, and the follower, restarted
after the file is deleted, to catch up with identical tables.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cluster import lifecycle as om_cluster
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
MOUNT_MB = 64


def _mount(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={MOUNT_MB}m", "tmpfs",
                           str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def _fill(path: Path) -> Path:
    filler = path / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as out:
        try:
            while True:
                out.write(chunk)
                out.flush()
        except OSError:
            pass
    return filler


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    directory = tmp_path / "cluster"
    om_cluster.write_config(directory, 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT)
    made = om_cluster.Cluster(directory)
    mounts = [made.config.data_dir / node.id for node in made.nodes]
    try:
        for mount in mounts:
            _mount(mount)
        for node in made.nodes:
            made.start_node(node.id)
        made.wait_for_leader(timeout_s=60)
        yield made
    finally:
        om_cluster.down(made)
        for mount in mounts:
            subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def test_a_full_disk_stops_a_follower_cleanly_and_it_catches_up(
        cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster) as om:
        om.create_volume("vol")
        om.create_bucket("vol", "bkt")
        for i in range(20):
            om.put_key("vol", "bkt", f"before-{i}", 10)
    victim = next(n.id for n in cluster.nodes if n.id != harness.leader_id(cluster))
    pid = cluster.pid(victim)
    assert pid is not None
    filler = _fill(cluster.config.data_dir / victim)
    with harness.client(cluster) as om:
        for i in range(200):
            om.put_key("vol", "bkt", f"during-{i}", 10)   # the others keep serving
    process = om_cluster._CHILDREN[pid]
    assert process.wait(timeout=30) == 70, "the follower did not fail stop"
    log = (cluster.directory / f"{victim}.log").read_text()
    assert "No space left on device" in log
    assert ("the Raft journal" in log   # its entries, or its term and vote
            or "cannot apply committed entry" in log), log[-2000:]
    assert "Traceback" not in log.split("No space left on device")[0][-300:]
    filler.unlink()
    cluster.start_node(victim)
    with harness.client(cluster) as om:
        om.put_key("vol", "bkt", "after", 10)
        keys = harness.all_keys(om)
    assert len(keys) == 221
    deadline = time.monotonic() + 60
    while {i.node_id for i in cluster.node_infos() if i.role == "FOLLOWER"} != {
            n.id for n in cluster.nodes} - {harness.leader_id(cluster)}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    harness.wait_converged(cluster)
    digests = harness.digests_after_stop(cluster)
    assert digests["om1"] == digests["om2"] == digests["om3"]
