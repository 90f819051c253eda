"""Multipart upload on real 3-node clusters (127.0.0.1), in both execution flows.

Parts committed out of order from racing clients, a part committed twice (the later
replaces the earlier, the bucket's usage exact), an aborted upload (its parts' bytes
released, the parts in deletedTable), and the red cases with Ozone's statuses and
nothing written. After each scenario every node's auditor (usage = keys + the parts
of uploads in progress) reports nothing; at the end every replica holds the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from om.cli import main
from om.client import OMClient
from om.client import requests as build
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2
from tests import cluster_harness as harness

pytestmark = pytest.mark.integration   # real 3-node clusters

V, B = "vol", "mpu"
MIB = 1024 * 1024
BIG = 5 * MIB
REPLICAS = 3


@pytest.fixture(scope="module", params=["leader", "replicated"])
def cluster(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    execution, workers = harness.FLOWS[request.param]
    started = harness.start(tmp_path_factory.mktemp(f"mpu-{request.param}"),
                            execution=execution, workers=workers)
    try:
        with harness.client(started) as om:
            om.create_volume(V)
            om.create_bucket(V, B)
        yield started
        harness.wait_converged(started)
        digests = harness.digests_after_stop(started)
        assert len({json.dumps(d, sort_keys=True) for d in digests.values()}) == 1, digests
    finally:
        om_cluster.down(started)


@pytest.fixture
def om(cluster: om_cluster.Cluster, capsys: pytest.CaptureFixture[str]) -> Iterator[OMClient]:
    """A client; afterwards every node's auditor must find the store consistent."""
    with harness.client(cluster) as client:
        yield client
    harness.wait_converged(cluster)
    capsys.readouterr()
    status = main(["admin", "audit", "--dir", str(cluster.directory), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert all(n["violations_total"] == 0 for n in report["nodes"]), report["nodes"]


def usage(om: OMClient) -> tuple[int, int]:
    info = om.info_bucket(V, B)
    return info.used_bytes, info.used_namespace


def status_of(om: OMClient, request: om_pb2.OMRequest) -> str:
    return om_pb2.Status.Name(om.call_raw(request).status)


def test_racing_parts_out_of_order_and_a_part_committed_twice(
        cluster: om_cluster.Cluster, om: OMClient) -> None:
    before_bytes, before_keys = usage(om)
    upload_id = om.initiate_multipart_upload(V, B, "movie")
    sizes = {n: BIG + n for n in range(1, 9)}

    def put(n: int) -> tuple[int, str]:
        with harness.client(cluster) as client:
            return n, client.put_part(V, B, "movie", upload_id, n, sizes[n])

    with ThreadPoolExecutor(8) as pool:
        names = dict(pool.map(put, reversed(range(1, 9)), timeout=60))
    charged = sum(sizes.values()) * REPLICAS
    assert usage(om) == (before_bytes + charged, before_keys)
    earlier = names[4]
    names[4] = om.put_part(V, B, "movie", upload_id, 4, 2 * BIG)
    charged += (2 * BIG - sizes[4]) * REPLICAS
    assert usage(om) == (before_bytes + charged, before_keys), "the later part replaces"
    parts = om.list_multipart_upload_parts(V, B, "movie", upload_id).parts
    assert [(p.part_number, p.part_name) for p in parts] == sorted(names.items())

    refused = build.complete_multipart_upload(V, B, "movie", upload_id,
                                              [(1, ""), (4, earlier)])
    assert status_of(om, refused) == "INVALID_PART"
    info = om.complete_multipart_upload(V, B, "movie", upload_id, sorted(names.items()))
    assert info.data_size == sum(sizes.values()) - sizes[4] + 2 * BIG
    assert usage(om) == (before_bytes + charged, before_keys + 1)
    assert om.lookup_key(V, B, "movie") == info
    assert not om.list_multipart_uploads(V, B).uploads


def test_an_aborted_upload_releases_its_parts(om: OMClient) -> None:
    before = usage(om)
    upload_id = om.initiate_multipart_upload(V, B, "dropped")
    for n in (3, 1, 2):
        om.put_part(V, B, "dropped", upload_id, n, BIG)
    assert usage(om) == (before[0] + 3 * BIG * REPLICAS, before[1])
    listed = om.list_multipart_uploads(V, B, "drop").uploads
    assert [u.upload_id for u in listed] == [upload_id]
    om.abort_multipart_upload(V, B, "dropped", upload_id)
    assert usage(om) == before, "the parts' bytes are released"
    assert not om.list_multipart_uploads(V, B, "drop").uploads
    again = build.abort_multipart_upload(V, B, "dropped", upload_id)
    assert status_of(om, again) == "NO_SUCH_MULTIPART_UPLOAD_ERROR"


def test_bad_input_is_refused_with_ozone_statuses_and_writes_nothing(om: OMClient) -> None:
    upload_id = om.initiate_multipart_upload(V, B, "bad")
    om.put_part(V, B, "bad", upload_id, 1, BIG)
    om.put_part(V, B, "bad", upload_id, 2, BIG)
    before = usage(om), om.list_multipart_upload_parts(V, B, "bad", upload_id)
    session = om.create_key(V, B, "bad", 5).client_session_id   # any open session
    cases = {
        "INVALID_PART": build.complete_multipart_upload(V, B, "bad", upload_id,
                                                        [(1, ""), (3, "")]),
        "INVALID_PART_ORDER": build.complete_multipart_upload(V, B, "bad", upload_id,
                                                              [(2, ""), (1, "")]),
        "INVALID_REQUEST": build.commit_multipart_upload(V, B, "bad", upload_id, 10_001,
                                                         session, 5),
        "NO_SUCH_MULTIPART_UPLOAD_ERROR": build.complete_multipart_upload(
            V, B, "bad", "12345", [(1, "")]),
    }
    got = {expected: om.call_raw(request) for expected, request in cases.items()}
    assert {e: om_pb2.Status.Name(r.status) for e, r in got.items()} == {e: e for e in cases}
    assert got["INVALID_PART"].status == 55
    assert got["INVALID_PART_ORDER"].status == 56
    assert got["INVALID_REQUEST"].status == 39
    assert got["NO_SUCH_MULTIPART_UPLOAD_ERROR"].status == 26
    assert (usage(om), om.list_multipart_upload_parts(V, B, "bad", upload_id)) == before
    assert status_of(om, build.lookup_key(V, B, "bad")) == "KEY_NOT_FOUND"
    om.abort_multipart_upload(V, B, "bad", upload_id)


def test_on_a_file_system_bucket_racing_parts_complete_into_a_file_of_the_tree(
        cluster: om_cluster.Cluster, om: OMClient) -> None:
    """Parts from racing clients, and a sibling directory made while they run: the
    complete makes the missing parents and the file; the auditor checks the tree."""
    om.create_bucket(V, "fsmpu", layout="FILE_SYSTEM_OPTIMIZED")
    upload_id = om.initiate_multipart_upload(V, "fsmpu", "logs/2026/day.gz")

    def put(n: int) -> tuple[int, str]:
        with harness.client(cluster) as client:
            if n == 1:
                client.create_directory(V, "fsmpu", "logs/2025")
            return n, client.put_part(V, "fsmpu", "logs/2026/day.gz", upload_id, n, BIG + n)

    with ThreadPoolExecutor(4) as pool:
        names = dict(pool.map(put, (4, 3, 2, 1), timeout=60))
    info = om.complete_multipart_upload(V, "fsmpu", "logs/2026/day.gz", upload_id,
                                        sorted(names.items()))
    assert info.key_name == "logs/2026/day.gz"
    assert info.data_size == sum(BIG + n for n in names)
    status = om.get_file_status(V, "fsmpu", "logs/2026/day.gz")
    assert status.key_info.object_id == info.object_id
    bucket = om.info_bucket(V, "fsmpu")
    assert bucket.used_namespace == 4, "logs, logs/2025, logs/2026 and the file"
    assert bucket.used_bytes == info.data_size * REPLICAS
