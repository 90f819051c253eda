"""DeleteBucket: BUCKET_NOT_FOUND, BUCKET_NOT_EMPTY while it holds committed keys or a
multipart upload in progress (Ozone refuses a bucket with incomplete uploads: their
parts' bytes are charged to it), CONTAINS_SNAPSHOT while it has OM snapshots (Ozone's)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso.fs import is_fso
from om.executor.rows import load_bucket, load_volume
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

FS_TABLES = (om_pb2.DIRECTORY, om_pb2.FILE, om_pb2.OPEN_FILE, om_pb2.DELETED_DIRECTORY)


def _empty(view: ReadView, volume: om_pb2.VolumeInfo, bucket: om_pb2.BucketInfo) -> bool:
    """No committed key, or for a file-system bucket no directory, file, open file or
    subtree waiting for its purge."""
    prefix = tables.key_prefix(bucket.volume_name, bucket.bucket_name)
    if view.scan(om_pb2.MULTIPART_INFO, prefix, None, 1):
        return False
    if not is_fso(bucket):
        return not view.scan(om_pb2.KEY, prefix, None, 1)
    scope = f"/{volume.object_id}/{bucket.object_id}/".encode()
    return not any(view.scan(table, scope, None, 1) for table in FS_TABLES)


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.delete_bucket
    bucket = load_bucket(view, body.volume, body.bucket)
    volume = load_volume(view, body.volume)
    if view.scan(om_pb2.SNAPSHOT_INFO, tables.snapshot_prefix(body.volume, body.bucket), None, 1):
        raise OMError(om_pb2.CONTAINS_SNAPSHOT, f"Bucket '/{body.volume}/{body.bucket}' has "
                      "snapshots: delete them first (om sh snapshot delete)")
    if not _empty(view, volume, bucket):
        raise OMError(om_pb2.BUCKET_NOT_EMPTY,
                      f"Bucket '/{body.volume}/{body.bucket}' is not empty")
    recorder.delete(om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket))
    recorder.quota_delta(om_pb2.VOLUME, tables.volume_key(body.volume), volume.object_id, 0, -1)
    return om_pb2.OMResponse(delete_bucket=om_pb2.DeleteBucketResponse())
