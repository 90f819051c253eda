"""SetAcl: replaces the object's whole ACL (Ozone's OzoneAclUtil.setAcl).

Entries of the same (type, name, scope) are merged, so the stored list has
each once. The gate checked every entry: one malformed entry was INVALID_REQUEST
and never got here.
"""

from __future__ import annotations

from om.executor.acl_rows import load_target
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.protocol import acls, om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.set_acl
    entries = acls.add_all([], acls.from_protos(body.acl))
    target = load_target(view, body.obj)
    target.store(entries, True, ctx, recorder)
    return om_pb2.OMResponse(set_acl=om_pb2.SetAclResponse(response=True))
