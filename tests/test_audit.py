"""The audit log: exactly one Ozone-shaped line per operation on the node that answered
it, denials included, retries of a committed write not repeated, nothing on followers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.observe.audit import AuditLog, AuditSettings
from om.protocol import om_pb2
from tests import cluster_harness as harness

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \| INFO  \| OMAudit \| "
                  r"user=(?P<user>\S+) \| ip=(?P<ip>\S+) \| op=(?P<op>[A-Z_]+) "
                  r"\{(?P<params>[^}]*)\} \| ret=(?P<ret>SUCCESS|FAILURE) \|(?P<rest>.*)$")


def lines(path: Path) -> list[re.Match[str]]:
    text = path.read_text() if path.exists() else ""
    matches = [LINE.match(line) for line in text.splitlines()]
    assert all(matches), text
    return [m for m in matches if m is not None]


def test_a_line_has_ozones_shape(tmp_path: Path) -> None:
    audit = AuditLog(AuditSettings(tmp_path / "audit.log"), "t1")
    body = om_pb2.LookupKeyRequest(volume="v", bucket="b", key="k")
    audit.record("alice", "127.0.0.1", "LookupKey", body, False, "KEY_NOT_FOUND", "no k")
    audit.record("alice", "127.0.0.1", "CommitKey", body, True, "OK", "")
    audit.record("alice", "127.0.0.1", "CommitKey", body, True, "NOT_LEADER", "elsewhere")
    audit.close()
    first, second = lines(tmp_path / "audit.log")
    assert first["op"] == "READ_KEY"
    assert first["params"] == "volume=v, bucket=b, key=k"
    assert first["ret"] == "FAILURE"
    assert first["rest"] == " KEY_NOT_FOUND: no k"
    assert (second["op"], second["ret"], second["user"]) == ("COMMIT_KEY", "SUCCESS", "alice")


def test_a_clients_control_characters_cannot_break_or_fake_a_line(tmp_path: Path) -> None:
    """A request refused at the gate is audited with its fields as sent: a newline in
    the user or a name must not end the line and start a forged one."""
    audit = AuditLog(AuditSettings(tmp_path / "audit.log"), "t3")
    forged = "x | op=DELETE_VOLUME {volume=v} | ret=SUCCESS |"
    body = om_pb2.CreateBucketRequest(volume="v", bucket=f"b\n{forged}")
    audit.record(f"r\x7fot\r\n{forged}", "-", "CreateBucket", body, True, "INVALID_REQUEST",
                 "user: invalid user name 'r\\x7fot'\u2028")
    audit.close()
    text = (tmp_path / "audit.log").read_text()
    (line,) = text.splitlines()
    assert line.endswith("\\u2028")
    assert "user=r\\x7fot\\x0d\\x0ax | op=DELETE_VOLUME" in line
    assert "bucket=b\\x0ax | op=" in line


def test_reads_can_be_left_out_and_the_file_rotates(tmp_path: Path) -> None:
    audit = AuditLog(AuditSettings(tmp_path / "audit.log", reads=False, max_bytes=2000,
                                   backups=2), "t2")
    body = om_pb2.CreateVolumeRequest(volume="v")
    audit.record("bob", "-", "InfoVolume", body, False, "OK", "")
    for _ in range(100):
        audit.record("bob", "-", "CreateVolume", body, True, "OK", "")
    audit.close()
    files = sorted(tmp_path.glob("audit.log*"))
    assert [f.name for f in files] == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all(f.stat().st_size <= 2000 for f in files)
    assert all(m["op"] == "CREATE_VOLUME" for f in files for m in lines(f))


def test_lines_reach_the_file_within_the_flush_interval_without_close(tmp_path: Path) -> None:
    audit = AuditLog(AuditSettings(tmp_path / "audit.log", flush_interval_s=0.05), "t3")
    try:
        audit.record("bob", "-", "CreateVolume", None, True, "OK", "")
        deadline = time.monotonic() + 5
        while not lines(tmp_path / "audit.log") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [m["op"] for m in lines(tmp_path / "audit.log")] == ["CREATE_VOLUME"]
    finally:
        audit.close()


def test_a_full_buffer_is_written_by_the_caller_in_order(tmp_path: Path) -> None:
    """Back-pressure, never a dropped line: the writer thread is too slow here."""
    audit = AuditLog(AuditSettings(tmp_path / "audit.log", flush_interval_s=3600,
                                   buffer_bytes=500), "t4")
    try:
        for i in range(20):
            audit.record("bob", "-", "CreateVolume", om_pb2.CreateVolumeRequest(volume=f"v{i}"),
                         True, "OK", "")
        written = [m["params"] for m in lines(tmp_path / "audit.log")]
        assert len(written) >= 15, "written without waiting for the thread"
        assert written == [f"volume=v{i}" for i in range(len(written))]
    finally:
        audit.close()
    assert len(lines(tmp_path / "audit.log")) == 20


def test_a_failed_write_is_logged_and_the_server_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog(AuditSettings(Path("/dev/full"), flush_interval_s=3600), "t5")
    audit.record("bob", "-", "CreateVolume", None, True, "OK", "")
    audit.flush()
    audit.record("bob", "-", "CreateVolume", None, True, "OK", "")
    audit.close()
    assert "lines lost" in caplog.text
    assert "No space left on device" in caplog.text


@pytest.mark.integration
def test_one_line_per_operation_on_the_node_that_answered(tmp_path: Path) -> None:
    cluster = om_cluster.up(tmp_path / "cluster", 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT, timeout_s=60, remember_it=False,
                            top_level_toml='acl_enabled = true\nadmins = ["admin"]')
    try:
        leader = harness.leader_id(cluster)
        policy = RetryPolicy(deadline_s=30, attempt_timeout_s=2)
        with OMClient(cluster.addresses, policy=policy,
                      tls=harness.user_tls(cluster, "admin")) as om:
            om.create_volume("audvol")
            om.create_bucket("audvol", "bkt")
            om.put_key("audvol", "bkt", "k1", 5)                 # ALLOCATE_KEY + COMMIT_KEY
            om.lookup_key("audvol", "bkt", "k1")
            missing = om.call_raw(om_pb2.OMRequest(
                cmd_type=om_pb2.LookupKey,
                lookup_key=om_pb2.LookupKeyRequest(volume="audvol", bucket="bkt", key="no")))
            assert missing.status == om_pb2.KEY_NOT_FOUND
            retried = om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume,
                                       create_volume=om_pb2.CreateVolumeRequest(volume="again"))
            assert om.call_raw(retried).status == om_pb2.OK
            assert om.call_raw(retried).status == om_pb2.OK        # same call id: a retry
        with OMClient(cluster.addresses, policy=policy,
                      tls=harness.user_tls(cluster, "mallory")) as intruder:
            denied = intruder.call_raw(om_pb2.OMRequest(
                cmd_type=om_pb2.CreateVolume,
                create_volume=om_pb2.CreateVolumeRequest(volume="stolen")))
            assert denied.status == om_pb2.PERMISSION_DENIED
    finally:
        om_cluster.down(cluster)
    data = cluster.config.data_dir
    records = lines(data / leader / "audit.log")
    summary = [(m["user"], m["op"], m["ret"]) for m in records]
    assert summary == [
        ("admin", "CREATE_VOLUME", "SUCCESS"), ("admin", "CREATE_BUCKET", "SUCCESS"),
        ("admin", "ALLOCATE_KEY", "SUCCESS"), ("admin", "COMMIT_KEY", "SUCCESS"),
        ("admin", "READ_KEY", "SUCCESS"), ("admin", "READ_KEY", "FAILURE"),
        ("admin", "CREATE_VOLUME", "SUCCESS"), ("mallory", "CREATE_VOLUME", "FAILURE")]
    assert records[-1]["rest"].startswith(" PERMISSION_DENIED: ")
    assert all(m["ip"] == "127.0.0.1" for m in records)
    for node in cluster.nodes:
        if node.id != leader:
            assert lines(data / node.id / "audit.log") == []
