"""CreateVolume: VOLUME_ALREADY_EXISTS, quotas normalised; the owner's default ACLs
(om/executor/acl_rows.py). The gate checked the name, owner and quotas."""

from __future__ import annotations

from om.executor.acl_rows import volume_acls
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.quota import normalize_quota
from om.executor.rows import encode
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.create_volume
    key = tables.volume_key(body.volume)
    if view.get(om_pb2.VOLUME, key) is not None:
        raise OMError(om_pb2.VOLUME_ALREADY_EXISTS, f"Volume '{body.volume}' already exists")
    owner = body.owner or request.user
    info = om_pb2.VolumeInfo(
        admin_name=request.user,
        owner_name=owner,
        volume=body.volume,
        quota_in_bytes=normalize_quota(body.quota_in_bytes),
        quota_in_namespace=normalize_quota(body.quota_in_namespace),
        creation_time=ctx.now_ms,
        modification_time=ctx.now_ms,
        object_id=ctx.object_id(),
        update_id=ctx.managed_index,
        acls=volume_acls(owner, ctx),
    )
    recorder.put(om_pb2.VOLUME, key, encode(info))
    return om_pb2.OMResponse(create_volume=om_pb2.CreateVolumeResponse(volume_info=info))
