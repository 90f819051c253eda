"""CreateBucket.

A bucket is OBJECT_STORE (flat keys; the default here, as Ozone's S3 gateway
creates them) or FILE_SYSTEM_OPTIMIZED (directories as rows: ``om/executor/fso/fs.py``;
Ozone's server default). Ozone's rules (the gate checked the names, owner, layout
and quotas): VOLUME_NOT_FOUND, BUCKET_ALREADY_EXISTS; a volume with a space
quota requires a bucket space quota (QUOTA_ERROR) and the bucket quotas must
fit in it (QUOTA_EXCEEDED); the volume's namespace (bucket count) goes up by
one, through a quota delta, so concurrent creates under the volume read lock
never lose an update. Its ACLs: the creator's defaults plus the volume's DEFAULT
entries (om/executor/acl_rows.py).
"""

from __future__ import annotations

from om.executor.acl_rows import child_acls
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso.fs import LAYOUTS
from om.executor.quota import UNLIMITED, check_volume_namespace, normalize_quota
from om.executor.rows import encode, load_volume
from om.executor.volumes.volume_buckets import sum_bucket_quotas
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def _check_space_quota(view: ReadView, volume: om_pb2.VolumeInfo, quota: int) -> None:
    if volume.quota_in_bytes == UNLIMITED:
        return
    if quota == UNLIMITED:
        raise OMError(om_pb2.QUOTA_ERROR,
                      f"Volume {volume.volume} has a space quota: the bucket needs one too")
    total = sum_bucket_quotas(view, volume.volume) + quota
    if total > volume.quota_in_bytes:
        raise OMError(om_pb2.QUOTA_EXCEEDED,
                      f"Total bucket quotas {total} would exceed the space quota "
                      f"{volume.quota_in_bytes} of volume {volume.volume}")


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.create_bucket
    layout = LAYOUTS.get(body.layout)
    assert layout is not None, "the gate refused an unknown layout"
    volume = load_volume(view, body.volume)
    key = tables.bucket_key(body.volume, body.bucket)
    if view.get(om_pb2.BUCKET, key) is not None:
        raise OMError(om_pb2.BUCKET_ALREADY_EXISTS,
                      f"Bucket '/{body.volume}/{body.bucket}' already exists")
    quota_bytes = normalize_quota(body.quota_in_bytes)
    _check_space_quota(view, volume, quota_bytes)
    check_volume_namespace(volume, ctx)
    info = om_pb2.BucketInfo(
        volume_name=body.volume,
        bucket_name=body.bucket,
        owner=body.owner or request.user,
        quota_in_bytes=quota_bytes,
        quota_in_namespace=normalize_quota(body.quota_in_namespace),
        creation_time=ctx.now_ms,
        modification_time=ctx.now_ms,
        object_id=ctx.object_id(),
        update_id=ctx.managed_index,
        layout=layout,
        acls=child_acls(request.user, volume, ctx),
    )
    recorder.put(om_pb2.BUCKET, key, encode(info))
    recorder.quota_delta(om_pb2.VOLUME, tables.volume_key(body.volume), volume.object_id, 0, 1)
    return om_pb2.OMResponse(create_bucket=om_pb2.CreateBucketResponse(bucket_info=info))
