"""The leader's side of ``om admin om transfer``: TransferLeadership requests.

Answered by the node outside the request flows (like ServiceList): the node
that leads checks the target against the ring and asks Raft
(``om/consensus/pysyncobj/transfer.py``) to hand leadership over; it answers OK
once Raft's TimeoutNow has gone to the target, not once the target leads (the
tool polls ServiceList for that). Refusals are statuses with a message:
INVALID_REQUEST (no such node), TRANSFER_REFUSED (itself, not connected, not
caught up, a transfer already pending), NOT_LEADER / LEADER_NOT_READY (ask the
leader), NOT_SUPPORTED_OPERATION (a one-node ring), PERMISSION_DENIED (ACLs on
and not an OM administrator). A refusal changes nothing: no entry was held
(or the held ones are appended again) and leadership stays.
"""

from __future__ import annotations

from typing import Protocol

from om.config import ServerConfig
from om.consensus.port import Role
from om.executor.registry import error_response
from om.flows.template import not_leader_response
from om.protocol import om_pb2

_STATUS = {"REFUSED": om_pb2.TRANSFER_REFUSED, "NOT_UP_TO_DATE": om_pb2.TRANSFER_REFUSED,
           "TIMEOUT": om_pb2.TIMEOUT}


class Transferring(Protocol):
    """What a Raft replicator offers for an aimed transfer."""

    async def transfer_leadership_to(self, target: str,
                                     timeout_s: float = 10.0) -> tuple[str, str, str]: ...

    def role(self) -> Role: ...


async def answer(request: om_pb2.OMRequest, config: ServerConfig,
                 raft: Transferring | None) -> om_pb2.OMResponse:
    """The leader's answer to a TransferLeadership request (see the module's docstring)."""
    problem = _problem(request, config, raft)
    if problem is not None:
        return problem
    assert raft is not None
    body = request.transfer_leadership
    by_id = {n.id: n for n in config.nodes}
    target = "" if body.random else by_id[body.node_id].raft_address
    role = raft.role()
    code, chosen, message = await raft.transfer_leadership_to(target)
    if code == "NOT_LEADER":
        return not_leader_response(request, config.node_id, raft.role())
    if code != "OK":
        return error_response(request, _STATUS.get(code, om_pb2.TRANSFER_REFUSED),
                              f"leadership transfer to {_name(config, chosen)} refused: "
                              f"{message}")
    return om_pb2.OMResponse(
        cmd_type=request.cmd_type, status=om_pb2.OK, call_id=request.call_id,
        transfer_leadership=om_pb2.TransferLeadershipResponse(
            node_id=_name(config, chosen), term=role.term))


def _problem(request: om_pb2.OMRequest, config: ServerConfig,
             raft: Transferring | None) -> om_pb2.OMResponse | None:
    """A refusal decided before Raft is asked, or None."""
    body = request.transfer_leadership
    if request.WhichOneof("body") != "transfer_leadership" or (body.random == bool(body.node_id)):
        return error_response(request, om_pb2.INVALID_REQUEST,
                              "TransferLeadership needs either a node_id or random")
    refused = ring_admin_refusal(request, config, raft is not None,
                                 "a one-node ring has no one to hand leadership to")
    if refused is not None or raft is None:
        return refused
    ids = [n.id for n in config.nodes]
    if not body.random and body.node_id not in ids:
        return error_response(request, om_pb2.INVALID_REQUEST,
                              f"no OM {body.node_id!r} in the ring ({', '.join(ids)})")
    role = raft.role()
    if not role.ready:
        return not_leader_response(request, config.node_id, role)
    if body.node_id == config.node_id:
        return error_response(request, om_pb2.TRANSFER_REFUSED,
                              f"OM:{config.node_id} is the leader already")
    return None


def ring_admin_refusal(request: om_pb2.OMRequest, config: ServerConfig, has_raft: bool,
                       one_node: str) -> om_pb2.OMResponse | None:
    """What refuses every change to the ring (a transfer, a membership change) before
    Raft is asked: not an OM administrator (with ACLs on), or a one-node ring."""
    if config.acl_enabled and request.user not in config.admins:
        return error_response(request, om_pb2.PERMISSION_DENIED,
                              f"user {request.user!r} is not an OM administrator")
    if not has_raft:
        return error_response(request, om_pb2.NOT_SUPPORTED_OPERATION, one_node)
    return None


def _name(config: ServerConfig, raft_address: str) -> str:
    """The node id of a Raft address (the address itself when unknown)."""
    for node in config.nodes:
        if node.raft_address == raft_address:
            return node.id
    return raft_address
