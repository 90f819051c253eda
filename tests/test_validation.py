"""The gate's field checks (om/gatekeeper/validation.py), and INTERNAL_ERROR kept for bugs.

* every field of the envelope and of every flow request's body has a rule, so a
  field added to om.proto without one fails here;
* each rule refuses what it must with Ozone's status and a message naming the
  field, and lets a well-formed request of every type through;
* the red case of issue 28: a user with a control character (``r\\x7fot``) made
  CreateBucket fail in the ACL code, answered INTERNAL_ERROR with a traceback;
  it is now INVALID_REQUEST naming ``user``, before any handler;
* a bug's INTERNAL_ERROR counts in ``om_internal_errors_total`` (the flows' and
  the node's own requests').
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from om import config as om_config
from om.client import requests as build
from om.executor import names, registry
from om.executor.context import Limits
from om.gatekeeper import validation
from om.node import transfer
from om.node.node import Node
from om.protocol import acls, om_pb2
from om.protocol.token_format import KIND
from tests.leader_harness import LeaderUnderTest, config
from tests.prom_text import samples

LIMITS = Limits(list_max_keys=100, key_name_max_bytes=16)
V, B, K = "vol1", "bkt1", "key1"
OBJ, ACL = om_pb2.OzoneObj, om_pb2.OzoneAcl


def stamped(request: om_pb2.OMRequest, user: str = "alice") -> om_pb2.OMRequest:
    request.client_id, request.call_id, request.user = "client", 1, user
    return request


def token(**fields: object) -> om_pb2.TokenProto:
    identifier = om_pb2.OMTokenProto(type=om_pb2.OMTokenProto.DELEGATION_TOKEN, owner="alice")
    values: dict[str, object] = {"identifier": identifier.SerializeToString(),
                                 "password": b"p" * 32, "kind": KIND, **fields}
    return om_pb2.TokenProto(**values)  # type: ignore[arg-type]


def user_acl(name: str = "bob") -> om_pb2.OzoneAcl:
    return ACL(type=ACL.USER, name=name, rights=[ACL.READ])


WELL_FORMED: list[om_pb2.OMRequest] = [
    build.create_volume(V, 10, 5, owner="bob"), build.set_volume_property(V, -1, 0, "bob"),
    build.info_volume(V), build.delete_volume(V), build.list_volumes("vo", V, 100),
    build.create_bucket(V, B, -1, 0), build.info_bucket(V, B),
    build.set_bucket_property(V, B, 10, -1), build.delete_bucket(V, B),
    build.list_buckets(V, "b", "", 0), build.create_key(V, B, K, 1 << 60, 1),
    build.commit_key(V, B, K, 7, 1 << 60), build.lookup_key(V, B, "a b/\u00e9"),
    build.delete_key(V, B, K), build.rename_key(V, B, K, "k" * 16),
    build.list_keys(V, B, "dir/", "dir/a", 100),
    build.add_acl(build.acl_object(V, B, K), user_acl()),
    build.remove_acl(build.acl_object(V), ACL(type=ACL.WORLD, rights=[ACL.ALL])),
    build.set_acl(build.acl_object(V, B), [user_acl(), user_acl("carol")]),
    build.get_acl(build.acl_object(V, B)), build.get_delegation_token("bob"),
    build.renew_delegation_token(token()), build.cancel_delegation_token(token()),
    build.create_directory(V, B, "a/b/"), build.create_file(V, B, "a/f", 1, recursive=True),
    build.lookup_file(V, B, "a/f"), build.get_file_status(V, B, "a"),
    build.list_status(V, B, "", recursive=True, num_entries=100),
    om_pb2.OMRequest(cmd_type=om_pb2.PurgeDirectories, purge_directories=om_pb2.
                     PurgeDirectoriesRequest(volume=V, bucket=B, rows_max=1000)),
    om_pb2.OMRequest(cmd_type=om_pb2.PurgeKeys, purge_keys=om_pb2.PurgeKeysRequest(
        keys=[b"/v/b/k/1"], retired_before_ms=1)),
    om_pb2.OMRequest(cmd_type=om_pb2.DeleteOpenKeys, delete_open_keys=om_pb2.
                     DeleteOpenKeysRequest(open_keys=[om_pb2.OpenKeyRef(
                         table=om_pb2.OPEN_FILE, key=b"/1/2/f/3")], created_before_ms=1)),
    build.add_user_certificate("bob", "1F", ("eng", "ops"), 1),
    build.revoke_user_certificates("bob"), build.list_user_certificates("bob", "1F", 1000),
    build.initiate_multipart_upload(V, B, K, 1),
    build.commit_multipart_upload(V, B, K, "123", 10_000, 7, 1 << 60),
    build.complete_multipart_upload(V, B, K, "123", [(1, "/v/b/k/7"), (10_000, "")]),
    build.abort_multipart_upload(V, B, K, "18446744073709551615"),
    build.list_multipart_upload_parts(V, B, K, "123", 10_000, 100),
    build.list_multipart_uploads(V, B, "a/", "a/b", "123", 100),
    build.create_snapshot(V, B, "snap-1"), build.create_snapshot(V, B),
    build.delete_snapshot(V, B, "snap-1"), build.get_snapshot_info(V, B, "s20261125-1.5"),
    build.list_snapshots(V, B, "sn", "snap-0", 100),
    build.snapshot_diff(V, B, "snap-1", "snap-2", "1-2-3", 1000), build.snapshot_diff(V, B, "s1x"),
    om_pb2.OMRequest(cmd_type=om_pb2.AbortExpiredMultiPartUploads,
                     abort_expired_multipart_uploads=om_pb2.AbortExpiredMultiPartUploadsRequest(
                         uploads=[om_pb2.MultipartUploadRef(volume=V, bucket=B, key=K,
                                                            upload_id="9")],
                         created_before_ms=1)),
    build.prepare(600), build.prepare_status(), build.cancel_prepare(),
    build.finalize_upgrade("admin-cli"), build.finalize_upgrade_progress(),
    build.set_flows([om_pb2.CreateKey, om_pb2.CommitKey]), build.flow_status(),
]


# ------------------------------------------------------------------ the tables ---

def test_every_field_of_every_request_has_a_rule() -> None:
    assert set(validation.BODIES) == set(registry.KINDS)
    for cmd, kind in registry.KINDS.items():
        body = om_pb2.OMRequest.DESCRIPTOR.fields_by_name[kind.body_field].message_type
        assert body is not None
        assert set(validation.BODIES[cmd]) == {f.name for f in body.fields}, kind.name
    envelope = {f.name for f in om_pb2.OMRequest.DESCRIPTOR.fields
                if f.containing_oneof is None}
    assert set(validation.ENVELOPE) == envelope


def test_the_well_formed_examples_cover_every_type() -> None:
    assert sorted(set(r.cmd_type for r in WELL_FORMED)) == sorted(registry.KINDS)


@pytest.mark.parametrize("request_", WELL_FORMED,
                         ids=[om_pb2.Type.Name(r.cmd_type) for r in WELL_FORMED])
def test_a_well_formed_request_passes(request_: om_pb2.OMRequest) -> None:
    assert validation.problem(stamped(request_), LIMITS) is None


# ---------------------------------------------------------------------- names ---

def _reference_name_problem(name: str) -> bool:
    """Ozone's name rules, literally, one by one (what names.name_problem's one regex
    for the valid case must agree with)."""
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789.-")
    return not (3 <= len(name) <= 63 and set(name) <= allowed
                and name[0] not in ".-" and name[-1] not in ".-"
                and not any(bad in name for bad in ("..", ".-", "-."))
                and not set(name) <= set("0123456789."))


@settings(max_examples=500, derandomize=True, database=None)
@given(st.one_of(st.text("abz09.-", max_size=8), st.text(max_size=70),
                 st.text("ab.-\n", min_size=60, max_size=66)))
def test_the_name_rule_agrees_with_ozones_rules_one_by_one(name: str) -> None:
    assert (names.name_problem(name) is not None) == _reference_name_problem(name)


# ------------------------------------------------------------------- refusals ---

def _envelope(**fields: object) -> om_pb2.OMRequest:
    request = stamped(build.info_volume(V))
    for name, value in fields.items():
        setattr(request, name, value)
    return request


REFUSED: list[tuple[str, om_pb2.OMRequest, str, str]] = [
    ("cert-user", stamped(build.add_user_certificate("", "1F", (), 1)), "INVALID_REQUEST",
     "add_user_certificate.user"),
    ("cert-serial", stamped(build.add_user_certificate("bob", "01f", (), 1)),
     "INVALID_REQUEST", "add_user_certificate.serial"),
    ("cert-group", stamped(build.add_user_certificate("bob", "1F", ("a:b",), 1)),
     "INVALID_REQUEST", "add_user_certificate.groups"),
    ("cert-groups", stamped(build.add_user_certificate("bob", "1F", tuple(
        f"g{n}" for n in range(33)), 1)), "INVALID_REQUEST", "add_user_certificate.groups"),
    ("revoke-user", stamped(build.revoke_user_certificates("a b")), "INVALID_REQUEST",
     "revoke_user_certificates.user"),
    ("cert-rows", stamped(build.list_user_certificates(max_rows=1001)), "INVALID_REQUEST",
     "list_user_certificates.max_rows"),
    ("envelope-groups", stamped(om_pb2.OMRequest(cmd_type=om_pb2.InfoVolume, groups=["a,b"],
                                                 info_volume=om_pb2.InfoVolumeRequest(
                                                     volume=V))), "INVALID_REQUEST", "groups"),
    ("layout", stamped(build.create_bucket(V, B, layout="fso")), "INVALID_REQUEST",
     "create_bucket.layout"),
    ("empty-dir", stamped(build.create_directory(V, B, "")), "INVALID_KEY_NAME",
     "create_directory.key"),
    ("file-replication", stamped(build.create_file(V, B, "f", replication_factor=2)),
     "INVALID_REQUEST", "create_file.replication_factor"),
    ("status-start", stamped(build.list_status(V, B, "d", start_key="a\x01")),
     "INVALID_REQUEST", "list_status.start_key"),
    ("status-entries", stamped(build.list_status(V, B, "d", num_entries=101)),
     "INVALID_REQUEST", "list_status.num_entries"),
    ("purge-rows", stamped(om_pb2.OMRequest(
        cmd_type=om_pb2.PurgeDirectories, purge_directories=om_pb2.PurgeDirectoriesRequest(
            volume=V, bucket=B))), "INVALID_REQUEST", "purge_directories.rows_max"),
    ("purge-none", stamped(om_pb2.OMRequest(
        cmd_type=om_pb2.PurgeKeys, purge_keys=om_pb2.PurgeKeysRequest())), "INVALID_REQUEST",
     "purge_keys.keys"),
    ("expire-table", stamped(om_pb2.OMRequest(
        cmd_type=om_pb2.DeleteOpenKeys, delete_open_keys=om_pb2.DeleteOpenKeysRequest(
            open_keys=[om_pb2.OpenKeyRef(table=om_pb2.KEY, key=b"/v/b/k")]))),
     "INVALID_REQUEST", "delete_open_keys.open_keys"),
    ("upload-id", stamped(build.abort_multipart_upload(V, B, K, "12a")),
     "NO_SUCH_MULTIPART_UPLOAD_ERROR", "abort_multipart_upload.upload_id"),
    ("upload-id-zero", stamped(build.complete_multipart_upload(V, B, K, "0123", [(1, "")])),
     "NO_SUCH_MULTIPART_UPLOAD_ERROR", "complete_multipart_upload.upload_id"),
    ("part-upload-id", stamped(build.create_key(V, B, K, 1, upload_id="../x")),
     "NO_SUCH_MULTIPART_UPLOAD_ERROR", "create_key.multipart_upload_id"),
    ("part-number-0", stamped(build.commit_multipart_upload(V, B, K, "1", 0, 7, 1)),
     "INVALID_REQUEST", "commit_multipart_upload.part_number"),
    ("part-number-10001", stamped(build.commit_multipart_upload(V, B, K, "1", 10_001, 7, 1)),
     "INVALID_REQUEST", "commit_multipart_upload.part_number"),
    ("complete-none", stamped(build.complete_multipart_upload(V, B, K, "1", [])),
     "INVALID_REQUEST", "complete_multipart_upload.parts"),
    ("complete-number", stamped(build.complete_multipart_upload(V, B, K, "1",
                                                                [(1, ""), (10_001, "")])),
     "INVALID_REQUEST", "complete_multipart_upload.parts: [1]"),
    ("parts-marker", stamped(build.list_multipart_upload_parts(V, B, K, "1", 10_001)),
     "INVALID_REQUEST", "list_multipart_upload_parts.part_number_marker"),
    ("uploads-max", stamped(build.list_multipart_uploads(V, B, max_uploads=101)),
     "INVALID_REQUEST", "list_multipart_uploads.max_uploads"),
    ("initiate-replication", stamped(build.initiate_multipart_upload(V, B, K, 2)),
     "INVALID_REQUEST", "initiate_multipart_upload.replication_factor"),
    ("expire-none", stamped(om_pb2.OMRequest(
        cmd_type=om_pb2.AbortExpiredMultiPartUploads,
        abort_expired_multipart_uploads=om_pb2.AbortExpiredMultiPartUploadsRequest())),
     "INVALID_REQUEST", "abort_expired_multipart_uploads.uploads"),
    ("expire-name", stamped(om_pb2.OMRequest(
        cmd_type=om_pb2.AbortExpiredMultiPartUploads,
        abort_expired_multipart_uploads=om_pb2.AbortExpiredMultiPartUploadsRequest(
            uploads=[om_pb2.MultipartUploadRef(volume=V, bucket="B", key=K, upload_id="1")]))),
     "INVALID_BUCKET_NAME", "abort_expired_multipart_uploads.uploads: [0].bucket"),
    ("control-user", stamped(build.create_bucket(V, B), "r\x7fot"), "INVALID_REQUEST", "user"),
    ("colon-user", _envelope(user="a:b"), "INVALID_REQUEST", "user"),
    ("space-user", _envelope(user="a b"), "INVALID_REQUEST", "user"),
    ("long-user", _envelope(user="u" * 256), "INVALID_REQUEST", "user"),
    ("newline-client", _envelope(client_id="c\n"), "INVALID_REQUEST", "client_id"),
    ("c1-client", _envelope(client_id="c\x85"), "INVALID_REQUEST", "client_id"),
    ("long-client", _envelope(client_id="c" * 257), "INVALID_REQUEST", "client_id"),
    ("secret-bytes", _envelope(secret_key_candidate=b"x" * 5), "INVALID_REQUEST",
     "secret_key_candidate"),
    ("volume", stamped(build.info_volume("Vol")), "INVALID_VOLUME_NAME", "info_volume.volume"),
    ("root-volume", stamped(build.info_bucket("/", B)), "INVALID_VOLUME_NAME",
     "info_bucket.volume"),
    ("bucket", stamped(build.delete_bucket(V, "b_1")), "INVALID_BUCKET_NAME",
     "delete_bucket.bucket"),
    ("key", stamped(build.lookup_key(V, B, "a\x00")), "INVALID_KEY_NAME", "lookup_key.key"),
    ("empty-key", stamped(build.commit_key(V, B, "", 1, 1)), "INVALID_KEY_NAME",
     "commit_key.key"),
    ("long-key", stamped(build.delete_key(V, B, "k" * 17)), "INVALID_KEY_NAME",
     "delete_key.key"),
    ("to-key", stamped(build.rename_key(V, B, K, "t\x7f")), "INVALID_KEY_NAME",
     "rename_key.to_key"),
    ("volume-prefix", stamped(build.list_volumes(prefix="V")), "INVALID_REQUEST",
     "list_volume.prefix"),
    ("bucket-start", stamped(build.list_buckets(V, start_key="b" * 64)), "INVALID_REQUEST",
     "list_buckets.start_key"),
    ("key-prefix", stamped(build.list_keys(V, B, prefix="a\nb")), "INVALID_REQUEST",
     "list_keys.prefix"),
    ("max-keys", stamped(build.list_keys(V, B, max_keys=101)), "INVALID_REQUEST",
     "list_keys.max_keys"),
    ("quota", stamped(build.create_volume(V, -2)), "QUOTA_ERROR",
     "create_volume.quota_in_bytes"),
    ("namespace-quota", stamped(build.set_bucket_property(V, B, 0, -(1 << 63))),
     "QUOTA_ERROR", "set_bucket_property.quota_in_namespace"),
    ("owner", stamped(build.create_volume(V, owner="o\tk")), "INVALID_REQUEST",
     "create_volume.owner"),
    ("bucket-owner", stamped(build.create_bucket(V, B, owner="a,b")), "INVALID_REQUEST",
     "create_bucket.owner"),
    ("data-size", stamped(build.create_key(V, B, K, (1 << 60) + 1)), "INVALID_REQUEST",
     "create_key.data_size"),
    ("commit-size", stamped(build.commit_key(V, B, K, 1, (1 << 64) - 1)), "INVALID_REQUEST",
     "commit_key.data_size"),
    ("replication", stamped(build.create_key(V, B, K, 1, replication_factor=2)),
     "INVALID_REQUEST", "create_key.replication_factor"),
    ("prefix-object", stamped(build.get_acl(OBJ(res_type=OBJ.PREFIX, volume=V)),),
     "NOT_SUPPORTED_OPERATION", "get_acl.obj"),
    ("unknown-object", stamped(build.get_acl(OBJ(res_type=OBJ.ResourceType.ValueType(77),
                                                 volume=V))), "INVALID_REQUEST", "get_acl.obj"),
    ("object-parts", stamped(build.get_acl(OBJ(res_type=OBJ.VOLUME, volume=V, key=K))),
     "INVALID_REQUEST", "get_acl.obj"),
    ("object-key", stamped(build.add_acl(build.acl_object(V, B, "k\x01"), user_acl())),
     "INVALID_KEY_NAME", "add_acl.obj: key"),
    ("object-volume", stamped(build.get_acl(build.acl_object("A"))), "INVALID_VOLUME_NAME",
     "get_acl.obj: volume"),
    ("acl-identity", stamped(build.add_acl(build.acl_object(V), ACL(
        type=ACL.Identity.ValueType(99), name="bob", rights=[ACL.READ]))), "INVALID_REQUEST",
     "add_acl.acl"),
    ("acl-right", stamped(build.remove_acl(build.acl_object(V), ACL(
        type=ACL.USER, name="bob", rights=[ACL.Right.ValueType(42)]))), "INVALID_REQUEST",
     "remove_acl.acl"),
    ("acl-scope", stamped(build.add_acl(build.acl_object(V), ACL(
        type=ACL.USER, name="bob", rights=[ACL.READ], scope=ACL.Scope.ValueType(7)))),
     "INVALID_REQUEST", "add_acl.acl"),
    ("acl-name", stamped(build.add_acl(build.acl_object(V), user_acl("b" * 256))),
     "INVALID_REQUEST", "add_acl.acl"),
    ("acl-list-entry", stamped(build.set_acl(build.acl_object(V), [user_acl(), ACL()])),
     "INVALID_REQUEST", "set_acl.acl: [1]"),
    ("acl-list-long", stamped(build.set_acl(build.acl_object(V), [
        user_acl(f"u{n}") for n in range(acls.ENTRIES_MAX + 1)])), "INVALID_REQUEST",
     "set_acl.acl"),
    ("renewer", stamped(build.get_delegation_token("r\x1b")), "INVALID_REQUEST",
     "get_delegation_token.renewer"),
    ("token-kind", stamped(build.renew_delegation_token(token(kind="x"))), "INVALID_TOKEN",
     "renew_delegation_token.token"),
    ("token-empty", stamped(build.cancel_delegation_token(om_pb2.TokenProto())),
     "INVALID_TOKEN", "cancel_delegation_token.token"),
    ("token-size", stamped(build.cancel_delegation_token(token(service="s" * 5000))),
     "INVALID_TOKEN", "cancel_delegation_token.token"),
    ("drain-timeout", stamped(build.prepare(601)), "INVALID_REQUEST", "prepare.drain_timeout_s"),
    ("upgrade-client", stamped(build.finalize_upgrade("a\x00b")), "INVALID_REQUEST",
     "finalize_upgrade.upgrade_client_id"),
    ("upgrade-client-long", stamped(build.finalize_upgrade_progress("c" * 257)),
     "INVALID_REQUEST", "finalize_upgrade_progress.upgrade_client_id"),
    ("flows-read-type", stamped(build.set_flows([om_pb2.LookupKey])),
     "INVALID_REQUEST", "set_flows.leader_types"),
    ("flows-itself", stamped(build.set_flows([om_pb2.SetFlows])),
     "INVALID_REQUEST", "set_flows.leader_types"),
]


@pytest.mark.parametrize(("request_", "status", "field"), [r[1:] for r in REFUSED],
                         ids=[r[0] for r in REFUSED])
def test_a_broken_field_is_refused_with_its_status_naming_it(
        request_: om_pb2.OMRequest, status: str, field: str) -> None:
    refusal = validation.problem(request_, LIMITS)
    assert refusal is not None
    assert om_pb2.Status.Name(refusal.status) == status
    assert refusal.message.startswith(f"{field}: "), refusal.message


def test_node_answered_types_get_their_envelope_checked() -> None:
    request = om_pb2.OMRequest(cmd_type=om_pb2.ServiceList, user="a\nb",
                               service_list=om_pb2.ServiceListRequest())
    refusal = validation.problem(request, LIMITS)
    assert refusal is not None
    assert refusal.message.startswith("user: ")
    request.user = "alice"
    assert validation.problem(request, LIMITS) is None


# ------------------------------------------------------ the red case, in a leader ---

@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config())
    await under_test.start()
    yield under_test
    await under_test.close()


async def test_a_control_character_user_gets_a_clear_status(
        leader: LeaderUnderTest, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 28's red case: before the gate, CreateBucket as ``r\\x7fot`` reached the ACL
    code (AclError), was logged with a traceback and answered INTERNAL_ERROR."""
    await leader.ok(build.create_volume(V))
    with caplog.at_level(logging.WARNING):
        refused = await leader.call(build.create_bucket(V, B), user="r\x7fot")
    assert om_pb2.Status.Name(refused.status) == "INVALID_REQUEST"
    assert refused.message.startswith("user: invalid user name 'r\\x7fot'")
    assert not caplog.records
    assert leader.service.metrics.requests.internal_errors == 0
    assert leader.service.metrics.requests.counts[("CreateBucket", "INVALID_REQUEST")] == 1
    await leader.ok(build.create_bucket(V, B))


