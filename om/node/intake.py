"""What a node does with the frames a client connection delivered, wherever it is served.

``Intake`` is the ``FrameSink`` of the node's own connections (``workers = 1``,
``om.node.rpc``) and of the connections its front workers serve
(``om.node.front_pool``): the same rules either way. For each frame, in order:

1. parse: not an OMRequest -> INVALID_REQUEST (the connection lives on);
2. identity: with a client certificate, refused with UNAUTHORIZED (and audited)
   when this node applied its revocation (``Node.certificate_refusal``: looked up
   once per read of the connection, so a revocation holds from the next read on);
   else the user it names (a request that claims another user is
   PERMISSION_DENIED, and audited) and the groups its OU entries name
   (``OMRequest.groups``, which only a certificate sets: a client's own value is
   dropped); without one, on a TLS port that takes delegation tokens, the token's
   owner (``Node.token_user``); the token never reaches the flows;
3. the node answers it (``Node.submit``), now or later; the answer is framed for
   the client (one over the frame limit becomes INVALID_REQUEST).

Every frame gets exactly one reply frame (``Requester.deliver``).
"""

from __future__ import annotations

import asyncio
from functools import partial

from google.protobuf.message import DecodeError

from om.executor.registry import KINDS
from om.node.connections import Requester, invalid_frame, status_frame
from om.node.node import Node
from om.protocol import om_pb2
from om.protocol.framing import encode_frame
from om.security.tls import PeerIdentity, claimed_user_problem


class Intake:
    """Parses, authenticates and submits client requests; frames their answers."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._max_frame_bytes = node.config.limits.max_frame_bytes
        # TLS admits clients without a certificate: each request must carry a token
        self._token_auth = node.tokens_enabled

    def __call__(self, connection: Requester, frames: list[bytes]) -> None:
        """Steps 1-3 for each frame, in order."""
        node = self._node
        identity = connection.identity
        revoked = None if identity is None else node.certificate_refusal(identity)
        for frame in frames:
            try:
                request = om_pb2.OMRequest.FromString(frame)
            except DecodeError:
                connection.deliver(invalid_frame("frame is not an OMRequest"))
                continue
            kind = KINDS.get(request.cmd_type)
            if kind is not None and kind.internal:
                connection.deliver(invalid_frame(
                    f"{kind.name} is the leader's own request; a client may not send it",
                    request.call_id))
                continue
            if identity is not None:
                if not self._certified(connection, request, identity, revoked):
                    continue
            else:
                if request.groups:
                    request.ClearField("groups")     # only a certificate names groups
                if self._token_auth and not self._token_user(connection, request):
                    continue
            if request.HasField("token"):
                request.ClearField("token")   # authenticated: the flows never see it
            node.submit(request, connection.peer).add_done_callback(
                partial(self._answered, connection, request.call_id))

    def _certified(self, connection: Requester, request: om_pb2.OMRequest,
                   identity: PeerIdentity, revoked: str | None) -> bool:
        """Sets the user and groups of a request on a connection with a certificate;
        False (answered and audited) when the certificate was revoked or the request
        claims another user."""
        problem = claimed_user_problem(request.user, identity.user)
        status = om_pb2.PERMISSION_DENIED
        if revoked is not None:
            problem, status = revoked, om_pb2.UNAUTHORIZED
        if problem is not None:
            connection.deliver(status_frame(status, problem, request.call_id))
            request.user = request.user or identity.user
            self._node.audit_refused(request, connection.peer, problem,
                                     om_pb2.Status.Name(status))
            return False
        request.user = identity.user
        if identity.groups or request.groups:
            request.ClearField("groups")
            request.groups.extend(identity.groups)
        return True

    def _token_user(self, connection: Requester, request: om_pb2.OMRequest) -> bool:
        """Sets the user of a request on a connection without a certificate from its
        delegation token; False (answered, and audited unless sent to the leader) when
        the token does not stand."""
        verdict = self._node.token_user(request)
        if isinstance(verdict, str):
            if request.user in ("", verdict):
                request.user = verdict
                return True
            verdict = om_pb2.OMResponse(
                cmd_type=request.cmd_type, status=om_pb2.PERMISSION_DENIED,
                call_id=request.call_id, message=f"User '{request.user}' is not the owner "
                f"'{verdict}' of the delegation token: a request may not act for another user")
        connection.deliver(self.frame(request.call_id, verdict))
        if verdict.status not in (om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY):
            self._node.audit_refused(request, connection.peer, verdict.message,
                                     om_pb2.Status.Name(verdict.status))
        return False

    def _answered(self, connection: Requester, call_id: int,
                  answer: asyncio.Future[om_pb2.OMResponse]) -> None:
        if answer.cancelled():    # a node-level task stopped at shutdown
            connection.deliver(status_frame(om_pb2.LEADER_NOT_READY,
                                            "the OM is shutting down; retry", call_id))
        else:
            connection.deliver(self.frame(call_id, answer.result()))

    def frame(self, call_id: int, response: om_pb2.OMResponse) -> bytes:
        """The response as a frame, or INVALID_REQUEST when it is over the limit."""
        payload = response.SerializeToString()
        if len(payload) + 4 > self._max_frame_bytes:
            return invalid_frame("response over the frame limit; ask for fewer keys", call_id)
        return encode_frame(payload, self._max_frame_bytes)
