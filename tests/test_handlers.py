"""The request handlers, run through ``dispatch`` and applied to a real store.

Every request goes through ``tests.handler_harness.Harness``: it gets a fresh
managed index, a fake clock's time and (unless a test passes some) no quota
reservations; when it succeeds its recorded changes are sealed into a
``PersistDbBatch`` and applied, so each test reads back what a follower would
hold. Expected statuses and layouts follow Apache Ozone's OM
(its request classes and ``OMException.ResultCodes``).

Sections: dispatch; names; volumes; buckets; keys; quotas; object and update ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from om.client import requests as build
from om.executor import registry
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, Limits, QuotaReservations
from om.executor.errors import OMError
from om.protocol import acls, om_pb2
from om.schema import tables
from om.schema.ids import object_id_for
from om.schema.read_view import ReadView
from om.statemachine.store import Store
from tests.handler_harness import CLIENT_ID, LEADER, OLD, FakeReservations, Harness, status_name

V = "vol1"
B = "bucket1"
REPLICAS = 3                   # the default replication factor (RATIS/THREE)
UNLIMITED = -1                 # how a cleared quota is stored (Ozone's QUOTA_RESET)

Build = Callable[[], om_pb2.OMRequest]
Row = TypeVar("Row", om_pb2.VolumeInfo, om_pb2.BucketInfo, om_pb2.KeyInfo,
              om_pb2.RepeatedKeyInfo)


# ------------------------------------------------------------------ fixtures ---

@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = Store(tmp_path_factory.mktemp("handlers") / "db")
    yield db
    db.close()


@pytest.fixture(params=[LEADER, OLD])
def om(store: Store, request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A harness over an empty store, once per execution flow."""
    if request.param == OLD and request.node.get_closest_marker("leader_flow_only"):
        pytest.skip("a leader-flow mechanism")
    harness = Harness(store, flow=request.param)
    yield harness
    harness.close()


@pytest.fixture
def obs(om: Harness) -> Harness:
    """A harness holding volume V and bucket B, both without quotas."""
    om.create_volume(V)
    om.create_bucket(V, B)
    return om


# ------------------------------------------------------------------- helpers ---

def fails(om: Harness, request: om_pb2.OMRequest, expected: str, user: str = "alice",
          reservations: QuotaReservations | None = None) -> om_pb2.OMResponse:
    """Runs ``request``, checks it ends with ``expected`` and wrote nothing at all."""
    before = om.data_digests()
    position = om.position
    response = om.run(request, user=user, reservations=reservations)
    assert status_name(response) == expected, response.message
    assert response.message, "an error response explains itself"
    assert om.last_recorder.empty
    if om.flow == LEADER:  # the old flow logs every write, failed or not
        assert om.position == position
    assert om.data_digests() == before
    return response


def volume_names(response: om_pb2.OMResponse) -> list[str]:
    return [v.volume for v in response.list_volume.volume_info]


def bucket_names(response: om_pb2.OMResponse) -> list[str]:
    return [b.bucket_name for b in response.list_buckets.bucket_info]


def key_names(response: om_pb2.OMResponse) -> list[str]:
    return [k.key_name for k in response.list_keys.key_info]


def page(response: om_pb2.OMResponse) -> tuple[int, bool]:
    """(entries, truncated) of a List* response."""
    body = response.WhichOneof("body")
    if body == "list_volume":
        return len(response.list_volume.volume_info), response.list_volume.truncated
    if body == "list_buckets":
        return len(response.list_buckets.bucket_info), response.list_buckets.truncated
    assert body == "list_keys"
    return len(response.list_keys.key_info), response.list_keys.truncated


def present(row: Row | None) -> Row:
    """The row read back from the store, which must be there."""
    assert row is not None, "row missing from the store"
    return row


def without_update_id(info: om_pb2.KeyInfo) -> om_pb2.KeyInfo:
    copy = om_pb2.KeyInfo()
    copy.CopyFrom(info)
    copy.update_id = 0
    return copy


def retired_at(info: om_pb2.KeyInfo, deletion_time: int) -> om_pb2.KeyInfo:
    """``info`` as its deletedTable row holds it: stamped with when it left the namespace."""
    copy = without_update_id(info)
    copy.deletion_time = deletion_time
    return copy


def replicated(data_size: int, replicas: int = REPLICAS) -> int:
    return data_size * replicas


# ================================================================== dispatch ===

EVERY_REQUEST: list[tuple[str, Build]] = [
    ("CreateVolume", lambda: build.create_volume(V)),
    ("InfoVolume", lambda: build.info_volume(V)),
    ("ListVolume", lambda: build.list_volumes()),
    ("SetVolumeProperty", lambda: build.set_volume_property(V, owner="bob")),
    ("DeleteVolume", lambda: build.delete_volume(V)),
    ("CreateBucket", lambda: build.create_bucket(V, B)),
    ("InfoBucket", lambda: build.info_bucket(V, B)),
    ("ListBuckets", lambda: build.list_buckets(V)),
    ("SetBucketProperty", lambda: build.set_bucket_property(V, B, quota_in_bytes=10)),
    ("DeleteBucket", lambda: build.delete_bucket(V, B)),
    ("CreateKey", lambda: build.create_key(V, B, "k")),
    ("CommitKey", lambda: build.commit_key(V, B, "k", 1, 0)),
    ("LookupKey", lambda: build.lookup_key(V, B, "k")),
    ("ListKeys", lambda: build.list_keys(V, B)),
    ("DeleteKey", lambda: build.delete_key(V, B, "k")),
    ("RenameKey", lambda: build.rename_key(V, B, "k", "k2")),
    ("AddAcl", lambda: build.add_acl(build.acl_object(V, B, "k"), acls.parse("user:bob:r")
                                     .to_proto())),
    ("RemoveAcl", lambda: build.remove_acl(build.acl_object(V, B, "k"), acls.parse("user:bob:r")
                                           .to_proto())),
    ("SetAcl", lambda: build.set_acl(build.acl_object(V, B, "k"), [acls.parse("user:bob:r")
                                                                  .to_proto()])),
    ("GetAcl", lambda: build.get_acl(build.acl_object(V, B, "k"))),
    ("CreateDirectory", lambda: build.create_directory(V, B, "d")),
    ("CreateFile", lambda: build.create_file(V, B, "d/f")),
    ("LookupFile", lambda: build.lookup_file(V, B, "d/f")),
    ("GetFileStatus", lambda: build.get_file_status(V, B, "d")),
    ("ListStatus", lambda: build.list_status(V, B, "d")),
    ("InitiateMultiPartUpload", lambda: build.initiate_multipart_upload(V, B, "k")),
    ("CommitMultiPartUpload", lambda: build.commit_multipart_upload(V, B, "k", "1", 1, 2, 3)),
    ("CompleteMultiPartUpload", lambda: build.complete_multipart_upload(V, B, "k", "1",
                                                                        [(1, "")])),
    ("AbortMultiPartUpload", lambda: build.abort_multipart_upload(V, B, "k", "1")),
    ("ListMultiPartUploadParts", lambda: build.list_multipart_upload_parts(V, B, "k", "1")),
    ("ListMultipartUploads", lambda: build.list_multipart_uploads(V, B)),
    ("CreateSnapshot", lambda: build.create_snapshot(V, B, "snap")),
    ("GetSnapshotInfo", lambda: build.get_snapshot_info(V, B, "snap")),
    ("ListSnapshot", lambda: build.list_snapshots(V, B)),
    ("SnapshotDiff", lambda: build.snapshot_diff(V, B, "snap")),
    ("DeleteSnapshot", lambda: build.delete_snapshot(V, B, "snap")),
]
# outside the namespace: tests/test_tokens.py
TOKEN_REQUESTS = {"GetDelegationToken", "RenewDelegationToken", "CancelDelegationToken"}
# the leader's own, refused from clients: tests/test_purge.py, tests/test_fso.py
INTERNAL_REQUESTS = {"PurgeDirectories", "PurgeKeys", "DeleteOpenKeys",
                     "AbortExpiredMultiPartUploads"}
OBS_READS = {"InfoVolume", "ListVolume", "InfoBucket", "ListBuckets", "LookupKey", "ListKeys",
             "GetAcl"}
READS = OBS_READS | {"LookupFile", "GetFileStatus", "ListStatus"}
# reads about uploads in progress: tests/test_multipart.py
MULTIPART_READS = {"ListMultiPartUploadParts", "ListMultipartUploads"}
# reads of OM snapshots: tests/test_om_snapshots.py
SNAPSHOT_READS = {"GetSnapshotInfo", "ListSnapshot", "SnapshotDiff"}
# outside the namespace too: tests/test_user_certificates.py
CERTIFICATE_REQUESTS = {"AddUserCertificate", "RevokeUserCertificates", "ListUserCertificates"}
# prepare and upgrade: tests/test_upgrade.py
UPGRADE_REQUESTS = {"Prepare", "PrepareStatus", "CancelPrepare", "FinalizeUpgrade",
                    "FinalizeUpgradeProgress"}
# the flow switch: tests/test_flow_switch.py
FLOW_REQUESTS = {"SetFlows", "FlowStatus"}


