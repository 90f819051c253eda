"""The leader's side of ``om admin om add|decommission``: ChangeMembership requests.

Answered by the node outside the request flows (like TransferLeadership): the
leader asks Raft (``om/consensus/pysyncobj/membership.py``) to add or remove
one voter, and answers once the configuration entry is committed. Refusals are
statuses with a message: INVALID_REQUEST (no op, no address), PERMISSION_DENIED
(ACLs on and not an OM administrator), NOT_SUPPORTED_OPERATION (a one-node
ring, which has no Raft), NOT_LEADER / LEADER_NOT_READY (ask the leader),
MEMBERSHIP_REFUSED (unsafe now: quorum, the leader itself, a change pending),
TIMEOUT. A refusal changes nothing.
"""

from __future__ import annotations

from typing import Protocol

from om.config import ServerConfig
from om.consensus.port import Role
from om.executor.registry import error_response
from om.flows.template import not_leader_response
from om.node.transfer import ring_admin_refusal
from om.protocol import om_pb2

_OPS = {om_pb2.ChangeMembershipRequest.ADD: "add",
        om_pb2.ChangeMembershipRequest.REMOVE: "remove"}
_STATUS = {"REFUSED": om_pb2.MEMBERSHIP_REFUSED, "FAILED": om_pb2.MEMBERSHIP_REFUSED,
           "TIMEOUT": om_pb2.TIMEOUT}


class ChangingMembership(Protocol):
    """What a Raft replicator offers for membership changes."""

    async def change_membership(self, op: str, address: str,
                                timeout_s: float = 30.0) -> tuple[str, str]: ...

    def members(self) -> list[str]: ...

    def role(self) -> Role: ...


async def answer(request: om_pb2.OMRequest, config: ServerConfig,
                 raft: ChangingMembership | None) -> om_pb2.OMResponse:
    """The leader's answer to a ChangeMembership request (see the module's docstring)."""
    problem = _problem(request, config, raft)
    if problem is not None:
        return problem
    assert raft is not None
    body = request.change_membership
    op = _OPS[body.op]
    code, message = await raft.change_membership(op, body.raft_address)
    if code == "NOT_LEADER":
        return not_leader_response(request, config.node_id, raft.role())
    if code != "OK":
        return error_response(request, _STATUS.get(code, om_pb2.MEMBERSHIP_REFUSED),
                              f"{op} of OM:{body.node_id} ({body.raft_address}) refused: "
                              f"{message}")
    return om_pb2.OMResponse(
        cmd_type=request.cmd_type, status=om_pb2.OK, call_id=request.call_id,
        change_membership=om_pb2.ChangeMembershipResponse(members=raft.members(),
                                                          term=raft.role().term))


def _problem(request: om_pb2.OMRequest, config: ServerConfig,
             raft: ChangingMembership | None) -> om_pb2.OMResponse | None:
    """A refusal decided before Raft is asked, or None."""
    body = request.change_membership
    if (request.WhichOneof("body") != "change_membership" or body.op not in _OPS
            or not body.raft_address or not body.node_id):
        return error_response(request, om_pb2.INVALID_REQUEST,
                              "ChangeMembership needs an op (ADD or REMOVE), a node_id and "
                              "a raft_address")
    refused = ring_admin_refusal(request, config, raft is not None,
                                 "a one-node ring runs no Raft; start it as a cluster to "
                                 "change its membership")
    if refused is not None or raft is None:
        return refused
    if body.node_id in config.decommissioned and body.op == om_pb2.ChangeMembershipRequest.ADD:
        return error_response(request, om_pb2.MEMBERSHIP_REFUSED,
                              f"OM:{body.node_id} was decommissioned and never rejoins under "
                              "that id")
    role = raft.role()
    if not role.ready:
        return not_leader_response(request, config.node_id, role)
    return None
