"""OM snapshots on a real 3-node cluster (127.0.0.1), in both execution flows.

One scenario per flow, one cluster start each: a snapshot taken under write load holds
exactly the writes of its bucket committed before its create (every key acknowledged
before the create was sent, and no key committed after it), and every node's
checkpoint holds the same tables at the same log position; reads and diffs of it are
the same after the leader is killed and after the whole cluster restarts; a delete frees
every node's checkpoint.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cli import main
from om.client import OMClient
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.integrity.store_digests import table_root
from om.protocol import om_pb2
from om.schema import tables
from om.schema.ids import object_id_for
from om.schema.row_digests import node_bytes
from om.statemachine.om_snapshot_checkpoints import SNAPSHOTS_DIR
from om.statemachine.store import Store
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
V, B = "vol", "bkt"
Diff = om_pb2.DiffEntry
LOAD_BEFORE_S = 1.5
LOAD_AFTER_S = 1.0


@pytest.fixture(params=["leader", "replicated"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path / request.param, execution=request.param)
    try:
        yield started
    finally:
        om_cluster.down(started)


def snapshot_keys(om: OMClient, name: str, pages_max: int = 1000) -> dict[str, om_pb2.KeyInfo]:
    """Every key of the snapshot, by its name in the bucket."""
    prefix = build.snapshot_key(name)
    keys: dict[str, om_pb2.KeyInfo] = {}
    start = ""
    for _ in range(pages_max):
        page = om.list_keys(V, B, prefix=prefix, start_key=start, max_keys=1000)
        keys.update((k.key_name[len(prefix):], k) for k in page.key_info)
        if not page.truncated:
            return keys
        start = page.key_info[-1].key_name
    raise AssertionError("the listing did not end")


def checkpoints(cluster: om_cluster.Cluster, snapshot_id: int) -> dict[str, Path]:
    data = cluster.config.data_dir
    return {n.id: data / n.id / SNAPSHOTS_DIR / f"{snapshot_id:020d}" for n in cluster.nodes}


def checkpoint_state(directory: Path) -> tuple[str, dict[str, str], int, dict[str, bytes]]:
    """Of one node's checkpoint: its position, every table's digest, the applied position
    it holds, and every table's root of the digests kept on apply."""
    store = Store(directory / "checkpoint", read_only=True)
    try:
        roots = {name: node_bytes(*table_root(store, table))
                 for table, name in tables.TABLE_NAMES.items()}
        return ((directory / "position").read_text(), store.digests(),
                store.transaction_info().applied_index, roots)
    finally:
        store.close()


