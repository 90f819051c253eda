"""SetVolumeProperty: owner and quotas.

Ozone's rules: a space quota may not fall below the sum of the volume's bucket
quotas, nor a namespace quota below the number of buckets (QUOTA_EXCEEDED).
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.quota import UNLIMITED, normalize_quota
from om.executor.rows import encode, load_volume
from om.executor.volumes.volume_buckets import sum_bucket_quotas
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.set_volume_property
    info = load_volume(view, body.volume)
    if body.quota_in_bytes:
        quota = normalize_quota(body.quota_in_bytes)
        if quota != UNLIMITED:
            total = sum_bucket_quotas(view, body.volume)
            if total > quota:
                raise OMError(om_pb2.QUOTA_EXCEEDED,
                              f"Space quota {quota} of volume {body.volume} is less than the "
                              f"sum of its bucket quotas {total}")
        info.quota_in_bytes = quota
    if body.quota_in_namespace:
        quota = normalize_quota(body.quota_in_namespace)
        if quota != UNLIMITED and quota < info.used_namespace:
            raise OMError(om_pb2.QUOTA_EXCEEDED,
                          f"Namespace quota {quota} of volume {body.volume} is less than its "
                          f"{info.used_namespace} buckets")
        info.quota_in_namespace = quota
    if body.owner:
        info.owner_name = body.owner
    info.modification_time = ctx.now_ms
    info.update_id = ctx.managed_index
    recorder.put(om_pb2.VOLUME, tables.volume_key(body.volume), encode(info))
    return om_pb2.OMResponse(
        set_volume_property=om_pb2.SetVolumePropertyResponse(volume_info=info))
