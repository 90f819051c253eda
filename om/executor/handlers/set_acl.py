"""SetAcl: replaces the object's whole ACL (Ozone's OzoneAclUtil.setAcl).

Entries of the same (type, name, scope) are merged, so the stored list has
each once. Every entry is checked before anything is written: one malformed
entry is INVALID_REQUEST and the ACL stays as it was.
"""

from __future__ import annotations

from om.executor.acl_rows import load_target, request_acl
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.protocol import acls, om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.set_acl
    entries = acls.add_all([], [request_acl(message) for message in body.acl])
    target = load_target(view, body.obj)
    target.store(entries, True, ctx, recorder)
    return om_pb2.OMResponse(set_acl=om_pb2.SetAclResponse(response=True))
