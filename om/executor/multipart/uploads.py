"""Multipart upload (Ozone's S3 multipart requests) on OBJECT_STORE buckets.

An upload lives in two rows under ``/<volume>/<bucket>/<key>/<upload id>``: its
multipartInfoTable row (``MultipartKeyInfo``: creation time, replication, the committed
parts by part number) and its openKeyTable row (the key's ACLs and object id; its
session id is the upload id, so it sits where every open row sits). The upload id is
the decimal object id the initiate was given: unique, never reused.

* InitiateMultiPartUpload: both rows. No quota yet.
* CreateKey with ``multipart_upload_id``: a part's open row (``create_part``), keyed by
  its own session like any open key; the upload must exist. Its bytes are checked
  against the quota, not charged.
* CommitMultiPartUpload: the part's open row goes, the part joins the upload's map
  under its number, and its replicated bytes are charged to the bucket's used_bytes
  (Ozone charges committed parts while the upload lives). A part committed again under
  the same number replaces the earlier, which goes to deletedTable and gives its bytes
  back: the charge is exactly what the map holds.
* CompleteMultiPartUpload: the listed parts (ascending numbers, each committed, and
  each but the last at least ``Limits.multipart_min_part_bytes``) become the key; parts
  not listed go to deletedTable and give their bytes back; the key charges one
  namespace unit (none when it replaces a key, which is retired as CommitKey retires).
* AbortMultiPartUpload and AbortExpiredMultiPartUploads (the leader's purger, past
  ``multipart_expire_s``): both rows go, every part to deletedTable, its bytes back.
* ListMultiPartUploadParts, ListMultipartUploads: reads, paged.

Locks (``om.gatekeeper.lock_plan``): the initiate and a part's CreateKey write rows
keyed by fresh ids, under the bucket's read lock only; commit, complete and abort
read-modify-write the upload's row, under the key's write lock (Ozone's OBS rule: the
part key's lock); the expiry takes each upload's key lock.

**FILE_SYSTEM_OPTIMIZED buckets.** An upload in progress is no entry of the directory
tree: its rows stay keyed by the key's path, as above, in both layouts, and no
directory is made for it before it completes (Ozone's FSO requests keep them in
openFileTable under the parent's id and create the missing parents at initiate; here a
directory renamed meanwhile does not carry the upload along: S3 names the key at
initiate). The initiate checks the path (INVALID_KEY_NAME). The complete resolves it
then and creates the file as CommitKey does (``fso_keys``): missing parents are made
(``mkdir -p``, charged to the namespace), a file there is replaced (retired), a
directory there or a file on the way is refused (NOT_A_FILE, FILE_ALREADY_EXISTS); its
locks are the slot locks of the path (``om.gatekeeper.fs_locks``) plus the key's write
lock that commit and abort take on the upload.
"""

from __future__ import annotations

import itertools

from om.executor.acl_rows import child_acls
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso import fso_keys
from om.executor.fso.fs import Resolved, components, file_not_a_directory, is_fso
from om.executor.fso.fso_rows import make_directories, with_path
from om.executor.keys.retired_keys import retire
from om.executor.listing import page_size
from om.executor.quota import check_bucket_quota, replicated_size
from om.executor.rows import encode, load_key, read_bucket
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

PART_NUMBER_MAX = 10_000        # S3's and Ozone's: part numbers are 1 to 10,000
DEFAULT_REPLICATION = 3


def load_upload(view: ReadView, volume: str, bucket: str, key: str,
                upload_id: str) -> om_pb2.MultipartKeyInfo:
    """The upload's row; NO_SUCH_MULTIPART_UPLOAD_ERROR when there is none."""
    raw = view.get(om_pb2.MULTIPART_INFO, tables.multipart_key(volume, bucket, key, upload_id))
    if raw is None:
        raise OMError(om_pb2.NO_SUCH_MULTIPART_UPLOAD_ERROR,
                      f"No multipart upload {upload_id} of key '/{volume}/{bucket}/{key}'")
    upload = om_pb2.MultipartKeyInfo.FromString(raw)
    assert upload.upload_id == upload_id
    return upload


