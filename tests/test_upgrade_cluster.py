"""Prepare and upgrade on real 3-node clusters (127.0.0.1), in both execution flows.

Each cluster starts at layout 1 ([upgrade] init_layout_version), below the
software's, so multipart uploads (layout 2) are refused until finalized. One
scenario per flow, in order: prepare with the CLI (every node applies the marker and
compacts its log), writes refused with Ozone's 74 and nothing written while reads go
on, prepare twice, finalize refused while prepared; the prepared state outlives a
leader's death and a full restart; cancel lifts it (cancel again says so); a Prepare
whose leader is killed as it is sent ends prepared on every node (the client's retry);
a finalize whose leader is killed as it is sent (a follower down too, so it may not
commit) converges: after the restart one finalize answers and every node reports
the software's layout. At the end every replica holds the same bytes.

On the same clusters, client versions (om/gatekeeper/old_clients.py): om's client
stamps its version on what it sends, and a request sent with the version cleared is an
older client's, refused CreateKey; one from a newer client (2**31) is served.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cli import main
from om.client import OMClient, OMClientError
from om.client import requests as build
from om.cluster import lifecycle as om_cluster
from om.executor.admin import upgrade
from om.gatekeeper.old_clients import MODIFY_REFUSED
from om.protocol import om_pb2
from om.protocol.client_version import CURRENT_VERSION
from om.protocol.framing import encode_frame
from tests import cluster_harness as harness
from tests.processes import read_answer

pytestmark = pytest.mark.integration   # real 3-node clusters

V, B = "vol", "bkt"
LAYOUT_TOML = "\n[upgrade]\ninit_layout_version = 1\n"


@pytest.fixture(scope="module", params=["leader", "replicated"])
def cluster(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path_factory.mktemp(f"upgrade-{request.param}"),
                            extra_toml=LAYOUT_TOML, execution=request.param)
    try:
        yield started
        harness.wait_converged(started)
        digests = harness.digests_after_stop(started)
        assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests
    finally:
        om_cluster.down(started)


def status(om: OMClient, request: om_pb2.OMRequest) -> str:
    return om_pb2.Status.Name(om.call_raw(request).status)


def each_node(cluster: om_cluster.Cluster, request: om_pb2.OMRequest) -> list[om_pb2.OMResponse]:
    """Every node's own answer to a local read."""
    answers = []
    for address in cluster.addresses:
        with OMClient([address], tls=cluster.client_tls()) as one:
            local = om_pb2.OMRequest()
            local.CopyFrom(request)
            local.local_read = True
            answers.append(one.call_raw(local))
    return answers