class TestDispatch:
    def test_registry_serves_exactly_the_listed_request_types(self) -> None:
        assert {kind.name for kind in registry.KINDS.values()} == {
            n for n, _ in EVERY_REQUEST} | TOKEN_REQUESTS | INTERNAL_REQUESTS \
            | CERTIFICATE_REQUESTS | UPGRADE_REQUESTS | FLOW_REQUESTS
        assert {kind.name for kind in registry.KINDS.values() if not kind.write} == (
            READS | MULTIPART_READS | SNAPSHOT_READS | {"ListUserCertificates", "PrepareStatus",
                                                        "FinalizeUpgradeProgress", "FlowStatus"})
        for cmd, kind in registry.KINDS.items():
            assert om_pb2.Type.Name(cmd) == kind.name  # type: ignore[arg-type]

    @pytest.mark.parametrize(("name", "make"), EVERY_REQUEST, ids=[n for n, _ in EVERY_REQUEST])
    def test_shape_problem_accepts_a_well_formed_request(self, name: str, make: Build) -> None:
        request = make()
        request.client_id = CLIENT_ID
        assert om_pb2.Type.Name(request.cmd_type) == name
        assert registry.shape_problem(request) is None

    @pytest.mark.parametrize("cmd_type", [om_pb2.TYPE_UNSPECIFIED, om_pb2.ServiceList,
                                          om_pb2.PersistDb, om_pb2.Type.ValueType(999)])
    def test_shape_problem_rejects_an_unknown_command(self,
                                                      cmd_type: om_pb2.Type.ValueType) -> None:
        request = build.service_list()
        request.cmd_type = cmd_type
        request.client_id = CLIENT_ID
        problem = registry.shape_problem(request)
        assert problem is not None
        assert "unknown" in problem

    def test_shape_problem_rejects_a_body_of_another_type(self) -> None:
        request = build.info_volume(V)
        request.cmd_type = om_pb2.CreateVolume
        request.client_id = CLIENT_ID
        problem = registry.shape_problem(request)
        assert problem is not None
        assert "create_volume" in problem

    def test_shape_problem_rejects_a_missing_body(self) -> None:
        request = om_pb2.OMRequest(cmd_type=om_pb2.CreateVolume, client_id=CLIENT_ID)
        assert registry.shape_problem(request) is not None

    def test_shape_problem_rejects_a_missing_client_id(self) -> None:
        problem = registry.shape_problem(build.create_volume(V))
        assert problem is not None
        assert "client_id" in problem

    def test_ok_response_echoes_type_and_call_id(self, om: Harness) -> None:
        response = om.run(build.create_volume(V))
        assert status_name(response) == "OK"
        assert response.cmd_type == om_pb2.CreateVolume
        assert response.call_id == om.call_id
        assert response.message == ""

    def test_error_response_echoes_type_and_call_id_and_has_no_body(self, om: Harness) -> None:
        response = fails(om, build.info_volume(V), "VOLUME_NOT_FOUND")
        assert response.cmd_type == om_pb2.InfoVolume
        assert response.call_id == om.call_id
        assert response.WhichOneof("body") is None
        assert V in response.message

    def test_dispatch_discards_what_a_failing_handler_recorded(
            self, om: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
        def records_then_fails(request: om_pb2.OMRequest, view: ReadView,
                               recorder: ChangeRecorder, ctx: ExecContext) -> om_pb2.OMResponse:
            recorder.put(om_pb2.VOLUME, b"/partial", b"row")
            recorder.quota_delta(om_pb2.VOLUME, b"/partial", 1, 0, 1)
            raise OMError(om_pb2.QUOTA_EXCEEDED, "late failure")

        kind = registry.KINDS[om_pb2.CreateVolume]
        monkeypatch.setitem(registry.KINDS, om_pb2.CreateVolume,
                            dataclasses.replace(kind, execute=records_then_fails))
        response = fails(om, build.create_volume(V), "QUOTA_EXCEEDED")
        assert response.message == "late failure"
        assert om.store.get(om_pb2.VOLUME, b"/partial") is None

    # FSO reads on FSO buckets: tests/test_fso.py
    @pytest.mark.parametrize(("name", "make"), [r for r in EVERY_REQUEST if r[0] in OBS_READS],
                             ids=[n for n, _ in EVERY_REQUEST if n in OBS_READS])
    def test_reads_record_and_write_nothing(self, obs: Harness, name: str, make: Build) -> None:
        obs.put_key(V, B, "k", 10)
        before = obs.store.digests()
        position = obs.position
        response = obs.ok(make())
        assert response.WhichOneof("body") is not None
        assert obs.last_recorder.empty
        assert obs.position == position
        assert obs.store.digests() == before

    @pytest.mark.parametrize(("name", "make"), [r for r in EVERY_REQUEST
                                                 if r[0] in READS - OBS_READS],
                             ids=[n for n, _ in EVERY_REQUEST if n in READS - OBS_READS])
    def test_file_system_reads_record_and_write_nothing(self, obs: Harness, name: str,
                                                        make: Build) -> None:
        obs.ok(build.create_bucket(V, "fsob", layout="FILE_SYSTEM_OPTIMIZED"))
        opened = obs.ok(build.create_file(V, "fsob", "d/f", recursive=True)).create_file
        session = opened.client_session_id
        obs.ok(build.commit_key(V, "fsob", "d/f", session, 0))
        before = obs.store.digests()
        position = obs.position
        request = make()
        body = getattr(request, request.WhichOneof("body") or "")
        body.bucket = "fsob"
        response = obs.ok(request)
        assert response.WhichOneof("body") is not None
        assert obs.last_recorder.empty
        assert obs.position == position
        assert obs.store.digests() == before

    @pytest.mark.leader_flow_only
    def test_each_write_is_applied_at_the_next_position(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 1)
        info = obs.store.transaction_info()
        assert info.applied_index == obs.position == 4   # volume, bucket, create, commit
        assert info.managed_index == obs.managed_index == 4
        assert info.term == 1


# ===================================================================== names ===

VALID_NAMES = [
    "abc", "a" * 63, "vol-1", "vol.1", "a-b.c-d", "0ab", "ab0", "123abc", "1.2.3.4a", "a1-2.b",
]
INVALID_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("ab", id="too-short"),
    pytest.param("a" * 64, id="too-long"),
    pytest.param("Abc", id="uppercase-first"),
    pytest.param("abC", id="uppercase-last"),
    pytest.param("ab_c", id="underscore"),
    pytest.param("-abc", id="leading-dash"),
    pytest.param("abc-", id="trailing-dash"),
    pytest.param(".abc", id="leading-dot"),
    pytest.param("abc.", id="trailing-dot"),
    pytest.param("a..b", id="double-dot"),
    pytest.param("a.-b", id="dot-dash"),
    pytest.param("a-.b", id="dash-dot"),
    pytest.param("192.168.1.1", id="ipv4"),
    pytest.param("999.999.999.999", id="ipv4-like"),
    pytest.param("ab c", id="space"),
    pytest.param("ab/c", id="slash"),
    pytest.param("ab*c", id="star"),
    pytest.param("caf\u00e9", id="non-ascii"),
    pytest.param("abc\n", id="trailing-newline"),
]
# Ozone's HddsClientUtils.verifyResourceName rejects every name made only of
# digits and periods ("cannot be an IPv4 address or all numeric").
ALL_NUMERIC_NAMES = ["123", "20240101", "1.23.456", "10.0.0.1.5"]

VALID_KEY_NAMES = [
    pytest.param("k", id="one-char"),
    pytest.param("dir/sub/file.txt", id="slashes"),
    pytest.param("key with spaces", id="spaces"),
    pytest.param("\u00fcn\u00efc\u00f8d\u00e9", id="unicode"),
    pytest.param("x" * 1024, id="1024-bytes"),
    pytest.param("\u00e9" * 512, id="1024-bytes-multibyte"),
    pytest.param("UPPER_case-._~", id="any-printable"),
]
INVALID_KEY_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("x" * 1025, id="1025-bytes"),
    pytest.param("\u00e9" * 513, id="1026-bytes-multibyte"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("line\nbreak", id="newline"),
    pytest.param("tab\there", id="tab"),
    pytest.param("\x1f", id="unit-separator"),
    pytest.param("del\x7f", id="del"),
]


