"""``om fs`` and ``om sh`` on a file-system bucket, against a real ``om serve``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.cli.fs.shell import FsUsageError, normalize, parse_path
from om.client import OMClient
from om.protocol import om_pb2
from tests.processes import REPO, ServerProcess, free_port, om_command

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path_factory.mktemp("fs") / "data", free_port())
    yield process
    process.kill()


def om(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(om_command(args[0], "--om", server.address, *args[1:]),
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)


def ok(server: ServerProcess, *args: str) -> str:
    done = om(server, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_the_verbs_people_type(server: ServerProcess) -> None:
    ok(server, "sh", "volume", "create", "/vol1")
    ok(server, "sh", "bucket", "create", "/vol1/lake", "--layout", "fso")
    info = json.loads(ok(server, "sh", "bucket", "info", "/vol1/lake"))
    assert info["bucketLayout"] == "FILE_SYSTEM_OPTIMIZED"
    ok(server, "fs", "mkdir", "-p", "/vol1/lake/wh/db/t1")
    ok(server, "fs", "-mkdir", "-p", "ofs://om-host/vol1/lake/wh/db/t1")   # HDFS spelling, twice
    assert om(server, "fs", "mkdir", "/vol1/lake/no/such").returncode == 2
    ok(server, "fs", "touch", "/vol1/lake/wh/db/t1/part-0")
    ok(server, "sh", "key", "put", "/vol1/lake/wh/db/t1/part-1", "--size", "1000")
    listing = ok(server, "fs", "ls", "-R", "/vol1/lake")
    assert [line.split()[-1] for line in listing.splitlines()] == [
        "/vol1/lake/wh", "/vol1/lake/wh/db", "/vol1/lake/wh/db/t1", "/vol1/lake/wh/db/t1/part-0",
        "/vol1/lake/wh/db/t1/part-1"]
    assert ok(server, "fs", "stat", "/vol1/lake/wh/db").startswith("directory 0 ")
    ok(server, "fs", "mkdir", "/vol1/lake/archive")
    ok(server, "fs", "mv", "/vol1/lake/wh/db", "/vol1/lake/archive")   # into a directory
    assert "/vol1/lake/archive/db" in ok(server, "fs", "ls", "/vol1/lake/archive")
    assert ok(server, "fs", "du", "-s", "/vol1/lake/archive").split()[:2] == ["1000", "3000"]
    refused = om(server, "fs", "rm", "/vol1/lake/archive")
    assert refused.returncode == 255
    assert refused.stderr.startswith("DIRECTORY_NOT_EMPTY")
    ok(server, "fs", "rm", "-r", "/vol1/lake/archive")
    gone = om(server, "fs", "stat", "/vol1/lake/archive/db")
    assert gone.returncode == 255
    assert gone.stderr.startswith("FILE_NOT_FOUND")
    keys = json.loads(ok(server, "sh", "key", "list", "/vol1/lake"))
    assert [(k["name"], k["file"]) for k in keys] == [("wh/", False)]


def test_file_system_verbs_on_an_object_store_bucket_are_refused(server: ServerProcess) -> None:
    ok(server, "sh", "volume", "create", "/vol2")
    ok(server, "sh", "bucket", "create", "/vol2/flat")
    refused = om(server, "fs", "mkdir", "-p", "/vol2/flat/a")
    assert refused.returncode == 255
    assert refused.stderr.startswith("NOT_SUPPORTED_OPERATION")


def test_paths_and_spelling() -> None:
    assert str(parse_path("ofs://host:9862/v/b/a/b")) == "/v/b/a/b"
    assert parse_path("/v/b").path == ""
    with pytest.raises(FsUsageError):
        parse_path("/v")
    assert normalize(["fs", "-ls", "/v/b"]) == ["fs", "ls", "/v/b"]
    assert normalize(["sh", "-ls"]) == ["sh", "-ls"]
    assert Path(REPO).exists()


@pytest.mark.parametrize("request_", [
    om_pb2.OMRequest(cmd_type=om_pb2.PurgeDirectories,
                     purge_directories=om_pb2.PurgeDirectoriesRequest(
                         volume="vol1", bucket="lake", rows_max=10)),
    om_pb2.OMRequest(cmd_type=om_pb2.PurgeKeys, purge_keys=om_pb2.PurgeKeysRequest(
        keys=[b"/vol1/lake/k/1"], retired_before_ms=1 << 62)),
    om_pb2.OMRequest(cmd_type=om_pb2.DeleteOpenKeys,
                     delete_open_keys=om_pb2.DeleteOpenKeysRequest(
                         open_keys=[om_pb2.OpenKeyRef(table=om_pb2.OPEN_KEY, key=b"k")],
                         created_before_ms=1 << 62)),
    om_pb2.OMRequest(cmd_type=om_pb2.AbortExpiredMultiPartUploads,
                     abort_expired_multipart_uploads=om_pb2.AbortExpiredMultiPartUploadsRequest(
                         uploads=[om_pb2.MultipartUploadRef(volume="vol1", bucket="lake",
                                                            key="k", upload_id="1")],
                         created_before_ms=1 << 62)),
], ids=["PurgeDirectories", "PurgeKeys", "DeleteOpenKeys", "AbortExpiredMultiPartUploads"])
def test_a_client_may_not_send_the_leaders_purges(server: ServerProcess,
                                                  request_: om_pb2.OMRequest) -> None:
    with OMClient([server.address], user="alice") as client:
        response = client.call_raw(request_)
    assert response.status == om_pb2.INVALID_REQUEST
    assert "leader's own request" in response.message
