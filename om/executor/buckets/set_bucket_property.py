"""SetBucketProperty: quotas.

Ozone's rules: a new space quota must cover the bytes in use and, with the
other buckets' quotas, fit the volume's space quota; a new namespace quota must
cover the keys in use (QUOTA_EXCEEDED). The caller holds the bucket write lock,
so no commit is in flight and ``used_*`` are final.
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.quota import UNLIMITED, normalize_quota
from om.executor.rows import encode, load_bucket, load_volume
from om.executor.volumes.volume_buckets import sum_bucket_quotas
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def _check_space(view: ReadView, bucket: om_pb2.BucketInfo, quota: int) -> None:
    volume = load_volume(view, bucket.volume_name)
    if quota == UNLIMITED:
        if volume.quota_in_bytes != UNLIMITED:
            raise OMError(om_pb2.QUOTA_ERROR,
                          f"Volume {volume.volume} has a space quota: the bucket needs one too")
        return
    if quota < bucket.used_bytes:
        raise OMError(om_pb2.QUOTA_EXCEEDED,
                      f"Space quota {quota} is less than the {bucket.used_bytes} bytes in use")
    if volume.quota_in_bytes != UNLIMITED:
        others = sum_bucket_quotas(view, volume.volume) - max(bucket.quota_in_bytes, 0)
        if others + quota > volume.quota_in_bytes:
            raise OMError(om_pb2.QUOTA_EXCEEDED,
                          f"Total bucket quotas {others + quota} would exceed the space quota "
                          f"{volume.quota_in_bytes} of volume {volume.volume}")


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.set_bucket_property
    info = load_bucket(view, body.volume, body.bucket)
    if body.quota_in_bytes:
        quota = normalize_quota(body.quota_in_bytes)
        _check_space(view, info, quota)
        info.quota_in_bytes = quota
    if body.quota_in_namespace:
        quota = normalize_quota(body.quota_in_namespace)
        if quota != UNLIMITED and quota < info.used_namespace:
            raise OMError(om_pb2.QUOTA_EXCEEDED,
                          f"Namespace quota {quota} is less than the {info.used_namespace} "
                          "keys in use")
        info.quota_in_namespace = quota
    info.modification_time = ctx.now_ms
    info.update_id = ctx.managed_index
    recorder.put(om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket), encode(info))
    return om_pb2.OMResponse(
        set_bucket_property=om_pb2.SetBucketPropertyResponse(bucket_info=info))