def wait_for(condition_name: str, check: object, timeout_s: float = 30.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not {condition_name} within {timeout_s} s")


def sh(cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str],
       *words: str) -> tuple[int, str, str]:
    """``om sh --dir CLUSTER WORDS``: (exit status, stdout, stderr)."""
    capsys.readouterr()
    status = main(["sh", "--dir", str(cluster.directory), *words])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_snapshot_under_load_failover_and_restart(cluster: om_cluster.Cluster,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with harness.client(cluster) as om:
        om.create_volume(V)
        om.create_bucket(V, B)
        load = harness.WriteLoad(cluster)
        load.start()
        try:
            time.sleep(LOAD_BEFORE_S)
            with load._lock:
                acknowledged_before = dict(load.acknowledged)
            taken = om.create_snapshot(V, B, "under-load")
            time.sleep(LOAD_AFTER_S)
        finally:
            load.stop()
        assert len(acknowledged_before) > 20
        assert load.count() > len(acknowledged_before)

        held = snapshot_keys(om, "under-load")
        # every key acknowledged before the create was sent is in it ...
        assert set(acknowledged_before) <= set(held)
        # ... and exactly the keys committed before it (ids ascend with the managed index)
        live = harness.all_keys(om)
        committed_before = {name for name, k in live.items()
                            if object_id_for(k.update_id) < taken.snapshot_id}
        assert set(held) == committed_before
        assert len(live) > len(held)
        assert all((k.object_id, k.update_id, k.data_size) == (live[n].object_id,
                   live[n].update_id, live[n].data_size) for n, k in held.items())

        # every replica's checkpoint: the same position, the same tables
        harness.wait_converged(cluster)
        states = {node: checkpoint_state(path)
                  for node, path in checkpoints(cluster, taken.snapshot_id).items()}
        assert len({repr(s) for s in states.values()}) == 1, states
        position = int(next(iter(states.values()))[0])
        assert next(iter(states.values()))[2] == position
        assert om.snapshot_info(V, B, "under-load").log_position == position
        # any node serves reads of it from its own checkpoint (a local read: no leader)
        probe = sorted(held)[-1]
        for node in cluster.nodes:
            with OMClient([node.address], tls=cluster.client_tls(), read_mode="local",
                          policy=RetryPolicy(deadline_s=10.0, attempt_timeout_s=2.0)) as local:
                found = local.lookup_key(V, B, build.snapshot_key("under-load", probe))
                assert found.object_id == held[probe].object_id

        om.delete_key(V, B, sorted(held)[0])
        om.put_key(V, B, sorted(held)[1], 77)
        om.rename_key(V, B, sorted(held)[2], "renamed")
        om.create_snapshot(V, B, "later")
        diff = [(e.type, e.key, e.to_key) for e in
                om.snapshot_diff(V, B, "under-load", "later", page_size=100)]
        expected_after = sorted(set(live) - set(held))
        assert (Diff.DELETE, sorted(held)[0], "") in diff
        assert (Diff.MODIFY, sorted(held)[1], "") in diff
        assert (Diff.RENAME, sorted(held)[2], "renamed") in diff
        assert sorted(k for t, k, _ in diff if t == Diff.CREATE) == expected_after
        assert len(diff) == 3 + len(expected_after)

    # the leader dies: the new one reads the same snapshot and the same diff
    old_leader = harness.leader_id(cluster)
    cluster.kill_node(old_leader)
    wait_for("a new leader", lambda: any(
        i.role == "LEADER" and i.node_id != old_leader for i in cluster.node_infos()))
    with harness.client(cluster) as om:
        assert snapshot_keys(om, "under-load") == held
        assert [(e.type, e.key, e.to_key) for e in
                om.snapshot_diff(V, B, "under-load", "later")] == diff
        missing = om.call_raw(build.get_snapshot_info(V, B, "never"))
        assert om_pb2.Status.Name(missing.status) == "FILE_NOT_FOUND"

    # the whole cluster restarts
    om_cluster.down(cluster)
    for node in cluster.nodes:
        cluster.start_node(node.id)
    cluster.wait_ready(60)
    with harness.client(cluster) as om:
        assert snapshot_keys(om, "under-load") == held
        assert [(e.type, e.key, e.to_key) for e in
                om.snapshot_diff(V, B, "under-load", "later")] == diff
        assert om.snapshot_info(V, B, "under-load").log_position == position

    # the shell, as Ozone's: create, list, info, diff, a key read from a snapshot, delete
    first = sorted(held)[3]
    assert sh(cluster, capsys, "snapshot", "create", f"/{V}/{B}", "by-shell")[0] == 0
    status, out, _ = sh(cluster, capsys, "snapshot", "list", f"/{V}/{B}")
    assert status == 0
    assert [s["name"] for s in json.loads(out)] == ["by-shell", "later", "under-load"]
    status, out, _ = sh(cluster, capsys, "snapshot", "info", f"/{V}/{B}", "under-load")
    assert (status, json.loads(out)["logPosition"]) == (0, position)
    status, out, _ = sh(cluster, capsys, "snapshot", "diff", f"/{V}/{B}", "under-load", "later")
    assert status == 0
    assert f"R\t./{sorted(held)[2]} -> ./renamed" in out.splitlines()
    status, out, _ = sh(cluster, capsys, "key", "info", f"/{V}/{B}/.snapshot/under-load/{first}")
    assert (status, json.loads(out)["name"]) == (0, f".snapshot/under-load/{first}")
    status, _, err = sh(cluster, capsys, "snapshot", "info", f"/{V}/{B}", "never")
    assert (status, err.split()[0]) == (255, "FILE_NOT_FOUND")
    status, _, err = sh(cluster, capsys, "snapshot", "create", f"/{V}/{B}", "later")
    assert (status, err.split()[0]) == (255, "FILE_ALREADY_EXISTS")
    assert sh(cluster, capsys, "snapshot", "delete", f"/{V}/{B}", "under-load")[0] == 0
    harness.wait_converged(cluster)
    for path in checkpoints(cluster, taken.snapshot_id).values():
        assert not path.exists()


SNAPSHOT_OFTEN = """
compaction_min_entries = 40
compaction_min_time_s = 1.0
"""


def local_read(cluster: om_cluster.Cluster, node_id: str,
               request: om_pb2.OMRequest) -> om_pb2.OMResponse:
    address = next(n.address for n in cluster.nodes if n.id == node_id)
    with OMClient([address], tls=cluster.client_tls(), read_mode="local",
                  policy=RetryPolicy(deadline_s=10.0, attempt_timeout_s=2.0)) as local:
        return local.call_raw(request)


def test_a_node_that_installs_a_raft_snapshot_receives_older_om_snapshots(
        tmp_path: Path) -> None:
    """A wiped follower catches up by a Raft snapshot taken after an OM snapshot's create:
    it never applied the create, but the Raft snapshot carries the checkpoint, so it
    serves the OM snapshot from a checkpoint identical to the leader's (same position,
    tables and Merkle roots); an OM snapshot taken after it caught up is checkpointed
    there as everywhere; a delete frees both kinds."""
    cluster = harness.start(tmp_path / "cluster", extra_toml=SNAPSHOT_OFTEN)
    try:
        leader = harness.leader_id(cluster)
        wiped = next(n.id for n in cluster.nodes if n.id != leader)
        cluster.stop_node(wiped)
        shutil.rmtree(cluster.config.data_dir / wiped)
        with harness.client(cluster) as om:
            om.create_volume(V)
            om.create_bucket(V, B)
            om.put_key(V, B, "k", 5)
            om.create_snapshot(V, B, "before")
            for i in range(120):
                om.put_key(V, B, f"k{i}", 5)
            time.sleep(1.5)  # let compaction's time window come round
            for i in range(120, 160):
                om.put_key(V, B, f"k{i}", 5)
        cluster.start_node(wiped)
        harness.wait_converged(cluster)
        log = (cluster.directory / f"{wiped}.log").read_text()
        assert "installed a snapshot" in log, "caught up from the log, not a snapshot"

        read = build.lookup_key(V, B, build.snapshot_key("before", "k"))
        for node_id in (wiped, leader):
            served = local_read(cluster, node_id, read)
            assert served.status == om_pb2.OK, served.message
            assert served.lookup_key.key_info.data_size == 5
        with harness.client(cluster) as om:
            before_id = om.snapshot_info(V, B, "before").snapshot_id
        held = checkpoints(cluster, before_id)
        assert checkpoint_state(held[wiped]) == checkpoint_state(held[leader])
        with harness.client(cluster) as om:
            after = om.create_snapshot(V, B, "after")
            harness.wait_converged(cluster)
            assert local_read(cluster, wiped, build.lookup_key(
                V, B, build.snapshot_key("after", "k159"))).status == om_pb2.OK
            om.delete_snapshot(V, B, "before")
            om.delete_snapshot(V, B, "after")
            harness.wait_converged(cluster)
        for snapshot_id in (before_id, after.snapshot_id):
            for path in checkpoints(cluster, snapshot_id).values():
                assert not path.exists()
    finally:
        om_cluster.down(cluster)
