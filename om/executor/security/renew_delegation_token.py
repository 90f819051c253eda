"""RenewDelegationToken: by the token's renewer only; the expiry moves to
min(max date, now + renew interval) (om/executor/security/tokens.py). An expired, cancelled,
forged or unknown-key token is refused (TOKEN_EXPIRED / INVALID_TOKEN)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.security import tokens
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    expiry = tokens.renew(request.user, request.renew_delegation_token.token, view, recorder,
                          ctx.now_ms, ctx.limits)
    return om_pb2.OMResponse(renew_delegation_token=om_pb2.RenewDelegationTokenResponse(
        new_expiry_time=expiry))
