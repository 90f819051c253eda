"""GetDelegationToken: a token for the request's user, signed by the current secret key
(a new key when rotation is due, from the bytes the node attached); renewer defaults to
the owner (om/executor/security/tokens.py). Only a user with a certificate gets here: the server
refuses one that authenticated with a token (INVALID_AUTH_METHOD)."""

from __future__ import annotations

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.security import tokens
from om.protocol import om_pb2
from om.schema.read_view import ReadView


def execute(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
            ctx: ExecContext) -> om_pb2.OMResponse:
    issued = tokens.issue(request, view, recorder, ctx.now_ms, ctx.managed_index, ctx.limits)
    return om_pb2.OMResponse(get_delegation_token=issued)
