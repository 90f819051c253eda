"""A real ``om serve`` process, driven through the client and the CLI."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import OMClient
from om.client.errors import BucketNotEmpty, KeyNotFound, QuotaExceeded
from om.client.retry_policy import RetryPolicy
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder, encode_frame
from tests.processes import REPO, ServerProcess, free_port, om_command

pytestmark = pytest.mark.integration


@pytest.fixture(params=[1, 2], ids=["1-worker", "2-workers"])
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A node serving clients itself, or through two front workers."""
    process = ServerProcess(tmp_path / "data", free_port(), "--workers", str(request.param))
    yield process
    process.kill()


def sh(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(om_command("sh", "--om", address, *args), capture_output=True,
                          text=True, cwd=REPO, timeout=60, check=False)


def raw_exchange(address: str, payload: bytes) -> tuple[list[om_pb2.OMResponse], bool]:
    """Sends raw bytes; returns the responses read and whether the server closed."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        decoder = FrameDecoder()
        responses: list[om_pb2.OMResponse] = []
        while data := conn.recv(65536):
            responses.extend(om_pb2.OMResponse.FromString(f) for f in decoder.feed(data))
    return responses, True


def test_client_drives_the_namespace(server: ServerProcess) -> None:
    with OMClient([server.address]) as client:
        client.create_volume("vol")
        client.create_bucket("vol", "bkt", quota_in_bytes=30_000)
        for i in range(25):
            client.put_key("vol", "bkt", f"dir/k{i:02d}", 100)
        page = client.list_keys("vol", "bkt", prefix="dir/", max_keys=10)
        assert [k.key_name for k in page.key_info][:2] == ["dir/k00", "dir/k01"]
        assert page.truncated
        rest = client.list_keys("vol", "bkt", start_key="dir/k09", max_keys=100)
        assert len(rest.key_info) == 15
        assert not rest.truncated
        client.rename_key("vol", "bkt", "dir/k00", "moved")
        assert client.lookup_key("vol", "bkt", "moved").data_size == 100
        with pytest.raises(KeyNotFound):
            client.lookup_key("vol", "bkt", "dir/k00")
        with pytest.raises(QuotaExceeded):
            client.put_key("vol", "bkt", "big", 10_000)
        with pytest.raises(BucketNotEmpty):
            client.delete_bucket("vol", "bkt")
        bucket = client.info_bucket("vol", "bkt")
        assert (bucket.used_bytes, bucket.used_namespace) == (25 * 300, 25)


@pytest.mark.slow
def test_cli_mirrors_ozone_sh(server: ServerProcess) -> None:
    assert sh(server.address, "volume", "create", "/vol").returncode == 0
    created = sh(server.address, "bucket", "create", "/vol/bkt", "--quota", "1MB",
                 "--namespace-quota", "10")
    assert created.returncode == 0, created.stderr
    info = sh(server.address, "bucket", "info", "/vol/bkt")
    assert json.loads(info.stdout)["quotaInBytes"] == 1 << 20
    assert sh(server.address, "key", "put", "/vol/bkt/a/file.bin", "--size", "4096").returncode == 0
    listed = sh(server.address, "key", "list", "/vol/bkt")
    assert [k["name"] for k in json.loads(listed.stdout)] == ["a/file.bin"]
    assert json.loads(sh(server.address, "key", "info", "/vol/bkt/a/file.bin").stdout)[
        "dataSize"] == 4096
    missing = sh(server.address, "key", "info", "/vol/bkt/nope")
    assert missing.returncode == 255
    assert missing.stderr.startswith("KEY_NOT_FOUND ")
    bad = sh(server.address, "bucket", "create", "/vol/Bad_Name")
    assert bad.returncode == 255
    assert bad.stderr.startswith("INVALID_BUCKET_NAME ")
    usage = sh(server.address, "key", "put", "/vol/bkt")
    assert usage.returncode == 2
    roles = subprocess.run(om_command("admin", "roles", "--om", server.address, "--json"),
                           capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    (node,) = json.loads(roles.stdout)
    assert node["role"] == "LEADER"
    assert node["execution"] == "leader"
    metrics = subprocess.run(om_command("admin", "metrics", "--om", server.address),
                             capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    assert re.search(r"gc_gen0_threshold\D+10000\b", metrics.stdout)
    assert "gc_frozen_objects" in metrics.stdout


def test_malformed_frame_is_answered_and_the_connection_lives(server: ServerProcess) -> None:
    good = om_pb2.OMRequest(cmd_type=om_pb2.ListVolume, client_id="c", call_id=7,
                            list_volume=om_pb2.ListVolumeRequest())
    unknown = om_pb2.OMRequest(cmd_type=om_pb2.Type.Value("PersistDb"), client_id="c",
                               call_id=8)
    payload = (encode_frame(b"\xff\xff\xff not protobuf")
               + encode_frame(unknown.SerializeToString())
               + encode_frame(good.SerializeToString()))
    responses, _ = raw_exchange(server.address, payload)
    by_call = {r.call_id: r for r in responses}
    assert by_call[0].status == om_pb2.INVALID_REQUEST
    assert by_call[8].status == om_pb2.INVALID_REQUEST
    assert by_call[7].status == om_pb2.OK


def test_pipelined_writes_then_half_close_get_every_answer_once(server: ServerProcess) -> None:
    """Answers finishing together are written together, and the ones still queued
    when the client half-closes are written before the connection closes."""
    calls = range(1, 51)
    payload = b"".join(encode_frame(om_pb2.OMRequest(
        cmd_type=om_pb2.CreateVolume, client_id="pipe", call_id=call, user="alice",
        create_volume=om_pb2.CreateVolumeRequest(volume=f"vol{call}")).SerializeToString())
        for call in calls)
    responses, _ = raw_exchange(server.address, payload)
    assert sorted(r.call_id for r in responses) == list(calls)
    assert {r.status for r in responses} == {om_pb2.OK}


def test_oversized_frame_closes_only_that_connection(server: ServerProcess) -> None:
    with OMClient([server.address]) as bystander:
        bystander.create_volume("vol")
        responses, closed = raw_exchange(server.address, (64 << 20).to_bytes(4, "big") + b"x")
        assert closed
        assert [r.status for r in responses] == [om_pb2.INVALID_REQUEST]
        assert "limit" in responses[0].message
        assert bystander.info_volume("vol").volume == "vol"


def test_state_and_retry_answers_survive_a_restart(tmp_path: Path) -> None:
    port = free_port()
    first = ServerProcess(tmp_path / "data", port)
    client = OMClient([first.address], client_id="fixed-client")
    client.create_volume("vol")
    client.create_bucket("vol", "bkt")
    request = om_pb2.OMRequest(cmd_type=om_pb2.CreateKey, call_id=99,
                               create_key=om_pb2.CreateKeyRequest(volume="vol", bucket="bkt",
                                                                  key="k", data_size=5))
    opened = client.call(request)
    client.close()
    assert first.stop() == 0, "graceful shutdown exits 0"
    second = ServerProcess(tmp_path / "data", port)
    try:
        with OMClient([second.address], client_id="fixed-client") as retrying:
            again = retrying.call(request)
        assert again.SerializeToString() == opened.SerializeToString()
        with OMClient([second.address], policy=RetryPolicy(deadline_s=5)) as fresh:
            assert fresh.info_bucket("vol", "bkt").bucket_name == "bkt"
    finally:
        second.kill()
