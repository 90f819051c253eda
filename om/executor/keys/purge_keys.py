"""PurgeKeys (Ozone's type 81; the leader's own request): deletedTable rows go.

The leader's purger (``om.flows.purge``) names rows it found past their retention
and the cutoff it used; this removes each row that is still there and whose every
version was deleted at or before the cutoff. Nothing else reads or writes a
deletedTable row once written (its key holds a never-reused object id), so the
request needs no lock, and a step that runs twice (a retry, a new leader
computing it again) removes nothing twice: a row already gone is skipped, and a
step with nothing left to remove answers KEY_NOT_FOUND and writes nothing.

A row a live OM snapshot of its bucket still holds stays (``snapshots.held_by_snapshot``:
the version was created before the snapshot and retired after it); it goes once that
snapshot is deleted.
"""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.executor.om_snapshots import snapshots
from om.protocol import om_pb2
from om.schema.read_view import ReadView

ROWS_MAX = 10_000   # rows one purge step may name (the gate's rule): it stays one small batch


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.purge_keys
    assert 0 < len(body.keys) <= ROWS_MAX, "the gate bounds a purge"
    purged = 0
    for key in dict.fromkeys(body.keys):
        raw = view.get(om_pb2.DELETED, key)
        if raw is None:
            continue
        versions = list(om_pb2.RepeatedKeyInfo.FromString(raw).key_info)
        if all(v.deletion_time <= body.retired_before_ms for v in versions) and not \
                snapshots.held_by_snapshot(view, versions[0].volume_name,
                                           versions[0].bucket_name, versions):
            recorder.delete(om_pb2.DELETED, key)
            purged += 1
    if purged == 0:
        raise OMError(om_pb2.KEY_NOT_FOUND, "no row named is there and past the cutoff")
    return om_pb2.OMResponse(purge_keys=om_pb2.PurgeKeysResponse(purged=purged))
