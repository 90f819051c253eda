"""Multipart upload (om/executor/multipart/uploads.py), its handlers in both execution flows.

* parts committed out of order complete into one key of their summed size; while the
  upload lives its committed parts' replicated bytes are in the bucket's used_bytes,
  and the namespace counts the key only once completed;
* a part committed twice: the later replaces the earlier (which goes to deletedTable,
  its bytes given back), so the charge stays exact;
* abort and the leader's expiry: both rows go, every part to deletedTable, bytes back;
* red cases, each with Ozone's status and nothing written: a missing part
  (INVALID_PART), a list out of order (INVALID_PART_ORDER), a part number out of
  1..10000 (INVALID_REQUEST), an unknown upload id (NO_SUCH_MULTIPART_UPLOAD_ERROR), a
  small part that is not the last (ENTITY_TOO_SMALL);
* on a file-system bucket the complete makes the file in the tree, its missing parents
  with it, replaces a file there and refuses a directory there (NOT_A_FILE) or a file
  on the way (FILE_ALREADY_EXISTS); a path the tree cannot hold is refused at
  initiate (INVALID_KEY_NAME);
* the rights: WRITE on the key (a part's commit: on its open key), READ to list parts;
* after each scenario the auditor finds the store consistent (usage = keys + parts).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from om.client import requests as build
from om.executor.fso.fs import FSO
from om.executor.multipart.uploads import PART_NUMBER_MAX
from om.gatekeeper.authorize import AclPolicy, authorize
from om.integrity.auditor import audit
from om.protocol import acls, om_pb2
from om.schema import tables
from om.statemachine.store import Store
from tests.handler_harness import LEADER, OLD, Harness, status_name

V, B, K = "vol1", "bucket1", "big/object"
MIB = 1024 * 1024
BIG = 5 * MIB                 # the smallest part that may be followed by another
REPLICAS = 3


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = Store(tmp_path_factory.mktemp("multipart") / "db")
    yield db
    db.close()


@pytest.fixture(params=[LEADER, OLD])
def om(store: Store, request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(store, flow=request.param)
    harness.create_volume(V)
    harness.create_bucket(V, B)
    yield harness
    assert audit(store).clean, audit(store).violations
    harness.close()


def initiate(om: Harness, key: str = K) -> str:
    return om.ok(build.initiate_multipart_upload(V, B, key)).initiate_multipart_upload.upload_id


def put_part(om: Harness, upload_id: str, number: int, size: int, key: str = K,
             bucket: str = B) -> str:
    opened = om.ok(build.create_key(V, bucket, key, size, upload_id=upload_id)).create_key
    assert opened.key_info.multipart_upload_id == upload_id
    committed = om.ok(build.commit_multipart_upload(V, bucket, key, upload_id, number,
                                                    opened.client_session_id, size))
    return committed.commit_multipart_upload.part_name


def upload_row(om: Harness, upload_id: str, key: str = K) -> om_pb2.MultipartKeyInfo | None:
    raw = om.store.get(om_pb2.MULTIPART_INFO, tables.multipart_key(V, B, key, upload_id))
    return None if raw is None else om_pb2.MultipartKeyInfo.FromString(raw)


def fails(om: Harness, request: om_pb2.OMRequest, expected: str) -> om_pb2.OMResponse:
    before = om.data_digests()
    response = om.run(request)
    assert status_name(response) == expected, response.message
    assert om.last_recorder.empty
    assert om.data_digests() == before, "a refused request wrote nothing"
    return response


# ------------------------------------------------------------------ the flow ---

def test_parts_committed_out_of_order_complete_into_one_key(om: Harness) -> None:
    upload_id = initiate(om)
    assert om.open_key_row(V, B, K, int(upload_id)) is not None, "the upload's open row"
    names = {3: put_part(om, upload_id, 3, 100), 1: put_part(om, upload_id, 1, BIG),
             2: put_part(om, upload_id, 2, BIG + 1)}
    charged = (BIG + BIG + 1 + 100) * REPLICAS
    assert om.usage(V, B) == (charged, 0), "parts charge bytes, the namespace waits"
    row = upload_row(om, upload_id)
    assert row is not None
    assert [p.part_number for p in row.part_key_info_list] == [1, 2, 3]
    listed = om.ok(build.list_multipart_upload_parts(V, B, K, upload_id, 1, 1))
    page = listed.list_multipart_upload_parts
    assert [(p.part_number, p.part_name, p.size) for p in page.parts] == [
        (2, names[2], BIG + 1)]
    assert page.truncated
    assert page.next_part_number_marker == 2
    uploads = om.ok(build.list_multipart_uploads(V, B, "big/")).list_multipart_uploads
    assert [(u.key, u.upload_id) for u in uploads.uploads] == [(K, upload_id)]

    done = om.ok(build.complete_multipart_upload(V, B, K, upload_id,
                                                 [(1, names[1]), (2, ""), (3, names[3])]))
    info = done.complete_multipart_upload.key_info
    assert info.data_size == BIG + BIG + 1 + 100
    assert om.key_row(V, B, K) == info
    assert om.usage(V, B) == (charged, 1), "the key counts once completed"
    assert upload_row(om, upload_id) is None
    assert om.open_key_row(V, B, K, int(upload_id)) is None
    assert om.store.count(om_pb2.DELETED) == 0, "every part became the key"


def test_a_part_committed_twice_replaces_the_earlier(om: Harness) -> None:
    upload_id = initiate(om)
    first = put_part(om, upload_id, 1, BIG)
    assert om.usage(V, B) == (BIG * REPLICAS, 0)
    second = put_part(om, upload_id, 1, 2 * BIG)
    assert first != second
    assert om.usage(V, B) == (2 * BIG * REPLICAS, 0), "only the later part is charged"
    row = upload_row(om, upload_id)
    assert row is not None
    assert len(row.part_key_info_list) == 1
    retired = om.store.scan(om_pb2.DELETED, b"", None, 10)
    assert len(retired) == 1
    assert om_pb2.RepeatedKeyInfo.FromString(retired[0][1]).key_info[0].data_size == BIG
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(1, first)]), "INVALID_PART")
    put_part(om, upload_id, 2, 7)
    om.ok(build.complete_multipart_upload(V, B, K, upload_id, [(1, second), (2, "")]))
    assert om.usage(V, B) == ((2 * BIG + 7) * REPLICAS, 1)


def test_parts_left_out_of_the_complete_give_their_bytes_back(om: Harness) -> None:
    upload_id = initiate(om)
    put_part(om, upload_id, 1, BIG)
    put_part(om, upload_id, 2, 10)
    put_part(om, upload_id, 5, 20)
    om.ok(build.complete_multipart_upload(V, B, K, upload_id, [(1, ""), (5, "")]))
    assert om.usage(V, B) == ((BIG + 20) * REPLICAS, 1)
    assert om.store.count(om_pb2.DELETED) == 1, "part 2 went to deletedTable"


def test_a_complete_over_an_existing_key_retires_it(om: Harness) -> None:
    om.put_key(V, B, K, 1000)
    upload_id = initiate(om)
    put_part(om, upload_id, 1, 50)
    om.ok(build.complete_multipart_upload(V, B, K, upload_id, [(1, "")]))
    assert om.usage(V, B) == (50 * REPLICAS, 1)
    assert om.store.count(om_pb2.DELETED) == 1


def test_abort_releases_every_part(om: Harness) -> None:
    om.put_key(V, B, "other", 10)
    upload_id = initiate(om)
    put_part(om, upload_id, 2, BIG)
    put_part(om, upload_id, 1, 30)
    assert om.usage(V, B) == ((10 + BIG + 30) * REPLICAS, 1)
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))
    assert om.usage(V, B) == (10 * REPLICAS, 1), "the parts' bytes are released"
    assert upload_row(om, upload_id) is None
    assert om.open_key_row(V, B, K, int(upload_id)) is None
    assert om.store.count(om_pb2.DELETED) == 2, "both parts wait in deletedTable"
    fails(om, build.abort_multipart_upload(V, B, K, upload_id), "NO_SUCH_MULTIPART_UPLOAD_ERROR")


def test_the_expiry_aborts_only_uploads_past_its_cutoff(om: Harness) -> None:
    old = initiate(om)
    put_part(om, old, 1, 40)
    om.clock.advance(1000)
    young = initiate(om, "young")
    put_part(om, young, 1, 8, key="young")
    cutoff = om.clock.now_ms - 500
    refs = [om_pb2.MultipartUploadRef(volume=V, bucket=B, key=K, upload_id=old),
            om_pb2.MultipartUploadRef(volume=V, bucket=B, key="young", upload_id=young)]
    request = om_pb2.OMRequest(
        cmd_type=om_pb2.AbortExpiredMultiPartUploads,
        abort_expired_multipart_uploads=om_pb2.AbortExpiredMultiPartUploadsRequest(
            uploads=refs, created_before_ms=cutoff))
    done = om.ok(request)
    assert done.abort_expired_multipart_uploads.aborted == 1
    assert upload_row(om, old) is None
    assert upload_row(om, young, "young") is not None
    assert om.usage(V, B) == (8 * REPLICAS, 0)
    again = om_pb2.OMRequest()
    again.CopyFrom(request)
    fails(om, again, "NO_SUCH_MULTIPART_UPLOAD_ERROR")
    om.ok(build.abort_multipart_upload(V, B, "young", young))


# ------------------------------------------------------------- red cases ---

def test_complete_with_a_missing_part_is_invalid_part(om: Harness) -> None:
    upload_id = initiate(om)
    put_part(om, upload_id, 1, BIG)
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(1, ""), (2, "")]),
          "INVALID_PART")
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(1, "/vol1/bucket1/x/1")]),
          "INVALID_PART")
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))


def test_complete_with_parts_out_of_order_is_invalid_part_order(om: Harness) -> None:
    upload_id = initiate(om)
    put_part(om, upload_id, 1, BIG)
    put_part(om, upload_id, 2, BIG)
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(2, ""), (1, "")]),
          "INVALID_PART_ORDER")
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(1, ""), (1, "")]),
          "INVALID_PART_ORDER")
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))


def test_a_small_part_before_the_last_is_entity_too_small(om: Harness) -> None:
    upload_id = initiate(om)
    put_part(om, upload_id, 1, BIG - 1)
    put_part(om, upload_id, 2, BIG)
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(1, ""), (2, "")]),
          "ENTITY_TOO_SMALL")
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))


@pytest.mark.parametrize("number", [0, PART_NUMBER_MAX + 1])
def test_a_part_number_out_of_range_is_refused(om: Harness, number: int) -> None:
    upload_id = initiate(om)
    opened = om.ok(build.create_key(V, B, K, 5, upload_id=upload_id)).create_key
    response = fails(om, build.commit_multipart_upload(V, B, K, upload_id, number,
                                                       opened.client_session_id, 5),
                     "INVALID_REQUEST")
    assert "part_number" in response.message
    fails(om, build.complete_multipart_upload(V, B, K, upload_id, [(number, "")]),
          "INVALID_REQUEST")
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))


def test_an_unknown_upload_id_is_no_such_multipart_upload(om: Harness) -> None:
    upload_id = initiate(om)
    opened = om.ok(build.create_key(V, B, K, 5, upload_id=upload_id)).create_key
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))
    session = opened.client_session_id
    for request in (
            build.create_key(V, B, K, 5, upload_id=upload_id),
            build.commit_multipart_upload(V, B, K, upload_id, 1, session, 5),
            build.complete_multipart_upload(V, B, K, upload_id, [(1, "")]),
            build.abort_multipart_upload(V, B, K, upload_id),
            build.list_multipart_upload_parts(V, B, K, upload_id),
            build.commit_multipart_upload(V, B, "other", upload_id, 1, session, 5),
            build.abort_multipart_upload(V, B, K, "not-an-id")):
        fails(om, request, "NO_SUCH_MULTIPART_UPLOAD_ERROR")


def test_a_part_is_committed_only_as_a_part(om: Harness) -> None:
    upload_id = initiate(om)
    opened = om.ok(build.create_key(V, B, K, 5, upload_id=upload_id)).create_key
    fails(om, build.commit_key(V, B, K, opened.client_session_id, 5), "NOT_SUPPORTED_OPERATION")
    plain = om.ok(build.create_key(V, B, K, 5)).create_key
    fails(om, build.commit_multipart_upload(V, B, K, upload_id, 1, plain.client_session_id, 5),
          "KEY_NOT_FOUND")
    fails(om, build.commit_multipart_upload(V, B, K, upload_id, 1, int(upload_id), 5),
          "KEY_NOT_FOUND")
    fails(om, build.delete_bucket(V, B), "BUCKET_NOT_EMPTY")
    om.ok(build.abort_multipart_upload(V, B, K, upload_id))


def test_a_part_past_the_quota_is_refused(om: Harness) -> None:
    om.ok(build.create_bucket(V, "small", quota_in_bytes=10 * REPLICAS))
    upload_id = om.ok(build.initiate_multipart_upload(V, "small", K)
                      ).initiate_multipart_upload.upload_id
    opened = om.ok(build.create_key(V, "small", K, 10, upload_id=upload_id)).create_key
    om.ok(build.commit_multipart_upload(V, "small", K, upload_id, 1, opened.client_session_id,
                                        10))
    fails(om, build.create_key(V, "small", K, 1, upload_id=upload_id), "QUOTA_EXCEEDED")
    om.ok(build.abort_multipart_upload(V, "small", K, upload_id))


# ------------------------------------------------------- file-system buckets ---

FSB = "fsb"


def _fso_upload(om: Harness, key: str) -> tuple[str, list[tuple[int, str]]]:
    """An upload on the file-system bucket with two parts committed out of order."""
    upload_id = om.ok(build.initiate_multipart_upload(V, FSB, key)
                      ).initiate_multipart_upload.upload_id
    second = put_part(om, upload_id, 2, 100, key, FSB)
    first = put_part(om, upload_id, 1, BIG, key, FSB)
    return upload_id, [(1, first), (2, second)]


def test_on_a_file_system_bucket_complete_makes_the_file_and_its_missing_parents(
        om: Harness) -> None:
    om.ok(build.create_bucket(V, FSB, layout=FSO))
    upload_id, parts = _fso_upload(om, "a/b/c.bin")
    charged = (BIG + 100) * REPLICAS
    assert om.usage(V, FSB) == (charged, 0), "no directory before the complete"
    listed = om.ok(build.list_status(V, FSB, "")).list_status
    assert not listed.statuses, "an upload in progress is no entry of the tree"
    done = om.ok(build.complete_multipart_upload(V, FSB, "a/b/c.bin", upload_id, parts))
    info = done.complete_multipart_upload.key_info
    assert info.key_name == "a/b/c.bin"
    assert info.data_size == BIG + 100
    status = om.ok(build.get_file_status(V, FSB, "a/b/c.bin")).get_file_status.status
    assert not status.is_directory
    assert status.key_info.object_id == info.object_id
    assert om.ok(build.get_file_status(V, FSB, "a/b")).get_file_status.status.is_directory
    assert om.usage(V, FSB) == (charged, 3), "two directories made and one file"
    assert upload_row(om, upload_id, "a/b/c.bin") is None


def test_on_a_file_system_bucket_complete_replaces_a_file_and_refuses_a_directory(
        om: Harness) -> None:
    om.ok(build.create_bucket(V, FSB, layout=FSO))
    om.ok(build.create_directory(V, FSB, "d/sub"))
    upload_id, parts = _fso_upload(om, "d/sub")
    fails(om, build.complete_multipart_upload(V, FSB, "d/sub", upload_id, parts), "NOT_A_FILE")
    om.ok(build.abort_multipart_upload(V, FSB, "d/sub", upload_id))
    opened = om.ok(build.create_key(V, FSB, "d/f", 7)).create_key
    om.ok(build.commit_key(V, FSB, "d/f", opened.client_session_id, 7))
    blocked, blocked_parts = _fso_upload(om, "d/f/below")
    fails(om, build.complete_multipart_upload(V, FSB, "d/f/below", blocked, blocked_parts),
          "FILE_ALREADY_EXISTS")
    om.ok(build.abort_multipart_upload(V, FSB, "d/f/below", blocked))
    upload_id, parts = _fso_upload(om, "d/f")
    om.ok(build.complete_multipart_upload(V, FSB, "d/f", upload_id, parts))
    status = om.ok(build.get_file_status(V, FSB, "d/f")).get_file_status.status
    assert status.key_info.data_size == BIG + 100
    assert om.usage(V, FSB) == ((BIG + 100) * REPLICAS, 3), "the old file was replaced"
    assert om.store.count(om_pb2.DELETED) >= 1, "the replaced file went to deletedTable"


def test_on_a_file_system_bucket_a_path_the_tree_cannot_hold_is_refused_at_initiate(
        om: Harness) -> None:
    om.ok(build.create_bucket(V, FSB, layout=FSO))
    fails(om, build.initiate_multipart_upload(V, FSB, "a/../b"), "INVALID_KEY_NAME")


# ---------------------------------------------------------------- rights ---

def test_the_upload_requests_need_write_on_the_key(om: Harness) -> None:
    admin, carol = "admin", "carol"
    policy = AclPolicy(acl_enabled=True, admins=frozenset({admin}))
    om.ok(build.create_volume("aclv"), user=admin)
    om.ok(build.create_bucket("aclv", "bkt"), user=admin)
    upload = om.ok(build.initiate_multipart_upload("aclv", "bkt", K), user=admin)
    upload_id = upload.initiate_multipart_upload.upload_id
    session = om.ok(build.create_key("aclv", "bkt", K, 5, upload_id=upload_id),
                    user=admin).create_key.client_session_id

    def grant(obj: om_pb2.OzoneObj, rights: str) -> None:
        entries = [acls.parse(f"user:{admin}:a").to_proto(),
                   acls.parse(f"user:{carol}:{rights}").to_proto()]
        om.ok(build.set_acl(obj, entries), user=admin)

    commit = build.commit_multipart_upload("aclv", "bkt", K, upload_id, 1, session, 5)
    writes = [build.initiate_multipart_upload("aclv", "bkt", K),
              build.complete_multipart_upload("aclv", "bkt", K, upload_id, [(1, "")]),
              build.abort_multipart_upload("aclv", "bkt", K, upload_id)]
    reads = [build.list_multipart_upload_parts("aclv", "bkt", K, upload_id)]

    def decide(request: om_pb2.OMRequest) -> str:
        request.user = carol
        try:
            authorize(request, om.store, policy)
        except Exception as error:   # OMError
            return om_pb2.Status.Name(error.status)  # type: ignore[attr-defined]
        return "OK"

    grant(build.acl_object("aclv"), "r")
    grant(build.acl_object("aclv", "bkt"), "r")
    assert {decide(r) for r in writes} == {"PERMISSION_DENIED"}
    assert {decide(r) for r in reads} == {"OK"}
    grant(build.acl_object("aclv", "bkt"), "w")
    assert {decide(r) for r in writes} == {"OK"}
    assert {decide(r) for r in reads} == {"PERMISSION_DENIED"}
    assert decide(commit) == "PERMISSION_DENIED", "a part's commit needs WRITE on its open key"
    grant(build.acl_object("aclv", "bkt"), "w[DEFAULT]")   # copied into carol's part below
    carols = om.ok(build.create_key("aclv", "bkt", K, 5, upload_id=upload_id), user=admin)
    commit = build.commit_multipart_upload("aclv", "bkt", K, upload_id, 1,
                                           carols.create_key.client_session_id, 5)
    grant(build.acl_object("aclv", "bkt"), "w")
    assert decide(commit) == "OK"
    om.ok(build.abort_multipart_upload("aclv", "bkt", K, upload_id), user=admin)