def parts_bytes(upload: om_pb2.MultipartKeyInfo) -> int:
    """The replicated bytes the upload's committed parts charge to the bucket."""
    return sum(_part_bytes(part) for part in upload.part_key_info_list)


def _part_bytes(part: om_pb2.PartKeyInfo) -> int:
    info = part.part_key_info
    return replicated_size(info.data_size, info.replication_factor)


def _bucket_key(bucket: om_pb2.BucketInfo) -> bytes:
    return tables.bucket_key(bucket.volume_name, bucket.bucket_name)


# ------------------------------------------------------------------- writes ---

def initiate(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
             ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.initiate_multipart_upload
    bucket = read_bucket(view, body.volume, body.bucket)
    if is_fso(bucket):   # a path the complete could not place: refused now
        components(body.key, ctx.limits.key_name_max_bytes)
    assert body.replication_factor in (0, 1, DEFAULT_REPLICATION), "the gate checked it"
    replication = body.replication_factor or DEFAULT_REPLICATION
    session_id = ctx.object_id(1)
    upload_id = str(session_id)
    info = om_pb2.KeyInfo(
        volume_name=body.volume, bucket_name=body.bucket, key_name=body.key,
        replication_factor=replication, creation_time=ctx.now_ms,
        modification_time=ctx.now_ms, object_id=ctx.object_id(), update_id=ctx.managed_index,
        open_client_id=session_id, acls=child_acls(request.user, bucket, ctx),
        multipart_upload_id=upload_id)
    upload = om_pb2.MultipartKeyInfo(
        upload_id=upload_id, creation_time=ctx.now_ms, replication_factor=replication,
        object_id=info.object_id, update_id=ctx.managed_index, volume_name=body.volume,
        bucket_name=body.bucket, key_name=body.key)
    row_key = tables.multipart_key(body.volume, body.bucket, body.key, upload_id)
    assert row_key == tables.open_key_key(body.volume, body.bucket, body.key, session_id)
    recorder.put(om_pb2.OPEN_KEY, row_key, encode(info))
    recorder.put(om_pb2.MULTIPART_INFO, row_key, encode(upload))
    return om_pb2.OMResponse(initiate_multipart_upload=om_pb2.InitiateMultiPartUploadResponse(
        volume=body.volume, bucket=body.bucket, key=body.key, upload_id=upload_id))


def create_part(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext, bucket: om_pb2.BucketInfo) -> om_pb2.OMResponse:
    """CreateKey of a part: an open row of the upload's key, with the upload's replication."""
    body = request.create_key
    upload = load_upload(view, body.volume, body.bucket, body.key, body.multipart_upload_id)
    check_bucket_quota(bucket, ctx, replicated_size(body.data_size, upload.replication_factor),
                       0)
    session_id = ctx.object_id(1)
    info = om_pb2.KeyInfo(
        volume_name=body.volume, bucket_name=body.bucket, key_name=body.key,
        data_size=body.data_size, replication_factor=upload.replication_factor,
        creation_time=ctx.now_ms, modification_time=ctx.now_ms, object_id=ctx.object_id(),
        update_id=ctx.managed_index, open_client_id=session_id,
        acls=child_acls(request.user, bucket, ctx), multipart_upload_id=upload.upload_id)
    recorder.put(om_pb2.OPEN_KEY,
                 tables.open_key_key(body.volume, body.bucket, body.key, session_id),
                 encode(info))
    return om_pb2.OMResponse(
        create_key=om_pb2.CreateKeyResponse(key_info=info, client_session_id=session_id))


def commit_part(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.commit_multipart_upload
    assert 1 <= body.part_number <= PART_NUMBER_MAX, "the gate checked it"
    bucket = read_bucket(view, body.volume, body.bucket)
    upload = load_upload(view, body.volume, body.bucket, body.key, body.upload_id)
    open_key = tables.open_key_key(body.volume, body.bucket, body.key, body.client_session_id)
    raw = view.get(om_pb2.OPEN_KEY, open_key)
    info = None if raw is None else om_pb2.KeyInfo.FromString(raw)
    if (info is None or info.multipart_upload_id != body.upload_id
            or str(body.client_session_id) == body.upload_id):
        raise OMError(om_pb2.KEY_NOT_FOUND,
                      f"No open part of upload {body.upload_id} of key "
                      f"'/{body.volume}/{body.bucket}/{body.key}' in session "
                      f"{body.client_session_id}")
    info.data_size = body.data_size
    info.modification_time = ctx.now_ms
    info.update_id = ctx.managed_index
    info.open_client_id = 0
    parts = {part.part_number: part for part in upload.part_key_info_list}
    old = parts.get(body.part_number)
    bytes_delta = (replicated_size(info.data_size, info.replication_factor)
                   - (0 if old is None else _part_bytes(old)))
    check_bucket_quota(bucket, ctx, bytes_delta, 0)
    part_name = open_key.decode()
    parts[body.part_number] = om_pb2.PartKeyInfo(part_name=part_name,
                                                 part_number=body.part_number,
                                                 part_key_info=info)
    del upload.part_key_info_list[:]
    upload.part_key_info_list.extend(parts[n] for n in sorted(parts))
    upload.update_id = ctx.managed_index
    recorder.delete(om_pb2.OPEN_KEY, open_key)
    if old is not None:
        retire(recorder, old.part_key_info, ctx)
    recorder.put(om_pb2.MULTIPART_INFO, tables.multipart_key(
        body.volume, body.bucket, body.key, body.upload_id), encode(upload))
    recorder.quota_delta(om_pb2.BUCKET, _bucket_key(bucket), bucket.object_id, bytes_delta, 0)
    return om_pb2.OMResponse(commit_multipart_upload=om_pb2.CommitMultiPartUploadResponse(
        part_name=part_name))


def _chosen_parts(body: om_pb2.CompleteMultiPartUploadRequest,
                  upload: om_pb2.MultipartKeyInfo,
                  ctx: ExecContext) -> list[om_pb2.PartKeyInfo]:
    """The committed parts the complete lists, in order; Ozone's INVALID_PART_ORDER,
    INVALID_PART and ENTITY_TOO_SMALL."""
    assert 0 < len(body.parts) <= PART_NUMBER_MAX, "the gate checked it"
    for before, after in itertools.pairwise(body.parts):
        if after.part_number <= before.part_number:
            raise OMError(om_pb2.INVALID_PART_ORDER,
                          f"parts must be listed by ascending part number: "
                          f"{after.part_number} follows {before.part_number}")
    committed = {part.part_number: part for part in upload.part_key_info_list}
    chosen = []
    for n, listed in enumerate(body.parts):
        found = committed.get(listed.part_number)
        if found is None or (listed.part_name and listed.part_name != found.part_name):
            what = "was not committed" if found is None else \
                f"is {found.part_name}, not {listed.part_name}"
            raise OMError(om_pb2.INVALID_PART,
                          f"part {listed.part_number} of upload {upload.upload_id} {what}")
        size = found.part_key_info.data_size
        if n < len(body.parts) - 1 and size < ctx.limits.multipart_min_part_bytes:
            raise OMError(om_pb2.ENTITY_TOO_SMALL,
                          f"part {listed.part_number} holds {size} bytes: every part but the "
                          f"last holds at least {ctx.limits.multipart_min_part_bytes}")
        chosen.append(found)
    return chosen


def complete(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
             ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.complete_multipart_upload
    bucket = read_bucket(view, body.volume, body.bucket)
    upload = load_upload(view, body.volume, body.bucket, body.key, body.upload_id)
    chosen = _chosen_parts(body, upload, ctx)
    listed = {part.part_number for part in chosen}
    dropped = [part for part in upload.part_key_info_list if part.part_number not in listed]
    tree = _file_slot(view, body, ctx) if is_fso(bucket) else None
    if tree is None:
        old = load_key(view, body.volume, body.bucket, body.key)
        missing: tuple[str, ...] = ()
    else:
        old = tree.leaf_file if tree.complete else None
        missing = tree.parts[len(tree.parents):-1]
    row_key = tables.multipart_key(body.volume, body.bucket, body.key, body.upload_id)
    open_raw = view.get(om_pb2.OPEN_KEY, row_key)
    acls = (om_pb2.KeyInfo.FromString(open_raw).acls if open_raw is not None
            else child_acls(request.user, bucket, ctx))
    bytes_delta = (-sum(_part_bytes(part) for part in dropped)
                   - (0 if old is None else replicated_size(old.data_size,
                                                            old.replication_factor)))
    namespace_delta = (1 if old is None else 0) + len(missing)
    check_bucket_quota(bucket, ctx, bytes_delta, namespace_delta)
    info = om_pb2.KeyInfo(
        volume_name=body.volume, bucket_name=body.bucket, key_name=body.key,
        data_size=sum(part.part_key_info.data_size for part in chosen),
        replication_factor=upload.replication_factor, creation_time=ctx.now_ms,
        modification_time=ctx.now_ms, object_id=upload.object_id,
        update_id=ctx.managed_index, acls=acls)
    recorder.delete(om_pb2.MULTIPART_INFO, row_key)
    if open_raw is not None:
        recorder.delete(om_pb2.OPEN_KEY, row_key)
    for part in dropped:
        retire(recorder, part.part_key_info, ctx)
    if tree is None:
        if old is not None:
            retire(recorder, old, ctx)
        recorder.put(om_pb2.KEY, tables.key_key(body.volume, body.bucket, body.key),
                     encode(info))
    else:
        info = _put_file(recorder, tree, old, missing, info, request.user, bucket, ctx)
    recorder.quota_delta(om_pb2.BUCKET, _bucket_key(bucket), bucket.object_id, bytes_delta,
                         namespace_delta)
    return om_pb2.OMResponse(complete_multipart_upload=om_pb2.CompleteMultiPartUploadResponse(
        key_info=info))


def _file_slot(view: ReadView, body: om_pb2.CompleteMultiPartUploadRequest,
               ctx: ExecContext) -> Resolved:
    """The completed key's place in a file-system bucket's tree: a file may be there
    (it is replaced), directories on the way may be missing (they are made); a
    directory there is NOT_A_FILE, a file on the way FILE_ALREADY_EXISTS."""
    resolved = fso_keys.target(view, body.volume, body.bucket, body.key, ctx,
                               "CompleteMultiPartUpload").resolved
    if resolved.blocked:
        raise file_not_a_directory(resolved)
    if resolved.complete and resolved.leaf_dir is not None:
        raise OMError(om_pb2.NOT_A_FILE, f"'{resolved.path}' is a directory, not a file")
    return resolved


def _put_file(recorder: ChangeRecorder, tree: Resolved, old: om_pb2.KeyInfo | None,
              missing: tuple[str, ...], info: om_pb2.KeyInfo, user: str,
              bucket: om_pb2.BucketInfo, ctx: ExecContext) -> om_pb2.KeyInfo:
    """Records the completed upload as the file of ``tree``'s path, its missing parents
    made with the request's ids; returns the answer's key info (whole path)."""
    if old is not None:
        retire(recorder, with_path(old, tree.path), ctx)
    parent_id = make_directories(recorder, tree.ids, tree.parent_id, missing, user, bucket,
                                 ctx)
    info.key_name = tree.name
    info.parent_object_id = parent_id
    recorder.put(om_pb2.FILE, tree.ids.key(parent_id, tree.name), encode(info))
    return with_path(info, tree.path)


def _abort(view: ReadView, recorder: ChangeRecorder, upload: om_pb2.MultipartKeyInfo,
           ctx: ExecContext) -> None:
    """Records the upload's rows going and its parts retired, their bytes released."""
    row_key = tables.multipart_key(upload.volume_name, upload.bucket_name, upload.key_name,
                                   upload.upload_id)
    recorder.delete(om_pb2.MULTIPART_INFO, row_key)
    if view.get(om_pb2.OPEN_KEY, row_key) is not None:
        recorder.delete(om_pb2.OPEN_KEY, row_key)
    for part in upload.part_key_info_list:
        retire(recorder, part.part_key_info, ctx)
    raw = view.get(om_pb2.BUCKET, tables.bucket_key(upload.volume_name, upload.bucket_name))
    if raw is not None:
        bucket = om_pb2.BucketInfo.FromString(raw)
        recorder.quota_delta(om_pb2.BUCKET, _bucket_key(bucket), bucket.object_id,
                             -parts_bytes(upload), 0)


def abort(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
          ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.abort_multipart_upload
    read_bucket(view, body.volume, body.bucket)
    upload = load_upload(view, body.volume, body.bucket, body.key, body.upload_id)
    _abort(view, recorder, upload, ctx)
    return om_pb2.OMResponse(abort_multipart_upload=om_pb2.AbortMultiPartUploadResponse())


UPLOADS_MAX = 1_000   # uploads one expiry step may name (the gate's rule): its locks stay few


def abort_expired(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                  ctx: ExecContext) -> om_pb2.OMResponse:
    """AbortExpiredMultiPartUploads (the leader's own): aborts each named upload still
    there and initiated at or before the cutoff; a rerun aborts nothing twice (with
    nothing left it answers NO_SUCH_MULTIPART_UPLOAD_ERROR and writes nothing)."""
    body = request.abort_expired_multipart_uploads
    assert 0 < len(body.uploads) <= UPLOADS_MAX, "the gate bounds an expiry step"
    aborted = 0
    for ref in dict.fromkeys((u.volume, u.bucket, u.key, u.upload_id) for u in body.uploads):
        raw = view.get(om_pb2.MULTIPART_INFO, tables.multipart_key(*ref))
        if raw is None:
            continue
        upload = om_pb2.MultipartKeyInfo.FromString(raw)
        if upload.creation_time <= body.created_before_ms:
            _abort(view, recorder, upload, ctx)
            aborted += 1
    if aborted == 0:
        raise OMError(om_pb2.NO_SUCH_MULTIPART_UPLOAD_ERROR,
                      "no upload named is there and past the cutoff")
    return om_pb2.OMResponse(abort_expired_multipart_uploads=(
        om_pb2.AbortExpiredMultiPartUploadsResponse(aborted=aborted)))


# -------------------------------------------------------------------- reads ---

def list_parts(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
               ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.list_multipart_upload_parts
    read_bucket(view, body.volume, body.bucket)
    upload = load_upload(view, body.volume, body.bucket, body.key, body.upload_id)
    limit = page_size(body.max_parts, ctx.limits)
    after = [part for part in upload.part_key_info_list
             if part.part_number > body.part_number_marker]
    page = after[:limit]
    parts = [om_pb2.PartInfo(part_number=part.part_number, part_name=part.part_name,
                             modification_time=part.part_key_info.modification_time,
                             size=part.part_key_info.data_size) for part in page]
    return om_pb2.OMResponse(list_multipart_upload_parts=om_pb2.ListMultiPartUploadPartsResponse(
        replication_factor=upload.replication_factor,
        next_part_number_marker=page[-1].part_number if page else 0,
        truncated=len(after) > limit, parts=parts))


def list_uploads(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                 ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.list_multipart_uploads
    read_bucket(view, body.volume, body.bucket)
    limit = page_size(body.max_uploads, ctx.limits)
    scope = tables.key_prefix(body.volume, body.bucket)
    start_after = (scope + f"{body.key_marker}/{body.upload_id_marker}".encode()
                   if body.key_marker or body.upload_id_marker else None)
    rows = view.scan(om_pb2.MULTIPART_INFO, scope + body.prefix.encode(), start_after,
                     limit + 1)
    uploads = []
    for _, raw in rows[:limit]:
        upload = om_pb2.MultipartKeyInfo.FromString(raw)
        uploads.append(om_pb2.MultipartUploadInfo(
            volume=upload.volume_name, bucket=upload.bucket_name, key=upload.key_name,
            upload_id=upload.upload_id, creation_time=upload.creation_time,
            replication_factor=upload.replication_factor))
    truncated = len(rows) > limit
    response = om_pb2.ListMultipartUploadsResponse(uploads=uploads, truncated=truncated)
    if truncated:
        response.next_key_marker = uploads[-1].key
        response.next_upload_id_marker = uploads[-1].upload_id
    return om_pb2.OMResponse(list_multipart_uploads=response)
