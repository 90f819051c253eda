"""InfoVolume: the volume's row, or VOLUME_NOT_FOUND."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.rows import load_volume
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    info = load_volume(view, request.info_volume.volume)
    return om_pb2.OMResponse(info_volume=om_pb2.InfoVolumeResponse(volume_info=info))
