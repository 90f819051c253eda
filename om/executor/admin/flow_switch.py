"""The flow switch (docs/FLOW_SWITCH.md): which write types run the leader flow.

``transactionInfoTable["#FLOWS"]`` (a ``FlowSelection``) lists the write types that a
node running ``execution = "switchable"`` executes on the leader (the leader flow);
every other write type runs Ozone's old flow (replicated as a request, executed in
every node's apply). No row: no type runs the leader flow. The row is written by
``SetFlows`` (an administrator's request, one of ours, numbered 2011), a replicated
write like any other, so every node and every later leader agree on it at each log
position; the leader reads it from applied state for each write it admits
(``om/flows/leader_flow.py``), as the prepare marker is read. Apply never reads it:
each entry says by its kind how it is applied.

``SetFlows`` needs layout feature LEADER_EXECUTION (``om/executor/admin/upgrade.py``)
finalized, and always runs the leader flow itself. It is no barrier: both flows take
the same locks in one request service and hold them until their entry applied
locally, so a write routed by the old row and one routed by the new never overlap
on a row (the design's exclusive lock on every moved type is not needed).
"""

from __future__ import annotations

from collections.abc import Iterable

from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView


def unknown_types(types: frozenset[int]) -> frozenset[int]:
    """The types a selection may not name: no request type at all, or SetFlows, which
    always runs the leader flow. (That each is a write is the gate's field check,
    ``om/gatekeeper/validation.py``: this module is below the registry.)"""
    return frozenset(t for t in types
                     if t not in om_pb2.Type.values() or t == om_pb2.SetFlows)


def _sorted(types: frozenset[int]) -> list[om_pb2.Type.ValueType]:
    return [om_pb2.Type.ValueType(t) for t in sorted(types)]


def leader_types(view: ReadView) -> frozenset[int]:
    """The write types that run the leader flow at this applied state."""
    raw = view.get(om_pb2.TRANSACTION_INFO, tables.FLOWS_KEY)
    if raw is None:
        return frozenset()
    return frozenset(om_pb2.FlowSelection.FromString(raw).leader_types)


def runs_leader_flow(request: om_pb2.OMRequest, view: ReadView) -> bool:
    """Whether a switchable node's leader executes ``request`` itself."""
    return request.cmd_type == om_pb2.SetFlows or request.cmd_type in leader_types(view)


def valid_selection(selection: om_pb2.FlowSelection) -> bool:
    """Sorted, without repeats, and naming no unknown type."""
    names = list(selection.leader_types)
    return names == sorted(set(names)) and not unknown_types(frozenset(names))


def type_names(types: Iterable[int]) -> str:
    """``CommitKey,CreateKey``: names, sorted; ``(none)`` for no type."""
    return ",".join(sorted(om_pb2.Type.Name(om_pb2.Type.ValueType(t))
                           if t in om_pb2.Type.values() else str(t) for t in types)) or "(none)"


def set_flows(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
              ctx: ExecContext) -> om_pb2.OMResponse:
    """Writes the selection (sorted, without repeats); INVALID_REQUEST for SetFlows
    itself or a number that is no type."""
    wanted = frozenset(request.set_flows.leader_types)
    unknown = unknown_types(wanted)
    if unknown:
        raise OMError(om_pb2.INVALID_REQUEST,
                      f"not a write type that can switch flows: {type_names(unknown)}")
    before = leader_types(view)
    selection = om_pb2.FlowSelection(leader_types=_sorted(wanted))
    recorder.put(om_pb2.TRANSACTION_INFO, tables.FLOWS_KEY,
                 selection.SerializeToString(deterministic=True))
    return om_pb2.OMResponse(set_flows=om_pb2.SetFlowsResponse(
        leader_types=_sorted(wanted), before=_sorted(before)))


def flow_status(request: om_pb2.OMRequest, view: ReadView, recorder: ChangeRecorder,
                ctx: ExecContext) -> om_pb2.OMResponse:
    """This node's applied selection and position."""
    raw = view.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
    current = 0 if raw is None else om_pb2.TransactionInfo.FromString(raw).applied_index
    return om_pb2.OMResponse(flow_status=om_pb2.FlowStatusResponse(
        leader_types=_sorted(leader_types(view)), applied_index=current))