class TestNames:
    @pytest.mark.parametrize("name", VALID_NAMES)
    def test_valid_volume_name(self, om: Harness, name: str) -> None:
        om.ok(build.create_volume(name))
        assert om.volume_row(name) is not None

    @pytest.mark.parametrize("name", INVALID_NAMES)
    def test_invalid_volume_name(self, om: Harness, name: str) -> None:
        fails(om, build.create_volume(name), "INVALID_VOLUME_NAME")

    @pytest.mark.parametrize("name", ALL_NUMERIC_NAMES)
    def test_all_numeric_volume_name_is_invalid(self, om: Harness, name: str) -> None:
        fails(om, build.create_volume(name), "INVALID_VOLUME_NAME")

    @pytest.mark.parametrize("name", VALID_NAMES)
    def test_valid_bucket_name(self, om: Harness, name: str) -> None:
        om.create_volume(V)
        om.ok(build.create_bucket(V, name))
        assert om.bucket_row(V, name) is not None

    @pytest.mark.parametrize("name", INVALID_NAMES)
    def test_invalid_bucket_name(self, om: Harness, name: str) -> None:
        om.create_volume(V)
        fails(om, build.create_bucket(V, name), "INVALID_BUCKET_NAME")

    @pytest.mark.parametrize("name", ALL_NUMERIC_NAMES)
    def test_all_numeric_bucket_name_is_invalid(self, om: Harness, name: str) -> None:
        om.create_volume(V)
        fails(om, build.create_bucket(V, name), "INVALID_BUCKET_NAME")

    @pytest.mark.parametrize("name", VALID_KEY_NAMES)
    def test_valid_key_name(self, obs: Harness, name: str) -> None:
        obs.put_key(V, B, name, 5)
        found = obs.ok(build.lookup_key(V, B, name)).lookup_key.key_info
        assert found.key_name == name

    @pytest.mark.parametrize("name", INVALID_KEY_NAMES)
    def test_invalid_key_name_on_create(self, obs: Harness, name: str) -> None:
        fails(obs, build.create_key(V, B, name), "INVALID_KEY_NAME")

    @pytest.mark.parametrize("name", INVALID_KEY_NAMES)
    def test_invalid_key_name_as_rename_target(self, obs: Harness, name: str) -> None:
        obs.put_key(V, B, "k", 5)
        fails(obs, build.rename_key(V, B, "k", name), "INVALID_KEY_NAME")

    def test_key_name_limit_comes_from_the_limits(self, obs: Harness) -> None:
        obs.limits = Limits(key_name_max_bytes=4)
        obs.open_key(V, B, "abcd")
        fails(obs, build.create_key(V, B, "abcde"), "INVALID_KEY_NAME")


# ========================================================== missing parents ===

class TestMissingParents:
    """Every request under a missing volume or bucket names what is missing."""

    UNDER_VOLUME = [(n, make) for n, make in EVERY_REQUEST
                    if n not in ("CreateVolume", "ListVolume")]
    UNDER_BUCKET = [(n, make) for n, make in UNDER_VOLUME
                    if n not in ("InfoVolume", "SetVolumeProperty", "DeleteVolume", "CreateBucket",
                                 "ListBuckets")]

    @pytest.mark.parametrize(("name", "make"), UNDER_VOLUME, ids=[n for n, _ in UNDER_VOLUME])
    def test_missing_volume(self, om: Harness, name: str, make: Build) -> None:
        om.create_volume("other")
        fails(om, make(), "VOLUME_NOT_FOUND")

    @pytest.mark.parametrize(("name", "make"), UNDER_BUCKET, ids=[n for n, _ in UNDER_BUCKET])
    def test_missing_bucket(self, om: Harness, name: str, make: Build) -> None:
        om.create_volume(V)
        om.create_bucket(V, "other")
        fails(om, make(), "BUCKET_NOT_FOUND")


# ================================================================== volumes ===

class TestCreateVolume:
    def test_stores_the_volume(self, om: Harness) -> None:
        response = om.ok(build.create_volume(V), user="bob")
        info = response.create_volume.volume_info
        assert info.volume == V
        assert info.owner_name == "bob"
        assert info.admin_name == "bob"
        assert info.quota_in_bytes == UNLIMITED
        assert info.quota_in_namespace == UNLIMITED
        assert info.used_namespace == 0
        assert info.creation_time == info.modification_time == om.clock.now_ms
        assert info.object_id == object_id_for(om.managed_index)
        assert info.update_id == om.managed_index
        assert om.volume_row(V) == info
        assert om.keys_of(om_pb2.VOLUME) == [b"/vol1"]

    def test_explicit_owner_and_quotas(self, om: Harness) -> None:
        info = om.create_volume(V, quota_in_bytes=1000, quota_in_namespace=7, owner="carol")
        assert info.owner_name == "carol"
        assert info.admin_name == "alice"
        assert (info.quota_in_bytes, info.quota_in_namespace) == (1000, 7)
        assert om.volume_row(V) == info

    def test_already_exists(self, om: Harness) -> None:
        first = om.create_volume(V)
        fails(om, build.create_volume(V, owner="mallory"), "VOLUME_ALREADY_EXISTS")
        assert om.volume_row(V) == first


class TestInfoVolume:
    def test_returns_the_stored_row(self, om: Harness) -> None:
        om.create_volume(V, quota_in_namespace=5)
        om.create_bucket(V, B)
        info = om.ok(build.info_volume(V)).info_volume.volume_info
        assert info == om.volume_row(V)
        assert info.used_namespace == 1

    def test_missing(self, om: Harness) -> None:
        fails(om, build.info_volume(V), "VOLUME_NOT_FOUND")


VOLUMES = ["alpha", "beta", "beta-2", "delta", "gamma"]


class TestListVolume:
    @pytest.fixture
    def five(self, om: Harness) -> Harness:
        for name in reversed(VOLUMES):
            om.create_volume(name)
        return om

    def test_lists_every_volume_in_order(self, five: Harness) -> None:
        response = five.ok(build.list_volumes())
        assert volume_names(response) == VOLUMES
        assert not response.list_volume.truncated
        assert list(response.list_volume.volume_info) == [five.volume_row(v) for v in VOLUMES]

    def test_empty(self, om: Harness) -> None:
        response = om.ok(build.list_volumes())
        assert volume_names(response) == []
        assert not response.list_volume.truncated

    @pytest.mark.parametrize(("prefix", "start", "expected"), [
        ("beta", "", ["beta", "beta-2"]),
        ("", "beta", ["beta-2", "delta", "gamma"]),
        ("beta", "beta", ["beta-2"]),
        ("", "c", ["delta", "gamma"]),
        ("", "gamma", []),
        ("zeta", "", []),
        ("", "a", VOLUMES),
    ])
    def test_prefix_and_exclusive_start(self, five: Harness, prefix: str, start: str,
                                        expected: list[str]) -> None:
        response = five.ok(build.list_volumes(prefix=prefix, start_key=start))
        assert volume_names(response) == expected
        assert not response.list_volume.truncated

    @pytest.mark.parametrize(("max_keys", "expected", "truncated"), [
        (1, VOLUMES[:1], True),
        (2, VOLUMES[:2], True),
        (4, VOLUMES[:4], True),
        (5, VOLUMES, False),
        (6, VOLUMES, False),
    ])
    def test_max_keys_and_truncated(self, five: Harness, max_keys: int, expected: list[str],
                                    truncated: bool) -> None:
        response = five.ok(build.list_volumes(max_keys=max_keys))
        assert volume_names(response) == expected
        assert response.list_volume.truncated is truncated

    def test_paging_visits_every_volume_once(self, five: Harness) -> None:
        seen: list[str] = []
        start = ""
        for _ in range(len(VOLUMES)):                  # bounded: a broken start key loops
            response = five.ok(build.list_volumes(start_key=start, max_keys=2))
            seen += volume_names(response)
            if not response.list_volume.truncated:
                break
            start = seen[-1]
        assert seen == VOLUMES


class TestSetVolumeProperty:
    def test_sets_owner_and_quotas(self, om: Harness) -> None:
        created = om.create_volume(V)
        om.clock.advance(5)
        response = om.ok(build.set_volume_property(V, quota_in_bytes=1000, quota_in_namespace=9,
                                                   owner="bob"))
        info = response.set_volume_property.volume_info
        assert info.owner_name == "bob"
        assert info.admin_name == created.admin_name
        assert (info.quota_in_bytes, info.quota_in_namespace) == (1000, 9)
        assert info.creation_time == created.creation_time
        assert info.modification_time == om.clock.now_ms
        assert info.object_id == created.object_id
        assert info.update_id == om.managed_index
        assert om.volume_row(V) == info

    def test_zero_leaves_a_value_unchanged(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000, quota_in_namespace=9, owner="carol")
        info = om.ok(build.set_volume_property(V)).set_volume_property.volume_info
        assert (info.quota_in_bytes, info.quota_in_namespace) == (1000, 9)
        assert info.owner_name == "carol"

    def test_minus_one_clears_quotas(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000, quota_in_namespace=9)
        om.ok(build.set_volume_property(V, quota_in_bytes=-1, quota_in_namespace=-1))
        row = present(om.volume_row(V))
        assert (row.quota_in_bytes, row.quota_in_namespace) == (UNLIMITED, UNLIMITED)

    def test_keeps_the_bucket_count(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B)
        om.ok(build.set_volume_property(V, owner="bob"))
        row = present(om.volume_row(V))
        assert row.used_namespace == 1

    def test_missing(self, om: Harness) -> None:
        fails(om, build.set_volume_property(V, owner="bob"), "VOLUME_NOT_FOUND")


