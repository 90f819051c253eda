"""CreateKey: opens a key for writing (a row of openKeyTable).

Ozone's OBS rules: VOLUME_NOT_FOUND / BUCKET_NOT_FOUND; the bucket's space
quota is checked against the expected replicated size and its namespace
against one more key, without consuming either (CommitKey charges). The open
key is keyed by a session id unique to this request, so CreateKey takes no key
lock and concurrent writers of one key never collide. Its ACLs: the creator's
defaults plus the bucket's DEFAULT entries (om/executor/acl_rows.py); CommitKey
keeps them. With ``multipart_upload_id`` it opens a part of that upload instead
(``om.executor.multipart.uploads.create_part``).
"""

from __future__ import annotations

from om.executor.acl_rows import child_acls
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.fso import fso_keys
from om.executor.fso.fs import is_fso
from om.executor.multipart import uploads
from om.executor.quota import check_bucket_quota, replicated_size
from om.executor.rows import encode, read_bucket
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

DEFAULT_REPLICATION = 3
MAX_REPLICATION = 3


def _replication(requested: int) -> int:
    """The factor a request asks for (the gate let through 0, 1 or 3); 0 is the default."""
    assert requested in (0, 1, MAX_REPLICATION)
    return requested or DEFAULT_REPLICATION


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.create_key
    replication = _replication(body.replication_factor)
    bucket = read_bucket(view, body.volume, body.bucket)
    if body.multipart_upload_id:
        return uploads.create_part(request, view, recorder, ctx, bucket)
    if is_fso(bucket):
        return fso_keys.create_key(request, view, recorder, ctx)
    check_bucket_quota(bucket, ctx, replicated_size(body.data_size, replication), 1)
    session_id = ctx.object_id(1)
    info = om_pb2.KeyInfo(
        volume_name=body.volume,
        bucket_name=body.bucket,
        key_name=body.key,
        data_size=body.data_size,
        replication_factor=replication,
        creation_time=ctx.now_ms,
        modification_time=ctx.now_ms,
        object_id=ctx.object_id(),
        update_id=ctx.managed_index,
        open_client_id=session_id,
        acls=child_acls(request.user, bucket, ctx),
    )
    recorder.put(om_pb2.OPEN_KEY,
                 tables.open_key_key(body.volume, body.bucket, body.key, session_id),
                 encode(info))
    return om_pb2.OMResponse(
        create_key=om_pb2.CreateKeyResponse(key_info=info, client_session_id=session_id))
