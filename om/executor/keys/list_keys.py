"""ListKeys: committed keys of a bucket by prefix, exclusive start key, max keys; a prefix
``.snapshot/<name>/...`` lists that OM snapshot's (om/executor/om_snapshots/snapshots.py)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.fso import fso_keys
from om.executor.fso.fs import is_fso
from om.executor.listing import list_page, page_size
from om.executor.om_snapshots import snapshots
from om.executor.rows import read_bucket
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.list_keys
    if body.prefix.startswith(snapshots.SNAPSHOT_PREFIX):
        return snapshots.list_in_snapshot(request, view, recorder, ctx, execute)
    if is_fso(read_bucket(view, body.volume, body.bucket)):
        return fso_keys.list_keys(request, view, recorder, ctx)
    limit = page_size(body.max_keys, ctx.limits)
    values, truncated = list_page(view, om_pb2.KEY, tables.key_prefix(body.volume, body.bucket),
                                  body.prefix, body.start_key, limit)
    infos = [om_pb2.KeyInfo.FromString(v) for v in values]
    return om_pb2.OMResponse(
        list_keys=om_pb2.ListKeysResponse(key_info=infos, truncated=truncated))
