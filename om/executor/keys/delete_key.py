"""DeleteKey: moves the key to deletedTable and releases its quota.

KEY_NOT_FOUND when missing. The version is retired to deletedTable
(``retired_keys``). The bucket gets back the key's replicated bytes
and one namespace unit at once: there are no datanodes or snapshots here to
keep the blocks alive, so nothing is held as pending-delete usage.
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.fso import fso_keys
from om.executor.fso.fs import is_fso
from om.executor.keys.retired_keys import retire
from om.executor.quota import replicated_size
from om.executor.rows import read_bucket, require_key
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.delete_key
    bucket = read_bucket(view, body.volume, body.bucket)
    if is_fso(bucket):
        return fso_keys.delete_key(request, view, recorder, ctx)
    if body.recursive:
        raise OMError(om_pb2.NOT_SUPPORTED_OPERATION,
                      "a recursive delete needs a FILE_SYSTEM_OPTIMIZED bucket: an "
                      "OBJECT_STORE bucket has no directories")
    info = require_key(view, body.volume, body.bucket, body.key)
    recorder.delete(om_pb2.KEY, tables.key_key(body.volume, body.bucket, body.key))
    retire(recorder, info, ctx)
    recorder.quota_delta(om_pb2.BUCKET, tables.bucket_key(body.volume, body.bucket),
                         bucket.object_id,
                         -replicated_size(info.data_size, info.replication_factor), -1)
    return om_pb2.OMResponse(delete_key=om_pb2.DeleteKeyResponse(key_info=info))
