"""DeleteBucket: BUCKET_NOT_FOUND, BUCKET_NOT_EMPTY while it holds committed keys."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.rows import load_bucket, load_volume
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.delete_bucket
    load_bucket(view, body.volume, body.bucket)
    if view.scan(om_pb2.KEY, tables.key_prefix(body.volume, body.bucket), None, 1):
        raise OMError(om_pb2.BUCKET_NOT_EMPTY,
                      f"Bucket '/{body.volume}/{body.bucket}' is not empty")
    volume = load_volume(view, body.volume)
    recorder.delete(om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket))
    recorder.quota_delta(om_pb2.VOLUME, tables.volume_key(body.volume), volume.object_id, 0, -1)
    return om_pb2.OMResponse(delete_bucket=om_pb2.DeleteBucketResponse())
