"""RemoveAcl: clears one entry's rights from the object's ACL (Ozone's OzoneAclUtil.removeAcl).

An entry left with no rights is dropped. The response says whether anything
changed (false: none of the rights were there). The gate refused a malformed entry
(INVALID_REQUEST).
"""

from __future__ import annotations

from om.executor.acl_rows import load_target
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.protocol import acls, om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.remove_acl
    entry = acls.from_proto(body.acl)
    target = load_target(view, body.obj)
    entries, changed = acls.remove(target.acls, entry)
    target.store(entries, changed, ctx, recorder)
    return om_pb2.OMResponse(remove_acl=om_pb2.RemoveAclResponse(response=changed))
