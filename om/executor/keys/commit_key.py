"""CommitKey: moves an open key to keyTable and charges the bucket's quota.

Ozone's rules: a missing open key is KEY_NOT_FOUND. The key charges its
replicated size and, when it is new, one namespace unit (QUOTA_EXCEEDED when
that passes a quota, counting in-flight reservations). Overwriting a key moves
the old version to deletedTable under its object id and releases its bytes.
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso import fso_keys
from om.executor.fso.fs import is_fso
from om.executor.keys.retired_keys import retire
from om.executor.quota import check_bucket_quota, replicated_size
from om.executor.rows import encode, load_key, read_bucket
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def _open_key(view: ReadView, body: om_pb2.CommitKeyRequest) -> om_pb2.KeyInfo:
    raw = view.get(om_pb2.OPEN_KEY, tables.open_key_key(
        body.volume, body.bucket, body.key, body.client_session_id))
    if raw is None:
        raise OMError(om_pb2.KEY_NOT_FOUND,
                      f"Open key '/{body.volume}/{body.bucket}/{body.key}' of session "
                      f"{body.client_session_id} not found")
    info = om_pb2.KeyInfo.FromString(raw)
    assert info.open_client_id == body.client_session_id
    if info.multipart_upload_id:
        raise OMError(om_pb2.NOT_SUPPORTED_OPERATION,
                      f"session {body.client_session_id} of '/{body.volume}/{body.bucket}/"
                      f"{body.key}' belongs to multipart upload {info.multipart_upload_id}: "
                      "commit it with CommitMultiPartUpload")
    return info


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.commit_key
    bucket = read_bucket(view, body.volume, body.bucket)
    if is_fso(bucket):
        return fso_keys.commit_key(request, view, recorder, ctx)
    info = _open_key(view, body)
    old = load_key(view, body.volume, body.bucket, body.key)
    new_bytes = replicated_size(body.data_size, info.replication_factor)
    old_bytes = 0 if old is None else replicated_size(old.data_size, old.replication_factor)
    namespace_delta = 1 if old is None else 0
    check_bucket_quota(bucket, ctx, new_bytes - old_bytes, namespace_delta)

    info.data_size = body.data_size
    info.modification_time = ctx.now_ms
    info.update_id = ctx.managed_index
    info.open_client_id = 0
    recorder.delete(om_pb2.OPEN_KEY, tables.open_key_key(
        body.volume, body.bucket, body.key, body.client_session_id))
    if old is not None:
        retire(recorder, old, ctx)
    recorder.put(om_pb2.KEY, tables.key_key(body.volume, body.bucket, body.key), encode(info))
    recorder.quota_delta(om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket),
                         bucket.object_id, new_bytes - old_bytes, namespace_delta)
    return om_pb2.OMResponse(commit_key=om_pb2.CommitKeyResponse(key_info=info))
