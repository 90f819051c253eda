"""Reads are linearizable by default, on real 3-node clusters (both flows).

The adversarial case from the issue: a leader is stopped (SIGSTOP of its
processes) long enough for the others to elect a new one, a write is
acknowledged by the new leader, and a read sent to the old leader *while it is
stopped* is answered as soon as it resumes. It must never return the value
from before the acknowledged write: a retryable refusal or the new value.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, encode_frame
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration
ROUNDS = 3


# the leader flow again with several batches in flight: a read round rides on a batch
# sealed after the read arrived, whatever batches are still replicating
PIPELINED = "leader-4-batches"


@pytest.fixture(params=[*harness.FLOW_PARAMS, PIPELINED])
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[om_cluster.Cluster]:
    pipelined = request.param == PIPELINED
    execution, workers = harness.FLOWS["leader" if pipelined else request.param]
    started = harness.start(
        tmp_path / "cluster", execution=execution, workers=workers,
        extra_toml="\n[batch]\ninflight_batches_max = 4\n" if pipelined else "")
    with harness.client(started) as om:
        om.create_volume("register")
    yield started
    om_cluster.down(started)


def _set(om: OMClient, value: int) -> None:
    om.call(om_pb2.OMRequest(cmd_type=om_pb2.SetVolumeProperty,
                             set_volume_property=om_pb2.SetVolumePropertyRequest(
                                 volume="register", quota_in_bytes=value)))


def _new_leader(cluster: om_cluster.Cluster, old: str) -> om_pb2.NodeInfo:
    others = [n.address for n in cluster.nodes if n.id != old]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        leaders = [i for i in om_cluster.node_infos(others, 0.5, cluster.client_tls())
                   if i.role == "LEADER"]
        if leaders:
            return leaders[0]
        time.sleep(0.05)
    raise AssertionError("no new leader while the old one was stopped")


def test_a_resumed_deposed_leader_never_serves_a_stale_read(
        cluster: om_cluster.Cluster) -> None:
    for value in range(1, ROUNDS + 1):
        old = harness.leader_id(cluster)
        with harness.client(cluster) as om:
            _set(om, 1000 * value)
        address = next(n for n in cluster.nodes if n.id == old)
        read = om_pb2.OMRequest(cmd_type=om_pb2.InfoVolume, client_id="reader",
                                call_id=value,
                                info_volume=om_pb2.InfoVolumeRequest(volume="register"))
        # connected (the TLS handshake done) while the old leader runs
        with harness.raw_connection(cluster, address, timeout_s=10) as conn:
            cluster.signal_node(old, signal.SIGSTOP)
            try:
                new = _new_leader(cluster, old)
                with OMClient([new.address], policy=RetryPolicy(deadline_s=20),
                              tls=cluster.client_tls()) as om:
                    _set(om, 1000 * value + 1)           # acknowledged by the new leader
                conn.sendall(encode_frame(read.SerializeToString()))   # queued while stopped
            finally:
                cluster.signal_node(old, signal.SIGCONT)
            decoder = FrameDecoder()
            frames: list[bytes] = []
            while not frames:
                frames = decoder.feed(conn.recv(65536))
        answer = om_pb2.OMResponse.FromString(frames[0])
        if answer.status == om_pb2.OK:
            assert answer.info_volume.volume_info.quota_in_bytes == 1000 * value + 1, (
                f"round {value}: the deposed leader served a stale read")
        else:
            assert answer.status in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY)
        harness.wait_converged(cluster)


def test_local_reads_are_answered_by_a_follower(cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster) as om:
        _set(om, 4242)
    harness.wait_converged(cluster)
    leader = harness.leader_id(cluster)
    follower = next(n for n in cluster.nodes if n.id != leader)
    with OMClient([follower.address], read_mode="local",
                  policy=RetryPolicy(deadline_s=5), tls=cluster.client_tls()) as om:
        info = om.info_volume("register")
        assert info.quota_in_bytes == 4242
        assert om.last_node == follower.address, "answered by the follower itself"
    with OMClient([follower.address], policy=RetryPolicy(deadline_s=5),
                  tls=cluster.client_tls()) as om:
        assert om.info_volume("register").quota_in_bytes == 4242
        assert om.last_node != follower.address, "a linearizable read goes to the leader"