# ------------------------------------------------------------- internal errors ---

def _exploding(monkeypatch: pytest.MonkeyPatch, cmd: om_pb2.Type.ValueType) -> None:
    kind = registry.KINDS[cmd]

    def explode(*args: object) -> om_pb2.OMResponse:
        raise RuntimeError("handler bug")

    monkeypatch.setitem(registry.KINDS, cmd,
                        registry.RequestKind(kind.name, kind.body_field, kind.write, explode))


@pytest.mark.parametrize("cmd", [om_pb2.DeleteVolume, om_pb2.InfoVolume],
                         ids=["write", "read"])
async def test_a_bug_is_internal_error_counted_and_exported(
        leader: LeaderUnderTest, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, cmd: om_pb2.Type.ValueType) -> None:
    await leader.ok(build.create_volume(V))
    _exploding(monkeypatch, cmd)
    with caplog.at_level(logging.ERROR):
        for _ in range(2):
            request = build.delete_volume(V) if cmd == om_pb2.DeleteVolume else \
                build.info_volume(V)
            answer = await leader.call(request)
            assert answer.status == om_pb2.INTERNAL_ERROR
    assert [r.exc_info is not None for r in caplog.records] == [True, True]
    exported = samples(generate_latest(leader.service.metrics.registry).decode())
    assert exported["om_internal_errors_total"] == 2
    leader.assert_idle()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    started = Node(om_config.load(None, data_dir=tmp_path / "data"))
    await started.start()
    yield started
    await started.close()


async def test_a_bug_in_a_request_the_node_answers_counts_too(
        node: Node, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(*args: object) -> om_pb2.OMResponse:
        raise RuntimeError("transfer bug")

    monkeypatch.setattr(transfer, "answer", broken)
    request = om_pb2.OMRequest(cmd_type=om_pb2.TransferLeadership, client_id="c", call_id=1,
                               transfer_leadership=om_pb2.TransferLeadershipRequest(random=True))
    with caplog.at_level(logging.ERROR):
        answer = await node.submit(request)
    assert answer.status == om_pb2.INTERNAL_ERROR
    assert caplog.records[0].exc_info is not None
    assert node.metrics.flat()["om_internal_errors_total"] == 1
    refused = await node.submit(om_pb2.OMRequest(
        cmd_type=om_pb2.ServiceList, client_id="c", call_id=2, user="r\x7fot",
        service_list=om_pb2.ServiceListRequest()))
    assert om_pb2.Status.Name(refused.status) == "INVALID_REQUEST"
    await asyncio.sleep(0)
    assert node.metrics.flat()["om_internal_errors_total"] == 1

