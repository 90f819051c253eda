"""RevokeUserCertificates: every certificate of a user on record is refused from then on,
by every node once it applied this (administrators only; the rules:
om/executor/security/user_certificates.py)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.security import user_certificates
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    rows = user_certificates.revoke(request.revoke_user_certificates.user, request.user, view,
                                    recorder, ctx.now_ms)
    return om_pb2.OMResponse(
        revoke_user_certificates=om_pb2.RevokeUserCertificatesResponse(revoked=rows))
