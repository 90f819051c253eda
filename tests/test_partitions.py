"""Partitions of Raft links on 127.0.0.1, through om chaos's link proxies."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.chaos.links import LinkProxies
from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.config import NodeAddress
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, encode_frame
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration


@pytest.fixture
def partitioned(tmp_path: Path) -> Iterator[tuple[om_cluster.Cluster, LinkProxies]]:
    base = om_cluster.free_port_base()
    links = LinkProxies(om_cluster.node_addresses(3, base))
    links.start()
    cluster = om_cluster.up(tmp_path / "cluster", 3, base, "leader",
                            harness.FAST_RAFT + links.links_toml(), timeout_s=60,
                            remember_it=False)
    yield cluster, links
    links.heal()
    om_cluster.down(cluster)
    links.stop()


def _ask(cluster: om_cluster.Cluster, address: NodeAddress, request: om_pb2.OMRequest,
         timeout_s: float) -> om_pb2.OMResponse | None:
    """One attempt at one node; None when it does not answer in time."""
    with harness.raw_connection(cluster, address, timeout_s) as conn:
        conn.sendall(encode_frame(request.SerializeToString()))
        decoder = FrameDecoder()
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return None
                frames = decoder.feed(data)
                if frames:
                    return om_pb2.OMResponse.FromString(frames[0])
        except TimeoutError:
            return None


def test_a_minority_leader_serves_neither_writes_nor_reads(
        partitioned: tuple[om_cluster.Cluster, LinkProxies]) -> None:
    cluster, links = partitioned
    with harness.client(cluster) as om:
        om.create_volume("vol")
    old = harness.leader_id(cluster)
    address = next(n for n in cluster.nodes if n.id == old)
    others = [n for n in cluster.nodes if n.id != old]
    for other in others:
        links.cut_both_ways(old, other.id)
    answers: list[om_pb2.OMResponse | None] = []

    def ask_old(request: om_pb2.OMRequest) -> None:
        answers.append(_ask(cluster, address, request, timeout_s=8))

    write = om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume, client_id="minority", call_id=1,
                             create_volume=om_pb2.CreateVolumeRequest(volume="minority"))
    read = om_pb2.OMRequest(cmd_type=om_pb2.InfoVolume, client_id="minority", call_id=2,
                            info_volume=om_pb2.InfoVolumeRequest(volume="vol"))
    askers = [threading.Thread(target=ask_old, args=(r,)) for r in (write, read)]
    for asker in askers:
        asker.start()
    with OMClient([n.address for n in others], policy=RetryPolicy(deadline_s=20),
                  tls=cluster.client_tls()) as om:
        om.create_volume("majority")                 # the majority elects and serves
        assert om.last_node != address.address
    for asker in askers:
        asker.join(timeout=20)
    assert len(answers) == 2
    for answer in answers:
        assert answer is None or answer.status in (om_pb2.NOT_LEADER,
                                                   om_pb2.LEADER_NOT_READY), answer
    links.heal()
    with harness.client(cluster) as om:
        names = {v.volume for v in om.list_volumes().volume_info}
    assert {"vol", "majority"} <= names
    assert "minority" not in names, "the minority leader's write committed"
    harness.wait_converged(cluster)
    digests = harness.digests_after_stop(cluster)
    assert digests["om1"] == digests["om2"] == digests["om3"]


def test_a_cut_direction_holds_its_bytes_until_healed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        target = NodeAddress("b", "127.0.0.1", 1, server.getsockname()[1])
        links = LinkProxies([NodeAddress("a", "127.0.0.1", 2, 3), target])
        links.start()
        try:
            with socket.create_connection(("127.0.0.1", links.ports["a>b"])) as client:
                accepted, _ = server.accept()
                with accepted:
                    links.cut("a", "b")
                    time.sleep(0.1)
                    client.sendall(b"held")
                    accepted.sendall(b"back")          # the other way still flows
                    assert client.recv(4) == b"back"
                    accepted.settimeout(0.3)
                    with pytest.raises(TimeoutError):
                        accepted.recv(4)
                    links.heal()
                    accepted.settimeout(5)
                    assert accepted.recv(4) == b"held"
        finally:
            links.stop()