class TestDeleteVolume:
    def test_deletes_the_row(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_volume("other")
        response = om.ok(build.delete_volume(V))
        assert response.WhichOneof("body") == "delete_volume"
        assert om.volume_row(V) is None
        assert om.keys_of(om_pb2.VOLUME) == [b"/other"]
        fails(om, build.info_volume(V), "VOLUME_NOT_FOUND")

    def test_missing(self, om: Harness) -> None:
        fails(om, build.delete_volume(V), "VOLUME_NOT_FOUND")

    def test_not_empty_while_it_holds_a_bucket(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B)
        fails(om, build.delete_volume(V), "VOLUME_NOT_EMPTY")
        om.ok(build.delete_bucket(V, B))
        om.ok(build.delete_volume(V))
        assert om.volume_row(V) is None

    def test_buckets_of_a_volume_sharing_the_name_prefix_do_not_count(self, om: Harness) -> None:
        om.create_volume("vol1")
        om.create_volume("vol10")
        om.create_bucket("vol10", B)
        om.ok(build.delete_volume("vol1"))
        assert om.volume_row("vol10") is not None


# ================================================================== buckets ===

class TestCreateBucket:
    def test_stores_the_bucket_and_counts_it_in_the_volume(self, om: Harness) -> None:
        volume = om.create_volume(V)
        om.clock.advance(7)
        info = om.ok(build.create_bucket(V, B), user="bob").create_bucket.bucket_info
        assert (info.volume_name, info.bucket_name) == (V, B)
        assert info.owner == "bob"
        assert info.layout == "OBJECT_STORE"
        assert (info.quota_in_bytes, info.quota_in_namespace) == (UNLIMITED, UNLIMITED)
        assert (info.used_bytes, info.used_namespace) == (0, 0)
        assert info.creation_time == info.modification_time == om.clock.now_ms
        assert info.object_id == object_id_for(om.managed_index)
        assert info.update_id == om.managed_index
        assert om.bucket_row(V, B) == info
        assert om.keys_of(om_pb2.BUCKET) == [b"/vol1/bucket1"]
        row = present(om.volume_row(V))
        assert row.used_namespace == 1
        assert row.update_id == volume.update_id   # a quota delta, not a rewrite

    def test_each_bucket_adds_one_to_the_volume_namespace(self, om: Harness) -> None:
        om.create_volume(V)
        for n, name in enumerate(["aaa", "bbb", "ccc"], start=1):
            om.create_bucket(V, name)
            row = present(om.volume_row(V))
            assert row.used_namespace == n

    def test_explicit_owner_and_quotas(self, om: Harness) -> None:
        om.create_volume(V)
        info = om.create_bucket(V, B, quota_in_bytes=300, quota_in_namespace=4, owner="carol")
        assert info.owner == "carol"
        assert (info.quota_in_bytes, info.quota_in_namespace) == (300, 4)
        assert om.bucket_row(V, B) == info

    def test_already_exists(self, om: Harness) -> None:
        om.create_volume(V)
        first = om.create_bucket(V, B)
        fails(om, build.create_bucket(V, B, owner="mallory"), "BUCKET_ALREADY_EXISTS")
        assert om.bucket_row(V, B) == first
        row = present(om.volume_row(V))
        assert row.used_namespace == 1

    def test_same_name_in_another_volume(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_volume("vol2")
        first = om.create_bucket(V, B)
        second = om.create_bucket("vol2", B)
        assert first.object_id != second.object_id
        assert om.keys_of(om_pb2.BUCKET) == [b"/vol1/bucket1", b"/vol2/bucket1"]


class TestInfoBucket:
    def test_returns_the_stored_row_with_usage(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 10)
        info = obs.ok(build.info_bucket(V, B)).info_bucket.bucket_info
        assert info == obs.bucket_row(V, B)
        assert (info.used_bytes, info.used_namespace) == (replicated(10), 1)

    def test_missing(self, om: Harness) -> None:
        om.create_volume(V)
        fails(om, build.info_bucket(V, B), "BUCKET_NOT_FOUND")


BUCKETS = ["apple", "apricot", "banana", "cherry"]


class TestListBuckets:
    @pytest.fixture
    def four(self, om: Harness) -> Harness:
        om.create_volume("vol1")
        om.create_volume("vol10")
        om.create_volume("vol0")
        for name in reversed(BUCKETS):
            om.create_bucket("vol1", name)
        om.create_bucket("vol10", "apple")
        om.create_bucket("vol10", "zebra")
        om.create_bucket("vol0", "aaa")
        return om

    def test_lists_the_buckets_of_one_volume_in_order(self, four: Harness) -> None:
        response = four.ok(build.list_buckets("vol1"))
        assert bucket_names(response) == BUCKETS
        assert not response.list_buckets.truncated
        assert {b.volume_name for b in response.list_buckets.bucket_info} == {"vol1"}
        assert list(response.list_buckets.bucket_info) == [
            four.bucket_row("vol1", b) for b in BUCKETS]

    def test_empty_volume(self, om: Harness) -> None:
        om.create_volume(V)
        response = om.ok(build.list_buckets(V))
        assert bucket_names(response) == []
        assert not response.list_buckets.truncated

    @pytest.mark.parametrize(("prefix", "start", "expected"), [
        ("ap", "", ["apple", "apricot"]),
        ("", "apple", ["apricot", "banana", "cherry"]),
        ("ap", "apple", ["apricot"]),
        ("", "b", ["banana", "cherry"]),
        ("", "cherry", []),
        ("zebra", "", []),
    ])
    def test_prefix_and_exclusive_start(self, four: Harness, prefix: str, start: str,
                                        expected: list[str]) -> None:
        response = four.ok(build.list_buckets("vol1", prefix=prefix, start_key=start))
        assert bucket_names(response) == expected
        assert not response.list_buckets.truncated

    @pytest.mark.parametrize(("max_keys", "expected", "truncated"), [
        (1, BUCKETS[:1], True),
        (3, BUCKETS[:3], True),
        (4, BUCKETS, False),
        (100, BUCKETS, False),
    ])
    def test_max_keys_and_truncated(self, four: Harness, max_keys: int, expected: list[str],
                                    truncated: bool) -> None:
        response = four.ok(build.list_buckets("vol1", max_keys=max_keys))
        assert bucket_names(response) == expected
        assert response.list_buckets.truncated is truncated

    def test_truncated_with_a_prefix_and_start(self, four: Harness) -> None:
        response = four.ok(build.list_buckets("vol1", prefix="a", start_key="a", max_keys=1))
        assert bucket_names(response) == ["apple"]
        assert response.list_buckets.truncated


class TestSetBucketProperty:
    def test_sets_quotas(self, obs: Harness) -> None:
        created = present(obs.bucket_row(V, B))
        obs.clock.advance(3)
        response = obs.ok(build.set_bucket_property(V, B, quota_in_bytes=900,
                                                    quota_in_namespace=5))
        info = response.set_bucket_property.bucket_info
        assert (info.quota_in_bytes, info.quota_in_namespace) == (900, 5)
        assert info.creation_time == created.creation_time
        assert info.modification_time == obs.clock.now_ms
        assert info.object_id == created.object_id
        assert info.update_id == obs.managed_index
        assert obs.bucket_row(V, B) == info

    def test_zero_leaves_a_quota_unchanged(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=900, quota_in_namespace=5)
        om.ok(build.set_bucket_property(V, B, quota_in_namespace=6))
        row = present(om.bucket_row(V, B))
        assert (row.quota_in_bytes, row.quota_in_namespace) == (900, 6)
        om.ok(build.set_bucket_property(V, B, quota_in_bytes=800))
        row = present(om.bucket_row(V, B))
        assert (row.quota_in_bytes, row.quota_in_namespace) == (800, 6)

    def test_minus_one_clears_quotas(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=900, quota_in_namespace=5)
        om.ok(build.set_bucket_property(V, B, quota_in_bytes=-1, quota_in_namespace=-1))
        row = present(om.bucket_row(V, B))
        assert (row.quota_in_bytes, row.quota_in_namespace) == (UNLIMITED, UNLIMITED)

    def test_keeps_the_usage(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 10)
        obs.ok(build.set_bucket_property(V, B, quota_in_bytes=1000))
        assert obs.usage(V, B) == (replicated(10), 1)


class TestDeleteBucket:
    def test_deletes_the_row_and_releases_the_volume_namespace(self, obs: Harness) -> None:
        obs.create_bucket(V, "other")
        response = obs.ok(build.delete_bucket(V, B))
        assert response.WhichOneof("body") == "delete_bucket"
        assert obs.bucket_row(V, B) is None
        assert obs.keys_of(om_pb2.BUCKET) == [b"/vol1/other"]
        row = present(obs.volume_row(V))
        assert row.used_namespace == 1
        fails(obs, build.info_bucket(V, B), "BUCKET_NOT_FOUND")

    def test_not_empty_while_it_holds_a_committed_key(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 1)
        fails(obs, build.delete_bucket(V, B), "BUCKET_NOT_EMPTY")
        obs.ok(build.delete_key(V, B, "k"))
        obs.ok(build.delete_bucket(V, B))
        assert obs.bucket_row(V, B) is None

    def test_open_keys_do_not_keep_it_alive(self, obs: Harness) -> None:
        # Ozone's isBucketEmpty looks at keyTable only.
        obs.open_key(V, B, "k")
        obs.ok(build.delete_bucket(V, B))
        assert obs.bucket_row(V, B) is None

    def test_keys_of_a_bucket_sharing_the_name_prefix_do_not_count(self, obs: Harness) -> None:
        obs.create_bucket(V, B + "0")
        obs.put_key(V, B + "0", "k", 1)
        obs.ok(build.delete_bucket(V, B))
        assert obs.bucket_row(V, B + "0") is not None

    def test_recreated_bucket_starts_with_fresh_usage(self, obs: Harness) -> None:
        old = present(obs.bucket_row(V, B))
        obs.put_key(V, B, "k", 10)
        obs.ok(build.delete_key(V, B, "k"))
        obs.ok(build.delete_bucket(V, B))
        new = obs.create_bucket(V, B)
        assert new.object_id != old.object_id
        assert obs.usage(V, B) == (0, 0)


# ===================================================================== keys ===

class TestCreateKey:
    def test_opens_the_key_under_its_session_id(self, obs: Harness) -> None:
        response = obs.ok(build.create_key(V, B, "dir/k", data_size=100)).create_key
        info = response.key_info
        index = obs.managed_index
        assert response.client_session_id == object_id_for(index, 1)
        assert (info.volume_name, info.bucket_name, info.key_name) == (V, B, "dir/k")
        assert info.data_size == 100
        assert info.replication_factor == REPLICAS
        assert info.creation_time == info.modification_time == obs.clock.now_ms
        assert info.object_id == object_id_for(index)
        assert info.update_id == index
        assert info.open_client_id == response.client_session_id
        assert obs.keys_of(om_pb2.OPEN_KEY) == [
            f"/vol1/bucket1/dir/k/{response.client_session_id}".encode()]
        assert obs.open_key_row(V, B, "dir/k", response.client_session_id) == info
        assert obs.keys_of(om_pb2.KEY) == []

    def test_does_not_consume_quota(self, obs: Harness) -> None:
        obs.open_key(V, B, "k", 100)
        obs.open_key(V, B, "k2", 100)
        assert obs.usage(V, B) == (0, 0)

    def test_every_create_gets_its_own_session(self, obs: Harness) -> None:
        first = obs.open_key(V, B, "k")
        second = obs.open_key(V, B, "k")
        assert first.client_session_id != second.client_session_id
        assert first.key_info.object_id != second.key_info.object_id
        assert len(obs.keys_of(om_pb2.OPEN_KEY)) == 2

    @pytest.mark.parametrize(("requested", "stored"), [(0, 3), (1, 1), (3, 3)])
    def test_replication_factor(self, obs: Harness, requested: int, stored: int) -> None:
        info = obs.open_key(V, B, "k", replication_factor=requested).key_info
        assert info.replication_factor == stored

    @pytest.mark.parametrize("factor", [2, 4, 5])
    def test_unsupported_replication_factor(self, obs: Harness, factor: int) -> None:
        fails(obs, build.create_key(V, B, "k", replication_factor=factor), "INVALID_REQUEST")


class TestCommitKey:
    def test_moves_the_open_key_to_the_key_table_and_charges_the_bucket(
            self, obs: Harness) -> None:
        opened = obs.open_key(V, B, "k", data_size=100)
        obs.clock.advance(9)
        response = obs.ok(build.commit_key(V, B, "k", opened.client_session_id, 120))
        info = response.commit_key.key_info
        assert info.key_name == "k"
        assert info.data_size == 120                  # the size written, not the expected one
        assert info.open_client_id == 0
        assert info.object_id == opened.key_info.object_id
        assert info.creation_time == opened.key_info.creation_time
        assert info.modification_time == obs.clock.now_ms
        assert info.update_id == obs.managed_index
        assert obs.key_row(V, B, "k") == info
        assert obs.keys_of(om_pb2.KEY) == [b"/vol1/bucket1/k"]
        assert obs.keys_of(om_pb2.OPEN_KEY) == []
        assert obs.keys_of(om_pb2.DELETED) == []
        assert obs.usage(V, B) == (replicated(120), 1)

    def test_charges_the_replicated_size_of_its_factor(self, obs: Harness) -> None:
        obs.put_key(V, B, "one", 100, replication_factor=1)
        assert obs.usage(V, B) == (100, 1)
        obs.put_key(V, B, "three", 100, replication_factor=3)
        assert obs.usage(V, B) == (100 + 300, 2)

    def test_never_opened(self, obs: Harness) -> None:
        fails(obs, build.commit_key(V, B, "k", 12345, 1), "KEY_NOT_FOUND")

    def test_wrong_session(self, obs: Harness) -> None:
        opened = obs.open_key(V, B, "k")
        fails(obs, build.commit_key(V, B, "k", opened.client_session_id + 1, 1), "KEY_NOT_FOUND")
        assert obs.open_key_row(V, B, "k", opened.client_session_id) is not None

    def test_session_of_another_key(self, obs: Harness) -> None:
        opened = obs.open_key(V, B, "k")
        fails(obs, build.commit_key(V, B, "other", opened.client_session_id, 1), "KEY_NOT_FOUND")

    def test_second_commit_of_a_session(self, obs: Harness) -> None:
        opened = obs.open_key(V, B, "k")
        obs.commit(V, B, "k", opened.client_session_id, 1)
        fails(obs, build.commit_key(V, B, "k", opened.client_session_id, 1), "KEY_NOT_FOUND")
        assert obs.usage(V, B) == (replicated(1), 1)

    def test_overwrite_moves_the_old_version_to_the_deleted_table(self, obs: Harness) -> None:
        old = obs.put_key(V, B, "k", 100)
        new = obs.put_key(V, B, "k", 40)
        assert new.object_id != old.object_id
        assert obs.key_row(V, B, "k") == new
        assert obs.keys_of(om_pb2.DELETED) == [f"/vol1/bucket1/k/{old.object_id}".encode()]
        deleted = present(obs.deleted_row(V, B, "k", old.object_id))
        assert [without_update_id(k) for k in deleted.key_info] == [
            retired_at(old, obs.clock.now_ms)]
        assert obs.usage(V, B) == (replicated(40), 1)   # only the difference was charged

    def test_overwrite_with_another_replication_factor(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 100, replication_factor=1)
        obs.put_key(V, B, "k", 100, replication_factor=3)
        assert obs.usage(V, B) == (300, 1)
        obs.put_key(V, B, "k", 50, replication_factor=1)
        assert obs.usage(V, B) == (50, 1)

    def test_concurrent_sessions_of_one_key_both_commit(self, obs: Harness) -> None:
        first = obs.open_key(V, B, "k", 10)
        second = obs.open_key(V, B, "k", 20)
        a = obs.commit(V, B, "k", first.client_session_id, 10)
        b = obs.commit(V, B, "k", second.client_session_id, 20)
        assert obs.key_row(V, B, "k") == b
        assert obs.deleted_row(V, B, "k", a.object_id) is not None
        assert obs.keys_of(om_pb2.OPEN_KEY) == []
        assert obs.usage(V, B) == (replicated(20), 1)


class TestLookupKey:
    def test_returns_the_committed_row(self, obs: Harness) -> None:
        committed = obs.put_key(V, B, "k", 7)
        assert obs.ok(build.lookup_key(V, B, "k")).lookup_key.key_info == committed

    def test_missing(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 7)
        fails(obs, build.lookup_key(V, B, "k2"), "KEY_NOT_FOUND")

    def test_an_open_key_is_not_visible(self, obs: Harness) -> None:
        obs.open_key(V, B, "k")
        fails(obs, build.lookup_key(V, B, "k"), "KEY_NOT_FOUND")

    def test_a_key_of_another_bucket_is_not_visible(self, obs: Harness) -> None:
        obs.create_bucket(V, "other")
        obs.put_key(V, "other", "k", 7)
        fails(obs, build.lookup_key(V, B, "k"), "KEY_NOT_FOUND")


KEYS = ["a", "a/1", "a/2", "a/3", "b/1", "c"]


class TestListKeys:
    @pytest.fixture
    def six(self, obs: Harness) -> Harness:
        for n, name in enumerate(reversed(KEYS)):
            obs.put_key(V, B, name, n)
        obs.open_key(V, B, "a/4")                       # open: not listed
        obs.create_bucket(V, B + "0")
        obs.put_key(V, B + "0", "a/9", 1)               # other bucket: not listed
        return obs

    def test_lists_the_committed_keys_in_order(self, six: Harness) -> None:
        response = six.ok(build.list_keys(V, B))
        assert key_names(response) == KEYS
        assert not response.list_keys.truncated
        assert list(response.list_keys.key_info) == [six.key_row(V, B, k) for k in KEYS]

    def test_empty_bucket(self, obs: Harness) -> None:
        response = obs.ok(build.list_keys(V, B))
        assert key_names(response) == []
        assert not response.list_keys.truncated

    @pytest.mark.parametrize(("prefix", "start", "expected"), [
        ("a/", "", ["a/1", "a/2", "a/3"]),
        ("a", "", ["a", "a/1", "a/2", "a/3"]),
        ("", "a", ["a/1", "a/2", "a/3", "b/1", "c"]),
        ("a/", "a/1", ["a/2", "a/3"]),
        ("a/", "a/3", []),
        ("", "a/25", ["a/3", "b/1", "c"]),
        ("b", "a/2", ["b/1"]),
        ("d", "", []),
    ])
    def test_prefix_and_exclusive_start(self, six: Harness, prefix: str, start: str,
                                        expected: list[str]) -> None:
        response = six.ok(build.list_keys(V, B, prefix=prefix, start_key=start))
        assert key_names(response) == expected
        assert not response.list_keys.truncated

    @pytest.mark.parametrize(("max_keys", "expected", "truncated"), [
        (1, KEYS[:1], True),
        (5, KEYS[:5], True),
        (6, KEYS, False),
        (7, KEYS, False),
    ])
    def test_max_keys_and_truncated(self, six: Harness, max_keys: int, expected: list[str],
                                    truncated: bool) -> None:
        response = six.ok(build.list_keys(V, B, max_keys=max_keys))
        assert key_names(response) == expected
        assert response.list_keys.truncated is truncated

    def test_paging_with_a_prefix(self, six: Harness) -> None:
        first = six.ok(build.list_keys(V, B, prefix="a/", max_keys=2))
        assert key_names(first) == ["a/1", "a/2"]
        assert first.list_keys.truncated
        second = six.ok(build.list_keys(V, B, prefix="a/", start_key="a/2", max_keys=2))
        assert key_names(second) == ["a/3"]
        assert not second.list_keys.truncated


LISTS: list[tuple[str, Callable[[int], om_pb2.OMRequest]]] = [
    ("ListVolume", lambda n: build.list_volumes(max_keys=n)),
    ("ListBuckets", lambda n: build.list_buckets(V, max_keys=n)),
    ("ListKeys", lambda n: build.list_keys(V, B, max_keys=n)),
]


class TestListLimits:
    @pytest.fixture
    def three_each(self, obs: Harness) -> Harness:
        obs.create_volume("vol2")
        obs.create_volume("vol3")
        obs.create_bucket(V, "bucket2")
        obs.create_bucket(V, "bucket3")
        for key in ("k1", "k2", "k3"):
            obs.put_key(V, B, key, 1)
        return obs

    @pytest.mark.parametrize(("name", "make"), LISTS, ids=[n for n, _ in LISTS])
    def test_max_keys_above_the_limit(self, obs: Harness, name: str,
                                      make: Callable[[int], om_pb2.OMRequest]) -> None:
        limit = Limits().list_max_keys
        obs.ok(make(limit))
        fails(obs, make(limit + 1), "INVALID_REQUEST")

    @pytest.mark.parametrize(("name", "make"), LISTS, ids=[n for n, _ in LISTS])
    def test_zero_means_the_default_page(self, three_each: Harness, name: str,
                                         make: Callable[[int], om_pb2.OMRequest]) -> None:
        three_each.limits = Limits(list_max_keys=3, list_default_keys=2)
        assert page(three_each.ok(make(0))) == (2, True)
        assert page(three_each.ok(make(3))) == (3, False)
        fails(three_each, make(4), "INVALID_REQUEST")


class TestDeleteKey:
    def test_moves_the_key_to_the_deleted_table_and_releases_its_quota(
            self, obs: Harness) -> None:
        keep = obs.put_key(V, B, "keep", 5)
        gone = obs.put_key(V, B, "k", 100)
        assert obs.usage(V, B) == (replicated(105), 2)
        response = obs.ok(build.delete_key(V, B, "k"))
        assert without_update_id(response.delete_key.key_info) == without_update_id(gone)
        assert obs.key_row(V, B, "k") is None
        assert obs.key_row(V, B, "keep") == keep
        assert obs.keys_of(om_pb2.DELETED) == [f"/vol1/bucket1/k/{gone.object_id}".encode()]
        deleted = present(obs.deleted_row(V, B, "k", gone.object_id))
        assert [without_update_id(k) for k in deleted.key_info] == [
            retired_at(gone, obs.clock.now_ms)]
        assert obs.usage(V, B) == (replicated(5), 1)

    def test_releases_the_replicated_size_of_its_factor(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 100, replication_factor=1)
        obs.put_key(V, B, "k3", 100)
        obs.ok(build.delete_key(V, B, "k"))
        assert obs.usage(V, B) == (300, 1)

    def test_missing(self, obs: Harness) -> None:
        fails(obs, build.delete_key(V, B, "k"), "KEY_NOT_FOUND")

    def test_an_open_key_cannot_be_deleted(self, obs: Harness) -> None:
        obs.open_key(V, B, "k")
        fails(obs, build.delete_key(V, B, "k"), "KEY_NOT_FOUND")

    def test_second_delete(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 1)
        obs.ok(build.delete_key(V, B, "k"))
        fails(obs, build.delete_key(V, B, "k"), "KEY_NOT_FOUND")
        assert obs.usage(V, B) == (0, 0)

    def test_each_deleted_version_keeps_its_own_row(self, obs: Harness) -> None:
        first = obs.put_key(V, B, "k", 1)
        obs.ok(build.delete_key(V, B, "k"))
        second = obs.put_key(V, B, "k", 2)
        obs.ok(build.delete_key(V, B, "k"))
        assert obs.keys_of(om_pb2.DELETED) == sorted(
            f"/vol1/bucket1/k/{k.object_id}".encode() for k in (first, second))

    def test_an_empty_key_leaves_nothing_to_purge(self, obs: Harness) -> None:
        # Ozone skips keys without data when it fills deletedTable.
        obs.put_key(V, B, "empty", 0)
        obs.ok(build.delete_key(V, B, "empty"))
        obs.put_key(V, B, "over", 0)
        obs.put_key(V, B, "over", 0)
        assert obs.keys_of(om_pb2.DELETED) == []
        assert obs.usage(V, B) == (0, 1)

    def test_deleted_row_carries_the_update_id_of_the_delete(self, obs: Harness) -> None:
        # Ozone: OMKeyDeleteRequest sets updateID = trxnLogIndex before the move
        # (and OmUtils.prepareKeyForDelete sets it again).
        gone = obs.put_key(V, B, "k", 1)
        obs.ok(build.delete_key(V, B, "k"))
        deleted = present(obs.deleted_row(V, B, "k", gone.object_id))
        assert deleted.key_info[0].update_id == obs.managed_index

    def test_overwritten_version_carries_the_update_id_of_the_commit(
            self, obs: Harness) -> None:
        # Ozone: OMKeyCommitRequest.getOldVersionsToCleanUp -> prepareKeyForDelete(trxnLogIndex).
        old = obs.put_key(V, B, "k", 1)
        obs.put_key(V, B, "k", 2)
        deleted = present(obs.deleted_row(V, B, "k", old.object_id))
        assert deleted.key_info[0].update_id == obs.managed_index


class TestRenameKey:
    def test_moves_the_row_keeping_the_object_id(self, obs: Harness) -> None:
        before = obs.put_key(V, B, "k", 10)
        obs.clock.advance(11)
        response = obs.ok(build.rename_key(V, B, "k", "dir/renamed"))
        info = response.rename_key.key_info
        assert info.key_name == "dir/renamed"
        assert info.object_id == before.object_id
        assert info.update_id == obs.managed_index != before.update_id
        assert info.creation_time == before.creation_time
        assert info.modification_time == obs.clock.now_ms
        assert info.data_size == before.data_size
        assert obs.key_row(V, B, "k") is None
        assert obs.key_row(V, B, "dir/renamed") == info
        assert obs.keys_of(om_pb2.KEY) == [b"/vol1/bucket1/dir/renamed"]
        assert obs.keys_of(om_pb2.DELETED) == []
        assert obs.usage(V, B) == (replicated(10), 1)

    def test_missing_source(self, obs: Harness) -> None:
        fails(obs, build.rename_key(V, B, "k", "k2"), "KEY_NOT_FOUND")

    def test_an_open_key_cannot_be_renamed(self, obs: Harness) -> None:
        obs.open_key(V, B, "k")
        fails(obs, build.rename_key(V, B, "k", "k2"), "KEY_NOT_FOUND")

    def test_target_exists(self, obs: Harness) -> None:
        source = obs.put_key(V, B, "k", 1)
        target = obs.put_key(V, B, "k2", 2)
        fails(obs, build.rename_key(V, B, "k", "k2"), "KEY_ALREADY_EXISTS")
        assert obs.key_row(V, B, "k") == source
        assert obs.key_row(V, B, "k2") == target

    def test_onto_itself(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 1)
        fails(obs, build.rename_key(V, B, "k", "k"), "KEY_ALREADY_EXISTS")

    def test_empty_source_name(self, obs: Harness) -> None:
        # Ozone's OMKeyRenameRequest: "Key name is empty" when either name is empty.
        fails(obs, build.rename_key(V, B, "", "k2"), "INVALID_KEY_NAME")

    def test_renamed_key_can_be_deleted_under_its_new_name(self, obs: Harness) -> None:
        before = obs.put_key(V, B, "k", 10)
        obs.ok(build.rename_key(V, B, "k", "k2"))
        obs.ok(build.delete_key(V, B, "k2"))
        assert obs.keys_of(om_pb2.DELETED) == [f"/vol1/bucket1/k2/{before.object_id}".encode()]
        assert obs.usage(V, B) == (0, 0)


# =================================================================== quotas ===

NEGATIVE_QUOTA_REQUESTS: list[tuple[str, Callable[[int], om_pb2.OMRequest]]] = [
    ("CreateVolume-bytes", lambda q: build.create_volume("vol2", quota_in_bytes=q)),
    ("CreateVolume-namespace", lambda q: build.create_volume("vol2", quota_in_namespace=q)),
    ("CreateBucket-bytes", lambda q: build.create_bucket(V, "bucket2", quota_in_bytes=q)),
    ("CreateBucket-namespace",
     lambda q: build.create_bucket(V, "bucket2", quota_in_namespace=q)),
    ("SetVolumeProperty-bytes", lambda q: build.set_volume_property(V, quota_in_bytes=q)),
    ("SetVolumeProperty-namespace",
     lambda q: build.set_volume_property(V, quota_in_namespace=q)),
    ("SetBucketProperty-bytes", lambda q: build.set_bucket_property(V, B, quota_in_bytes=q)),
    ("SetBucketProperty-namespace",
     lambda q: build.set_bucket_property(V, B, quota_in_namespace=q)),
]


class TestQuotaValues:
    @pytest.mark.parametrize("quota", [-2, -1000])
    @pytest.mark.parametrize(("name", "make"), NEGATIVE_QUOTA_REQUESTS,
                             ids=[n for n, _ in NEGATIVE_QUOTA_REQUESTS])
    def test_negative_quota_is_an_error(self, obs: Harness, name: str,
                                        make: Callable[[int], om_pb2.OMRequest],
                                        quota: int) -> None:
        fails(obs, make(quota), "QUOTA_ERROR")

    @pytest.mark.parametrize("quota", [0, -1])
    def test_zero_and_minus_one_create_unlimited(self, om: Harness, quota: int) -> None:
        volume = om.create_volume(V, quota_in_bytes=quota, quota_in_namespace=quota)
        assert (volume.quota_in_bytes, volume.quota_in_namespace) == (UNLIMITED, UNLIMITED)
        assert om.volume_row(V) == volume
        bucket = om.create_bucket(V, B, quota_in_bytes=quota, quota_in_namespace=quota)
        assert (bucket.quota_in_bytes, bucket.quota_in_namespace) == (UNLIMITED, UNLIMITED)
        assert om.bucket_row(V, B) == bucket


class TestBucketSpaceQuota:
    def test_create_key_checks_the_expected_replicated_size(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=300)
        om.open_key(V, B, "fits", data_size=100)                  # 300 <= 300
        fails(om, build.create_key(V, B, "big", data_size=101), "QUOTA_EXCEEDED")
        om.open_key(V, B, "single", data_size=300, replication_factor=1)
        fails(om, build.create_key(V, B, "big1", data_size=301, replication_factor=1),
              "QUOTA_EXCEEDED")

    def test_commit_checks_the_written_replicated_size(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=300)
        opened = om.open_key(V, B, "k", data_size=100)
        fails(om, build.commit_key(V, B, "k", opened.client_session_id, 101), "QUOTA_EXCEEDED")
        assert om.open_key_row(V, B, "k", opened.client_session_id) is not None
        assert om.usage(V, B) == (0, 0)
        om.commit(V, B, "k", opened.client_session_id, 100)
        assert om.usage(V, B) == (300, 1)

    def test_commit_counts_what_is_already_used(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=600)
        a = om.open_key(V, B, "a", data_size=100)
        b = om.open_key(V, B, "b", data_size=100)
        c = om.open_key(V, B, "c", data_size=1)
        om.commit(V, B, "a", a.client_session_id, 100)
        om.commit(V, B, "b", b.client_session_id, 100)
        assert om.usage(V, B) == (600, 2)
        fails(om, build.commit_key(V, B, "c", c.client_session_id, 1), "QUOTA_EXCEEDED")
        fails(om, build.create_key(V, B, "d", data_size=1), "QUOTA_EXCEEDED")
        om.put_key(V, B, "empty", 0)                              # zero bytes always fit

    def test_overwrite_is_charged_only_the_difference(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=450)
        om.put_key(V, B, "k", 100)                                # 300 used
        fails(om, build.create_key(V, B, "other", data_size=51), "QUOTA_EXCEEDED")
        # CreateKey checks the whole expected size, as Ozone's does; commit charges the change.
        fails(om, build.create_key(V, B, "k", data_size=150), "QUOTA_EXCEEDED")
        opened = om.open_key(V, B, "k", data_size=0)
        om.commit(V, B, "k", opened.client_session_id, 150)       # +150: 450 <= 450
        assert om.usage(V, B) == (450, 1)

    def test_shrinking_overwrite_passes_a_full_bucket(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=300)
        opened = om.open_key(V, B, "k", data_size=10)
        om.put_key(V, B, "k", 100)                                # 300 used: full
        om.commit(V, B, "k", opened.client_session_id, 10)
        assert om.usage(V, B) == (30, 1)

    def test_delete_frees_space_for_new_keys(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=300)
        om.put_key(V, B, "k", 100)
        fails(om, build.create_key(V, B, "k2", data_size=1), "QUOTA_EXCEEDED")
        om.ok(build.delete_key(V, B, "k"))
        om.put_key(V, B, "k2", 100)
        assert om.usage(V, B) == (300, 1)

    def test_usage_stops_at_what_a_bucket_can_count(self, obs: Harness) -> None:
        """Without a quota too: bytes in use stay a signed 64-bit number, so apply
        never overflows a row (it would stop every node)."""
        biggest = 1 << 60                                         # the gate's data_size cap
        obs.put_key(V, B, "a", biggest)                           # 3 * 2^60 in use
        obs.put_key(V, B, "b", biggest)                           # 6 * 2^60
        opened = obs.open_key(V, B, "c", 0)
        response = fails(obs, build.commit_key(V, B, "c", opened.client_session_id, biggest),
                         "QUOTA_EXCEEDED")
        assert "more than it can count" in response.message
        fails(obs, build.create_key(V, B, "d", biggest), "QUOTA_EXCEEDED")
        obs.put_key(V, B, "c", biggest // 2)                      # 7.5 * 2^60 still fits
        assert obs.usage(V, B) == (15 << 59, 3)

    def test_set_below_used_bytes(self, obs: Harness) -> None:
        obs.put_key(V, B, "k", 100)                               # 300 used
        fails(obs, build.set_bucket_property(V, B, quota_in_bytes=299), "QUOTA_EXCEEDED")
        obs.ok(build.set_bucket_property(V, B, quota_in_bytes=300))
        row = present(obs.bucket_row(V, B))
        assert row.quota_in_bytes == 300


class TestBucketNamespaceQuota:
    def test_commit_of_a_new_key_counts_one(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_namespace=2)
        sessions = [om.open_key(V, B, name).client_session_id for name in ("a", "b", "c")]
        om.commit(V, B, "a", sessions[0], 0)
        om.commit(V, B, "b", sessions[1], 0)
        assert om.usage(V, B) == (0, 2)
        fails(om, build.commit_key(V, B, "c", sessions[2], 0), "QUOTA_EXCEEDED")
        fails(om, build.create_key(V, B, "d"), "QUOTA_EXCEEDED")

    def test_overwrite_needs_no_namespace(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_namespace=1)
        first = om.open_key(V, B, "k")
        second = om.open_key(V, B, "k")
        om.commit(V, B, "k", first.client_session_id, 1)
        om.commit(V, B, "k", second.client_session_id, 2)
        assert om.usage(V, B) == (replicated(2), 1)

    def test_rename_changes_no_usage(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_namespace=1)
        om.put_key(V, B, "k", 5)
        om.ok(build.rename_key(V, B, "k", "k2"))
        assert om.usage(V, B) == (replicated(5), 1)

    def test_delete_frees_namespace(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_namespace=1)
        om.put_key(V, B, "k", 5)
        om.ok(build.delete_key(V, B, "k"))
        assert om.usage(V, B) == (0, 0)
        om.put_key(V, B, "k2", 5)

    def test_set_below_used_namespace(self, obs: Harness) -> None:
        obs.put_key(V, B, "a", 1)
        obs.put_key(V, B, "b", 1)
        fails(obs, build.set_bucket_property(V, B, quota_in_namespace=1), "QUOTA_EXCEEDED")
        obs.ok(build.set_bucket_property(V, B, quota_in_namespace=2))


class TestVolumeQuota:
    def test_space_quota_requires_bucket_quotas(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000)
        fails(om, build.create_bucket(V, B), "QUOTA_ERROR")
        fails(om, build.create_bucket(V, B, quota_in_bytes=-1), "QUOTA_ERROR")
        om.create_bucket(V, B, quota_in_bytes=1000)

    def test_bucket_quotas_must_fit_the_volume(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000)
        om.create_bucket(V, "aaa", quota_in_bytes=600)
        fails(om, build.create_bucket(V, "bbb", quota_in_bytes=401), "QUOTA_EXCEEDED")
        om.create_bucket(V, "bbb", quota_in_bytes=400)                   # exactly full
        fails(om, build.create_bucket(V, "ccc", quota_in_bytes=1), "QUOTA_EXCEEDED")

    def test_other_volumes_buckets_do_not_count(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000)
        om.create_volume("vol10", quota_in_bytes=5000)
        om.create_bucket("vol10", "big", quota_in_bytes=5000)
        om.create_bucket(V, B, quota_in_bytes=1000)

    def test_namespace_quota_limits_the_bucket_count(self, om: Harness) -> None:
        om.create_volume(V, quota_in_namespace=2)
        om.create_bucket(V, "aaa")
        om.create_bucket(V, "bbb")
        fails(om, build.create_bucket(V, "ccc"), "QUOTA_EXCEEDED")
        om.ok(build.delete_bucket(V, "aaa"))
        om.create_bucket(V, "ccc")

    def test_set_space_quota_below_the_sum_of_bucket_quotas(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, "aaa", quota_in_bytes=300)
        om.create_bucket(V, "bbb", quota_in_bytes=200)
        om.create_bucket(V, "ccc")                                      # unlimited: counts 0
        fails(om, build.set_volume_property(V, quota_in_bytes=499), "QUOTA_EXCEEDED")
        om.ok(build.set_volume_property(V, quota_in_bytes=500))
        row = present(om.volume_row(V))
        assert row.quota_in_bytes == 500

    def test_set_namespace_quota_below_the_bucket_count(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, "aaa")
        om.create_bucket(V, "bbb")
        fails(om, build.set_volume_property(V, quota_in_namespace=1), "QUOTA_EXCEEDED")
        om.ok(build.set_volume_property(V, quota_in_namespace=2))
        fails(om, build.create_bucket(V, "ccc"), "QUOTA_EXCEEDED")

    def test_set_bucket_quota_must_fit_the_volume(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000)
        om.create_bucket(V, "aaa", quota_in_bytes=600)
        om.create_bucket(V, "bbb", quota_in_bytes=400)
        fails(om, build.set_bucket_property(V, "aaa", quota_in_bytes=601), "QUOTA_EXCEEDED")
        om.ok(build.set_bucket_property(V, "aaa", quota_in_bytes=600))   # its own quota
        om.ok(build.set_bucket_property(V, "bbb", quota_in_bytes=300))
        om.ok(build.set_bucket_property(V, "aaa", quota_in_bytes=700))

    def test_cannot_clear_a_bucket_quota_under_a_volume_quota(self, om: Harness) -> None:
        om.create_volume(V, quota_in_bytes=1000)
        om.create_bucket(V, B, quota_in_bytes=600)
        fails(om, build.set_bucket_property(V, B, quota_in_bytes=-1), "QUOTA_ERROR")
        om.ok(build.set_volume_property(V, quota_in_bytes=-1))
        om.ok(build.set_bucket_property(V, B, quota_in_bytes=-1))


@pytest.mark.leader_flow_only
class TestReservations:
    """Quota that in-flight (executed, unapplied) requests reserved counts as used."""

    def test_bucket_bytes(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=600)
        opened = om.open_key(V, B, "k", data_size=100)
        held = FakeReservations()
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, B), bytes_=301)
        fails(om, build.create_key(V, B, "k2", data_size=100), "QUOTA_EXCEEDED",
              reservations=held)
        fails(om, build.commit_key(V, B, "k", opened.client_session_id, 100), "QUOTA_EXCEEDED",
              reservations=held)
        assert (om_pb2.BUCKET, b"/vol1/bucket1") in held.asked
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, B), bytes_=300)
        om.ok(build.commit_key(V, B, "k", opened.client_session_id, 100), reservations=held)

    def test_bucket_namespace(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_namespace=3)
        opened = om.open_key(V, B, "k")
        held = FakeReservations()
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, B), namespace=3)
        fails(om, build.create_key(V, B, "k2"), "QUOTA_EXCEEDED", reservations=held)
        fails(om, build.commit_key(V, B, "k", opened.client_session_id, 0), "QUOTA_EXCEEDED",
              reservations=held)
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, B), namespace=2)
        om.ok(build.commit_key(V, B, "k", opened.client_session_id, 0), reservations=held)

    def test_volume_namespace(self, om: Harness) -> None:
        om.create_volume(V, quota_in_namespace=3)
        om.create_bucket(V, "aaa")
        held = FakeReservations()
        held.hold(om_pb2.VOLUME, tables.volume_key(V), namespace=2)
        fails(om, build.create_bucket(V, "bbb"), "QUOTA_EXCEEDED", reservations=held)
        assert (om_pb2.VOLUME, b"/vol1") in held.asked
        held.hold(om_pb2.VOLUME, tables.volume_key(V), namespace=1)
        om.ok(build.create_bucket(V, "bbb"), reservations=held)

    def test_reservations_of_another_bucket_do_not_count(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=300, quota_in_namespace=1)
        held = FakeReservations()
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, "other"), bytes_=10**9, namespace=10**9)
        held.hold(om_pb2.VOLUME, tables.volume_key(V), bytes_=10**9, namespace=10**9)
        opened = om.ok(build.create_key(V, B, "k", data_size=100),
                       reservations=held).create_key
        om.ok(build.commit_key(V, B, "k", opened.client_session_id, 100), reservations=held)

    def test_a_shrinking_overwrite_ignores_reservations(self, om: Harness) -> None:
        om.create_volume(V)
        om.create_bucket(V, B, quota_in_bytes=300, quota_in_namespace=1)
        opened = om.open_key(V, B, "k", data_size=10)
        om.put_key(V, B, "k", 100)
        held = FakeReservations()
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, B), bytes_=10**9, namespace=10**9)
        om.ok(build.commit_key(V, B, "k", opened.client_session_id, 10), reservations=held)
        assert om.usage(V, B) == (30, 1)

    def test_unlimited_quotas_ignore_reservations(self, obs: Harness) -> None:
        held = FakeReservations()
        held.hold(om_pb2.BUCKET, tables.bucket_key(V, B), bytes_=10**12, namespace=10**12)
        held.hold(om_pb2.VOLUME, tables.volume_key(V), namespace=10**12)
        obs.ok(build.create_key(V, B, "k", data_size=10**6), reservations=held)
        obs.ok(build.create_bucket(V, "bucket2"), reservations=held)


