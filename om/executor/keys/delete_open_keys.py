"""DeleteOpenKeys (Ozone's open-key cleanup; the leader's own request).

A key or file opened (CreateKey, CreateFile) and never committed holds an open
row forever unless something removes it. The leader's purger (``om.flows.purge``)
names rows created at or before a cutoff; this removes each that is still open
and that old. No lock: an open row is keyed by its session id, written once by
its create and removed by its commit or by this; if a commit of the same session
runs in the same batch, both remove the same row, and the commit's key stands.
Open rows hold no quota (a key is charged when committed), so nothing is
released. A row already gone is skipped: running a step twice is harmless (with
nothing left to remove it answers KEY_NOT_FOUND and writes nothing).
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.keys.purge_keys import ROWS_MAX
from om.protocol import om_pb2
from om.schema.read_view import ReadView

OPEN_TABLES = (om_pb2.OPEN_KEY, om_pb2.OPEN_FILE)


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.delete_open_keys
    assert 0 < len(body.open_keys) <= ROWS_MAX, "the gate bounds a cleanup"
    assert all(ref.table in OPEN_TABLES for ref in body.open_keys), "the gate checked tables"
    deleted = 0
    for table, key in dict.fromkeys((ref.table, ref.key) for ref in body.open_keys):
        raw = view.get(table, key)
        if raw is None:
            continue
        info = om_pb2.KeyInfo.FromString(raw)
        if info.multipart_upload_id == str(info.open_client_id):
            continue   # an upload's own row: it goes with its upload (AbortExpiredMultiPartUploads)
        if info.creation_time <= body.created_before_ms:
            recorder.delete(table, key)
            deleted += 1
    if deleted == 0:
        raise OMError(om_pb2.KEY_NOT_FOUND, "no open row named is there and past the cutoff")
    return om_pb2.OMResponse(delete_open_keys=om_pb2.DeleteOpenKeysResponse(deleted=deleted))
