"""CancelDelegationToken: by the token's owner or renewer; its row is marked cancelled
and every later use is refused (om/executor/security/tokens.py)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.security import tokens
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    tokens.cancel(request.user, request.cancel_delegation_token.token, view, recorder)
    return om_pb2.OMResponse(cancel_delegation_token=om_pb2.CancelDelegationTokenResponse())