def cli(capsys: pytest.CaptureFixture[str], cluster: om_cluster.Cluster, *args: str
        ) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["admin", "om", *args, "--dir", str(cluster.directory), "--wait", "30"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def snapshot_mtime(cluster: om_cluster.Cluster, node_id: str) -> float:
    dump = Path(cluster.config.data_dir) / node_id / "raft" / "raft.snapshot"
    return dump.stat().st_mtime if dump.exists() else 0.0


def wait_for(condition: object, timeout_s: float = 20.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.1)


def assert_refused_while_prepared(om: OMClient, key: str) -> None:
    """A write is refused with Ozone's 74 and writes nothing; a read is answered."""
    answer = om.call_raw(build.create_key(V, B, key, 10))
    assert answer.status == 74, answer
    assert om_pb2.Status.Name(answer.status) == "NOT_SUPPORTED_OPERATION_WHEN_PREPARED"
    assert status(om, build.lookup_key(V, B, key)) == "KEY_NOT_FOUND"
    assert om.info_bucket(V, B).bucket_name == B


@pytest.mark.slow
def test_prepare_restart_leader_change_cancel_and_finalize(
        cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [n.id for n in cluster.nodes]
    with harness.client(cluster) as om:
        om.create_volume(V)
        om.create_bucket(V, B)
        refused = om.call_raw(build.initiate_multipart_upload(V, B, "mpu", 1))
        assert refused.status == 75, refused
        assert not om.list_multipart_uploads(V, B).uploads
        # the flow switch needs switchable OMs (tests/test_flow_switch_cluster.py)
        assert status(om, build.set_flows([om_pb2.CreateKey])) == "NOT_SUPPORTED_OPERATION"

        # prepare: every node applies the marker and compacts its Raft log
        before = time.time() - 1.0
        code, out = cli(capsys, cluster, "prepare", "-id", "omservice")
        assert code == 0, out
        assert "every OM is prepared" in out
        wait_for(lambda: all(snapshot_mtime(cluster, n) >= before for n in nodes))
        index = om.prepare_status().prepare_index
        assert index > 0
        assert_refused_while_prepared(om, "k1")
        twice = om.call_raw(build.prepare())
        assert twice.status == om_pb2.OK, twice
        assert twice.prepare.already_prepared
        assert twice.prepare.prepare_index == index
        assert status(om, build.finalize_upgrade()) == "NOT_SUPPORTED_OPERATION_WHEN_PREPARED"

        # the leader dies: its successor reads the marker from its applied state
        old_leader = harness.leader_id(cluster)
        cluster.kill_node(old_leader)
        wait_for(lambda: any(i.role == "LEADER" for i in cluster.node_infos()), 30.0)
        assert_refused_while_prepared(om, "k2")
        cluster.start_node(old_leader)
        cluster.wait_ready(60)

    # a full restart: every node reads the marker from its store
    for node in nodes:
        cluster.stop_node(node)
    for node in nodes:
        cluster.start_node(node)
    cluster.wait_ready(60)
    with harness.client(cluster) as om:
        assert_refused_while_prepared(om, "k3")
        answers = each_node(cluster, build.prepare_status())
        assert [(a.prepare_status.status, a.prepare_status.prepare_index) for a in answers] \
            == [(om_pb2.PREPARE_COMPLETED, index)] * 3

        code, out = cli(capsys, cluster, "cancelprepare")
        assert code == 0, out
        assert "cancelled" in out
        om.put_key(V, B, "k4", 10)
        code, out = cli(capsys, cluster, "cancelprepare")
        assert code == 0, out
        assert "was not prepared" in out

        # a Prepare whose leader is killed as it is sent: the client's retry (same call
        # id) is answered by the next leader, and every node ends prepared
        leader = harness.leader_id(cluster)
        prepared: list[om_pb2.OMResponse] = []

        def prepare_once() -> None:
            with harness.client(cluster, deadline_s=40.0) as patient:
                prepared.append(patient.call_raw(build.prepare()))

        sender = threading.Thread(target=prepare_once)
        sender.start()
        time.sleep(0.05)
        cluster.kill_node(leader)
        sender.join(timeout=60)
        assert not sender.is_alive()
        assert [a.status for a in prepared] == [om_pb2.OK], prepared
        cluster.start_node(leader)
        cluster.wait_ready(60)
        harness.wait_converged(cluster)
        assert {a.prepare_status.status for a in each_node(cluster, build.prepare_status())} \
            == {om_pb2.PREPARE_COMPLETED}
        assert_refused_while_prepared(om, "k5")
        assert om.cancel_prepare().was_prepared

        code, out = cli(capsys, cluster, "finalizationstatus")
        assert code == 0, out
        assert out.count("FINALIZATION_REQUIRED") == 3, out

        # a finalize whose leader is killed as it is sent, a follower down too
        leader = harness.leader_id(cluster)
        follower = next(n for n in nodes if n != leader)
        cluster.kill_node(follower)

        def finalize_once() -> None:
            try:
                with harness.client(cluster, deadline_s=2.0) as short:
                    short.call_raw(build.finalize_upgrade())
            except OMClientError:
                pass

        sender = threading.Thread(target=finalize_once)
        sender.start()
        time.sleep(0.05)
        cluster.kill_node(leader)
        sender.join(timeout=30)
        assert not sender.is_alive()
        cluster.start_node(follower)
        cluster.start_node(leader)
        cluster.wait_ready(60)
        harness.wait_converged(cluster)
        states = {a.finalize_upgrade_progress.metadata_layout_version
                  for a in each_node(cluster, build.finalize_upgrade_progress())}
        assert len(states) == 1, f"the replicas disagree on the layout: {states}"
        code, out = cli(capsys, cluster, "finalizeupgrade")
        assert code == 0, out
        assert "every OM is finalized" in out
        answers = each_node(cluster, build.finalize_upgrade_progress())
        assert {(a.finalize_upgrade_progress.status,
                 a.finalize_upgrade_progress.metadata_layout_version) for a in answers} == {
            (om_pb2.ALREADY_FINALIZED, upgrade.SOFTWARE_LAYOUT_VERSION)}
        upload = om.initiate_multipart_upload(V, B, "mpu")
        om.abort_multipart_upload(V, B, "mpu", upload)


def _send_to_leader(cluster: om_cluster.Cluster, request: om_pb2.OMRequest
                    ) -> om_pb2.OMResponse:
    """One hand-made frame to the leader, as is: no client stamps it."""
    leader = harness.leader_id(cluster)
    address = next(n for n in cluster.nodes if n.id == leader)
    with harness.raw_connection(cluster, address, timeout_s=20) as conn:
        conn.sendall(encode_frame(request.SerializeToString()))
        return read_answer(conn)


def test_the_client_stamps_its_version_and_an_unstamped_create_key_is_refused(
        cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster) as om:
        om.create_volume("clientver")
        om.create_bucket("clientver", B)
        unstamped = build.create_key("clientver", B, "old", 5)
        unstamped.client_id, unstamped.call_id = "a-client-before-versions", 1
        unstamped.ClearField("client_version")
        refused = _send_to_leader(cluster, unstamped)
        assert (om_pb2.Status.Name(refused.status), refused.message) == (
            "NOT_SUPPORTED_OPERATION", MODIFY_REFUSED), refused
        newer = build.create_key("clientver", B, "newer", 5)
        newer.client_id, newer.call_id, newer.client_version = "a-newer-client", 1, 2**31
        served = _send_to_leader(cluster, newer)
        assert om_pb2.Status.Name(served.status) == "OK", served
        cleared = build.create_key("clientver", B, "current", 5)
        cleared.ClearField("client_version")
        assert om.call(cleared).create_key.client_session_id, "the client stamped it"
        assert cleared.client_version == CURRENT_VERSION
