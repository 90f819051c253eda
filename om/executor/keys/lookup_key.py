"""LookupKey: the committed key's row, or KEY_NOT_FOUND; ``.snapshot/<name>/<key>``: the
key in that OM snapshot (om/executor/om_snapshots/snapshots.py)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.fso import fso_keys
from om.executor.fso.fs import is_fso
from om.executor.om_snapshots import snapshots
from om.executor.rows import read_bucket, require_key
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.lookup_key
    if body.key.startswith(snapshots.SNAPSHOT_PREFIX):
        return snapshots.lookup_in_snapshot(request, view, recorder, ctx, execute)
    if is_fso(read_bucket(view, body.volume, body.bucket)):
        return fso_keys.lookup_key(request, view, recorder, ctx)
    info = require_key(view, body.volume, body.bucket, body.key)
    return om_pb2.OMResponse(lookup_key=om_pb2.LookupKeyResponse(key_info=info))
