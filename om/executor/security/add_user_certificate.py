"""AddUserCertificate: records a certificate ``om admin user add`` issued (administrators
only: om/gatekeeper/authorize.py; the rules: om/executor/security/user_certificates.py)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.security import user_certificates
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    row = user_certificates.add(request.add_user_certificate, request.user, view, recorder,
                                ctx.now_ms)
    return om_pb2.OMResponse(
        add_user_certificate=om_pb2.AddUserCertificateResponse(certificate=row))
