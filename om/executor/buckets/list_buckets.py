"""ListBuckets: the buckets of a volume, by prefix and exclusive start key."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.listing import list_page, page_size
from om.executor.rows import load_volume
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.list_buckets
    load_volume(view, body.volume)
    limit = page_size(body.max_keys, ctx.limits)
    values, truncated = list_page(view, om_pb2.BUCKET, tables.bucket_prefix(body.volume),
                                  body.prefix, body.start_key, limit)
    infos = [om_pb2.BucketInfo.FromString(v) for v in values]
    return om_pb2.OMResponse(
        list_buckets=om_pb2.ListBucketsResponse(bucket_info=infos, truncated=truncated))
