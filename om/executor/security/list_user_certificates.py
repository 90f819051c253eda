"""ListUserCertificates: the certificates on record, by user then serial, a page at a time
(administrators only; om/executor/security/user_certificates.py)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.security import user_certificates
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    page = user_certificates.list_page(request.list_user_certificates, view)
    return om_pb2.OMResponse(list_user_certificates=page)
