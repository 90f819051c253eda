"""DeleteVolume: VOLUME_NOT_FOUND, VOLUME_NOT_EMPTY while it holds buckets."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.rows import load_volume
from om.executor.volumes.volume_buckets import has_buckets
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    volume = request.delete_volume.volume
    load_volume(view, volume)
    if has_buckets(view, volume):
        raise OMError(om_pb2.VOLUME_NOT_EMPTY, f"Volume '{volume}' is not empty")
    recorder.delete(om_pb2.VOLUME, tables.volume_key(volume))
    return om_pb2.OMResponse(delete_volume=om_pb2.DeleteVolumeResponse())
