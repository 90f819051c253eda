"""The leader's side of ``om admin om add|decommission``: ChangeMembership requests.

Answered by the node outside the request flows (like TransferLeadership): the
leader asks Raft (``om/consensus/pysyncobj/membership.py``) to add or remove
one voter, and answers once the configuration entry is committed. Refusals are
statuses with a message: INVALID_REQUEST (no op, no address), PERMISSION_DENIED
(ACLs on and not an OM administrator), NOT_SUPPORTED_OPERATION (a one-node
ring, which has no Raft), NOT_LEADER / LEADER_NOT_READY (ask the leader),
MEMBERSHIP_REFUSED (unsafe now: quorum, the leader itself, a change pending),
TIMEOUT. A refusal changes nothing.

**Idempotent by request id.** A request with a ``request_id`` starts its change
as a task on the node's loop that outlives the client's call, and the node
records its outcome (``Ledger``, the last ``RECORDED`` ids). A resend of the
same id starts nothing: it waits for that change (at most ``wait_s``) and
answers its recorded outcome, committed or refused, with ``replayed`` set; still
pending, it answers TIMEOUT saying so (ask again). A leader that has no record
of the id (leadership moved) starts the change, and Raft's answer that the ring
is already as asked (``IN_EFFECT``) is then OK with ``replayed``: the earlier
request committed. Raft's own timeout is not recorded, so a resend asks Raft
again. Without a request id (an old client) nothing is recorded and a change
already in effect is refused, as before.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
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
           "IN_EFFECT": om_pb2.MEMBERSHIP_REFUSED, "TIMEOUT": om_pb2.TIMEOUT}
RECORDED = 256         # request ids whose outcome a node keeps
WAIT_S = 30.0          # how long an answer waits for its change (then: still pending)
RAFT_WAIT_S = 120.0    # how long a recorded change waits for Raft's answer
Outcome = tuple[str, str]   # (code, message) as Raft answered


class ChangingMembership(Protocol):
    """What a Raft replicator offers for membership changes."""

    async def change_membership(self, op: str, address: str,
                                timeout_s: float = 30.0) -> tuple[str, str]: ...

    def members(self) -> list[str]: ...

    def role(self) -> Role: ...


class Ledger:
    """The membership changes a node started by request id, and their outcomes."""

    def __init__(self, keep: int = RECORDED) -> None:
        self._keep = keep
        self._changes: OrderedDict[str, tuple[str, str, asyncio.Task[Outcome]]] = \
            OrderedDict()

    def find(self, request_id: str) -> tuple[str, str, asyncio.Task[Outcome]] | None:
        """(op, address, the change's task) of a recorded id, or None."""
        return self._changes.get(request_id)

    def start(self, request_id: str, op: str, address: str,
              raft: ChangingMembership) -> asyncio.Task[Outcome]:
        """Starts the change as a task that outlives the client's call, and records it."""
        task = asyncio.ensure_future(raft.change_membership(op, address, RAFT_WAIT_S))
        self._changes[request_id] = (op, address, task)
        task.add_done_callback(lambda done: self._settled(request_id, done))
        while len(self._changes) > self._keep:
            oldest = next(iter(self._changes))
            if not self._changes[oldest][2].done():
                break
            del self._changes[oldest]
        return task

    def _settled(self, request_id: str, task: asyncio.Task[Outcome]) -> None:
        """Forgets a change Raft never answered: a resend asks Raft again."""
        if task.cancelled() or task.exception() is not None or task.result()[0] == "TIMEOUT":
            self._changes.pop(request_id, None)


async def answer(request: om_pb2.OMRequest, config: ServerConfig,
                 raft: ChangingMembership | None, ledger: Ledger | None = None,
                 wait_s: float = WAIT_S) -> om_pb2.OMResponse:
    """The leader's answer to a ChangeMembership request (see the module's docstring)."""
    problem = _problem(request, config, raft)
    if problem is not None:
        return problem
    assert raft is not None
    body = request.change_membership
    op = _OPS[body.op]
    if not body.request_id or ledger is None:
        code, message = await raft.change_membership(op, body.raft_address)
        return _response(request, config, raft, code, message, replayed=False)
    recorded = ledger.find(body.request_id)
    if recorded is not None and recorded[:2] != (op, body.raft_address):
        return error_response(request, om_pb2.INVALID_REQUEST,
                              f"request id {body.request_id!r} was used for the {recorded[0]} "
                              f"of {recorded[1]}; a new change needs a new id")
    task = recorded[2] if recorded is not None else ledger.start(
        body.request_id, op, body.raft_address, raft)
    try:
        code, message = await asyncio.wait_for(asyncio.shield(task), wait_s)
    except TimeoutError:
        return error_response(request, om_pb2.TIMEOUT,
                              f"{op} of OM:{body.node_id} ({body.raft_address}) is still "
                              f"pending after {wait_s} s; ask again with request id "
                              f"{body.request_id!r} for its outcome")
    if code == "IN_EFFECT":
        code, message = "OK", f"already in effect ({message})"
        return _response(request, config, raft, code, message, replayed=True)
    return _response(request, config, raft, code, message, replayed=recorded is not None)


def _response(request: om_pb2.OMRequest, config: ServerConfig, raft: ChangingMembership,
              code: str, message: str, replayed: bool) -> om_pb2.OMResponse:
    body = request.change_membership
    op = _OPS[body.op]
    if code == "NOT_LEADER":
        return not_leader_response(request, config.node_id, raft.role())
    if code != "OK":
        again = " (the recorded outcome of this request id)" if replayed else ""
        return error_response(request, _STATUS.get(code, om_pb2.MEMBERSHIP_REFUSED),
                              f"{op} of OM:{body.node_id} ({body.raft_address}) refused"
                              f"{again}: {message}")
    return om_pb2.OMResponse(
        cmd_type=request.cmd_type, status=om_pb2.OK, call_id=request.call_id,
        message=message if replayed else "",
        change_membership=om_pb2.ChangeMembershipResponse(
            members=raft.members(), term=raft.role().term, replayed=replayed))


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