class TestUsageLifecycle:
    def test_bucket_and_volume_counters_follow_every_write(self, obs: Harness) -> None:
        a = obs.open_key(V, B, "a", 10)
        assert obs.usage(V, B) == (0, 0)
        obs.commit(V, B, "a", a.client_session_id, 10)
        assert obs.usage(V, B) == (30, 1)
        obs.put_key(V, B, "b", 20, replication_factor=1)
        assert obs.usage(V, B) == (50, 2)
        obs.put_key(V, B, "a", 5)
        assert obs.usage(V, B) == (35, 2)
        obs.ok(build.rename_key(V, B, "a", "c"))
        assert obs.usage(V, B) == (35, 2)
        obs.ok(build.delete_key(V, B, "b"))
        assert obs.usage(V, B) == (15, 1)
        obs.ok(build.delete_key(V, B, "c"))
        assert obs.usage(V, B) == (0, 0)
        assert len(obs.keys_of(om_pb2.DELETED)) == 3
        obs.ok(build.delete_bucket(V, B))
        row = present(obs.volume_row(V))
        assert row.used_namespace == 0


# ===================================================== object and update ids ===

class TestIds:
    def test_every_created_object_gets_a_distinct_id_from_its_index(self, om: Harness) -> None:
        expected: dict[str, int] = {}
        for volume in ("vol1", "vol2"):
            om.create_volume(volume)
            expected[f"/{volume}"] = object_id_for(om.managed_index)
            for bucket in ("bkt1", "bkt2"):
                om.create_bucket(volume, bucket)
                expected[f"/{volume}/{bucket}"] = object_id_for(om.managed_index)
                for key in ("k1", "k2"):
                    opened = om.open_key(volume, bucket, key)
                    create_index = om.managed_index
                    assert opened.client_session_id == object_id_for(create_index, 1)
                    expected[f"session /{volume}/{bucket}/{key}"] = opened.client_session_id
                    om.commit(volume, bucket, key, opened.client_session_id, 1)
                    expected[f"/{volume}/{bucket}/{key}"] = object_id_for(create_index)
        stored = {row.decode(): om_pb2.VolumeInfo.FromString(raw).object_id
                  for row, raw in om.store.iterate(om_pb2.VOLUME)}
        stored |= {row.decode(): om_pb2.BucketInfo.FromString(raw).object_id
                   for row, raw in om.store.iterate(om_pb2.BUCKET)}
        stored |= {row.decode(): om_pb2.KeyInfo.FromString(raw).object_id
                   for row, raw in om.store.iterate(om_pb2.KEY)}
        sessions = {k: v for k, v in expected.items() if k.startswith("session")}
        assert stored == {k: v for k, v in expected.items() if k not in sessions}
        assert len(set(expected.values())) == len(expected) == 2 + 4 + 8 + 8

    def test_update_ids_are_the_index_of_the_last_writer(self, om: Harness) -> None:
        om.create_volume(V)
        volume_created = om.managed_index
        om.create_bucket(V, B)
        bucket_created = om.managed_index
        opened = om.open_key(V, B, "k")
        key_created = om.managed_index
        row = present(om.open_key_row(V, B, "k", opened.client_session_id))
        assert row.update_id == key_created
        om.commit(V, B, "k", opened.client_session_id, 1)
        assert present(om.key_row(V, B, "k")).update_id == om.managed_index

        # Quota deltas change counters, not update ids.
        assert present(om.volume_row(V)).update_id == volume_created
        assert present(om.bucket_row(V, B)).update_id == bucket_created

        om.ok(build.set_volume_property(V, owner="bob"))
        assert present(om.volume_row(V)).update_id == om.managed_index
        om.ok(build.set_bucket_property(V, B, quota_in_bytes=10**6))
        assert present(om.bucket_row(V, B)).update_id == om.managed_index
        om.ok(build.rename_key(V, B, "k", "k2"))
        assert present(om.key_row(V, B, "k2")).update_id == om.managed_index

    def test_object_ids_survive_rename_and_commit(self, obs: Harness) -> None:
        opened = obs.open_key(V, B, "k")
        committed = obs.commit(V, B, "k", opened.client_session_id, 1)
        assert committed.object_id == opened.key_info.object_id
        renamed = obs.ok(build.rename_key(V, B, "k", "k2")).rename_key.key_info
        assert renamed.object_id == opened.key_info.object_id
