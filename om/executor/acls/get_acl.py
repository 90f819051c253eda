"""GetAcl: the object's ACL entries, in their stored order."""

from __future__ import annotations

from om.executor.acl_rows import load_target
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    target = load_target(view, request.get_acl.obj)
    return om_pb2.OMResponse(get_acl=om_pb2.GetAclResponse(acls=target.row.acls))
