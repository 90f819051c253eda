"""RenameKey: KEY_ALREADY_EXISTS, then KEY_NOT_FOUND (Ozone's order; the gate checked both
names, INVALID_KEY_NAME).

The key keeps its object id; its update id and modification time change.
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso import fso_keys
from om.executor.fso.fs import is_fso
from om.executor.rows import encode, load_key, read_bucket, require_key
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.rename_key
    if is_fso(read_bucket(view, body.volume, body.bucket)):
        return fso_keys.rename_key(request, view, recorder, ctx)
    if load_key(view, body.volume, body.bucket, body.to_key) is not None:
        raise OMError(om_pb2.KEY_ALREADY_EXISTS,
                      f"Key '/{body.volume}/{body.bucket}/{body.to_key}' already exists")
    info = require_key(view, body.volume, body.bucket, body.key)
    info.key_name = body.to_key
    info.modification_time = ctx.now_ms
    info.update_id = ctx.managed_index
    recorder.move(om_pb2.KEY, tables.key_key(body.volume, body.bucket, body.key),
                  om_pb2.KEY, tables.key_key(body.volume, body.bucket, body.to_key),
                  encode(info))
    return om_pb2.OMResponse(rename_key=om_pb2.RenameKeyResponse(key_info=info))
