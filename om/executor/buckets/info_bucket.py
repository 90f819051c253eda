"""InfoBucket: the bucket's row, or VOLUME_NOT_FOUND / BUCKET_NOT_FOUND."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.rows import load_bucket
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.info_bucket
    info = load_bucket(view, body.volume, body.bucket)
    return om_pb2.OMResponse(info_bucket=om_pb2.InfoBucketResponse(bucket_info=info))
