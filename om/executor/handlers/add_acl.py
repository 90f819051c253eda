"""AddAcl: ORs one entry's rights into the object's ACL (Ozone's OzoneAclUtil.addAcl).

The response says whether anything changed (false: the rights were there
already; the shell prints "ACL ... already exists."). A malformed entry is
INVALID_REQUEST and writes nothing.
"""

from __future__ import annotations

from om.executor.acl_rows import load_target, request_acl
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.protocol import acls, om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.add_acl
    entry = request_acl(body.acl)
    target = load_target(view, body.obj)
    entries, changed = acls.add(target.acls, entry)
    target.store(entries, changed, ctx, recorder)
    return om_pb2.OMResponse(add_acl=om_pb2.AddAclResponse(response=changed))
