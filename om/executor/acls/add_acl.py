"""AddAcl: ORs one entry's rights into the object's ACL (Ozone's OzoneAclUtil.addAcl).

The response says whether anything changed (false: the rights were there
already; the shell prints "ACL ... already exists."). The gate refused a malformed
entry (INVALID_REQUEST); an entry that would make the ACL longer than
``acls.ENTRIES_MAX`` is INVALID_REQUEST here and writes nothing.
"""

from __future__ import annotations

from om.executor.acl_rows import load_target
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.protocol import acls, om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    body = request.add_acl
    entry = acls.from_proto(body.acl)
    target = load_target(view, body.obj)
    entries, changed = acls.add(target.acls, entry)
    if len(entries) > acls.ENTRIES_MAX:
        raise OMError(om_pb2.INVALID_REQUEST, f"add_acl.acl: the object holds "
                      f"{acls.ENTRIES_MAX} ACL entries already, the most it may")
    target.store(entries, changed, ctx, recorder)
    return om_pb2.OMResponse(add_acl=om_pb2.AddAclResponse(response=changed))
