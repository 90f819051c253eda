"""``om admin om prepare | cancelprepare | finalizeupgrade | finalizationstatus``: getting a
cluster ready for new software and turning on what it brings, as Ozone's
``ozone admin om prepare -id <service>`` and friends (om/executor/admin/upgrade.py has the
rules; docs/operations/upgrade.md, the procedure).

* ``prepare`` sends Prepare to the leader (writes stop; those in flight drain first),
  then asks every node, as it has applied, until each reports PREPARE_COMPLETED at
  the same index (``--wait`` seconds at most), and prints them. Exit 0 once all are.
* ``cancelprepare`` lifts it: writes are accepted again.
* ``finalizeupgrade`` turns on every layout feature of the software, then waits until
  every node reports ALREADY_FINALIZED.
* ``finalizationstatus`` prints each node's layout versions and features.
* ``flow set TYPES`` (once LEADER_EXECUTION is finalized, on OMs running
  ``execution = "switchable"``): the named write types run the leader flow from then on,
  every other the old flow (``all``: every write type; ``none``: none); waits until
  every node applied it. ``flow status`` prints each node's selection
  (om/executor/admin/flow_switch.py, docs/FLOW_SWITCH.md).

The tool acts as its certificate's user, who must be an OM administrator for the three
writes. Exit status: 0 done, 1 refused or not every node got there in time, 2 a
configuration error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from om.cli.common import add_target, client_tls, targets
from om.client import OMClient, OMClientError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.config import ConfigError
from om.executor.admin import flow_switch, upgrade
from om.executor.registry import KINDS
from om.protocol import om_pb2
from om.security.tls import ClientTls

POLL_S = 0.2


def register(commands: Any) -> None:
    """Adds the four commands and ``flow`` under ``om admin om``."""
    helps = {
        "prepare": "stop writes and compact every node's log, ready for new software",
        "cancelprepare": "accept writes again after a prepare",
        "finalizeupgrade": "turn on every layout feature of the running software",
        "finalizationstatus": "each node's layout versions and features",
    }
    for name, text in helps.items():
        parser = commands.add_parser(name, help=text)
        add_target(parser)
        parser.add_argument("-id", "--service-id", dest="service_id", default="",
                            help="the OM service (accepted for Ozone's shape; the target "
                                 "flags name the cluster)")
        parser.add_argument("--timeout", type=float, default=3.0,
                            help="seconds per attempt to reach a node")
        parser.add_argument("--wait", type=float, default=60.0,
                            help="seconds to wait for every node to report the new state")
        if name == "prepare":
            parser.add_argument("--drain-timeout", type=int, default=0,
                                help="seconds the leader waits for the writes in flight "
                                     f"(0: {upgrade.DRAIN_TIMEOUT_S})")
        parser.set_defaults(run=_RUNS[name])
    _register_flow(commands)


def _register_flow(commands: Any) -> None:
    flow = commands.add_parser("flow", help="which write types run the leader flow (the "
                               "flow switch)").add_subparsers(dest="flow_action", required=True)
    for name, text in (("set", "these write types run the leader flow, the others the old "
                                "flow"), ("status", "each node's selection")):
        parser = flow.add_parser(name, help=text)
        add_target(parser)
        parser.add_argument("--timeout", type=float, default=3.0,
                            help="seconds per attempt to reach a node")
        if name == "set":
            parser.add_argument("types", help="comma-separated write types (CreateKey,"
                                "CommitKey), 'all' or 'none'")
            parser.add_argument("--wait", type=float, default=60.0,
                                help="seconds to wait for every node to apply it")
        parser.set_defaults(run=run_flow_set if name == "set" else run_flow_status)


def _setup(args: argparse.Namespace, command: str) -> tuple[list[str], ClientTls | None] | None:
    try:
        addresses = targets(args)
        return addresses, client_tls(args, addresses)
    except ConfigError as error:
        print(f"om admin om {command}: {error}", file=sys.stderr)
        return None


def _call(addresses: list[str], tls: ClientTls | None, request: om_pb2.OMRequest,
          args: argparse.Namespace, answer_s: float) -> om_pb2.OMResponse:
    """The cluster's answer (the client follows the leader), or TIMEOUT."""
    policy = RetryPolicy(deadline_s=answer_s + args.timeout + 30.0, attempt_timeout_s=answer_s)
    try:
        with OMClient(addresses, policy=policy, tls=tls) as client:
            return client.call_raw(request)
    except OMClientError as error:
        return om_pb2.OMResponse(status=om_pb2.TIMEOUT, message=f"no leader answered: {error}")


def _each_node(addresses: list[str], tls: ClientTls | None, make: Any,
               args: argparse.Namespace) -> dict[str, om_pb2.OMResponse | None]:
    """Each node's own answer to a local read (None: it did not answer)."""
    answers: dict[str, om_pb2.OMResponse | None] = {}
    policy = RetryPolicy(deadline_s=args.timeout, attempt_timeout_s=args.timeout)
    for address in addresses:
        request = make()
        request.local_read = True
        try:
            with OMClient([address], policy=policy, tls=tls) as client:
                answers[address] = client.call_raw(request)
        except OMClientError:
            answers[address] = None
    return answers


def _fail(command: str, message: str) -> int:
    print(f"om admin om {command}: {message}", file=sys.stderr)
    return 1


def _refused(response: om_pb2.OMResponse) -> str:
    return f"{om_pb2.Status.Name(response.status)}: {response.message}"


def _node_lines(answers: dict[str, om_pb2.OMResponse | None],
                describe: Callable[[om_pb2.OMResponse], list[str]]) -> list[str]:
    """A line or more per OM: what ``describe`` reads in its answer, or why it gave none."""
    lines = []
    for address, answer in answers.items():
        if answer is None or answer.status != om_pb2.OK:
            lines.append(f"  {address}: no answer" if answer is None
                         else f"  {address}: {_refused(answer)}")
        else:
            lines.extend(f"  {address}: {line}" if n == 0 else f"      {line}"
                         for n, line in enumerate(describe(answer)))
    return lines


def _prepared(answer: om_pb2.OMResponse) -> list[str]:
    body = answer.prepare_status
    return [f"{om_pb2.PrepareState.Name(body.status)}"
            + (f" at index {body.prepare_index}" if body.prepare_index else "")
            + f" (applied index {body.current_index})"]


def run_prepare(args: argparse.Namespace) -> int:
    setup = _setup(args, "prepare")
    if setup is None:
        return 2
    addresses, tls = setup
    drain = args.drain_timeout or upgrade.DRAIN_TIMEOUT_S
    response = _call(addresses, tls, build.prepare(args.drain_timeout), args, drain + 10.0)
    if response.status != om_pb2.OK:
        return _fail("prepare", f"OM preparation failed: {_refused(response)}")
    index = response.prepare.prepare_index
    already = " (it was prepared already)" if response.prepare.already_prepared else ""
    print(f"OM preparation: the leader prepared at index {index}{already}; waiting for "
          f"every OM to apply it")
    done, answers = _until_all(
        addresses, tls, build.prepare_status, args,
        lambda a: (a.prepare_status.status == om_pb2.PREPARE_COMPLETED
                   and a.prepare_status.prepare_index == index))
    print("\n".join(_node_lines(answers, _prepared)))
    if not done:
        return _fail("prepare", f"not every OM reported PREPARE_COMPLETED within {args.wait} s "
                                "(the cluster refuses writes all the same; a lagging OM "
                                "prepares once it catches up)")
    print("OM preparation successful: every OM is prepared; writes are refused until "
          "om admin om cancelprepare")
    return 0


def run_cancel_prepare(args: argparse.Namespace) -> int:
    setup = _setup(args, "cancelprepare")
    if setup is None:
        return 2
    addresses, tls = setup
    response = _call(addresses, tls, build.cancel_prepare(), args, args.timeout + 5.0)
    if response.status != om_pb2.OK:
        return _fail("cancelprepare", f"cancel failed: {_refused(response)}")
    if response.cancel_prepare.was_prepared:
        print("OM prepare cancelled: writes are accepted again")
    else:
        print("the OM was not prepared: nothing to cancel")
    return 0


def _layout(answer: om_pb2.OMResponse) -> list[str]:
    body = answer.finalize_upgrade_progress
    return [f"{om_pb2.FinalizationState.Name(body.status)} (metadata layout "
            f"{body.metadata_layout_version}, software layout "
            f"{body.software_layout_version})", *body.features]


def _until_all(addresses: list[str], tls: ClientTls | None,
               request: Callable[[], om_pb2.OMRequest],
               args: argparse.Namespace, reached: Callable[[om_pb2.OMResponse], bool]
               ) -> tuple[bool, dict[str, om_pb2.OMResponse | None]]:
    """Asks every OM until each answers OK and ``reached``, or ``args.wait`` passed;
    whether they all did, and the last answers."""
    deadline = time.monotonic() + args.wait
    while True:
        answers = _each_node(addresses, tls, request, args)
        done = all(a is not None and a.status == om_pb2.OK and reached(a)
                   for a in answers.values())
        if done or time.monotonic() > deadline:
            return done, answers
        time.sleep(POLL_S)


def run_finalize(args: argparse.Namespace) -> int:
    setup = _setup(args, "finalizeupgrade")
    if setup is None:
        return 2
    addresses, tls = setup
    response = _call(addresses, tls, build.finalize_upgrade("om-admin"), args,
                     args.timeout + 5.0)
    if response.status != om_pb2.OK:
        return _fail("finalizeupgrade", f"finalization failed: {_refused(response)}")
    body = response.finalize_upgrade
    print(f"{om_pb2.FinalizationState.Name(body.status)}: layout "
          f"{body.metadata_layout_version} of {body.software_layout_version}")
    for message in body.messages:
        print(f"  {message}")
    done, answers = _until_all(
        addresses, tls, build.finalize_upgrade_progress, args,
        lambda a: a.finalize_upgrade_progress.status == om_pb2.ALREADY_FINALIZED)
    print("\n".join(_node_lines(answers, _layout)))
    if not done:
        return _fail("finalizeupgrade", f"not every OM reported ALREADY_FINALIZED within "
                                        f"{args.wait} s (a lagging OM finalizes once it "
                                        "catches up)")
    print("every OM is finalized")
    return 0


def run_finalization_status(args: argparse.Namespace) -> int:
    return _status_of_each(args, "finalizationstatus", build.finalize_upgrade_progress, _layout)


def flow_types(text: str) -> list[int]:
    """The types ``om admin om flow set`` names: ``all``, ``none`` or names; ValueError
    for a name that is no write type."""
    if text == "all":
        return sorted(t for t, kind in KINDS.items() if kind.write and t != om_pb2.SetFlows)
    if text == "none":
        return []
    types: list[int] = []
    for name in filter(None, (n.strip() for n in text.split(","))):
        try:
            types.append(om_pb2.Type.Value(name))
        except ValueError:
            raise ValueError(f"no request type {name!r}") from None
    return types


def _flows(answer: om_pb2.OMResponse) -> list[str]:
    body = answer.flow_status
    return [f"leader flow: {flow_switch.type_names(body.leader_types)} (applied index "
            f"{body.applied_index}); every other write type: the old flow"]


def run_flow_set(args: argparse.Namespace) -> int:
    setup = _setup(args, "flow set")
    if setup is None:
        return 2
    addresses, tls = setup
    try:
        types = flow_types(args.types)
    except ValueError as error:
        print(f"om admin om flow set: {error}", file=sys.stderr)
        return 2
    response = _call(addresses, tls, build.set_flows(types), args, args.timeout + 5.0)
    if response.status != om_pb2.OK:
        return _fail("flow set", f"the switch failed: {_refused(response)}")
    body = response.set_flows
    wanted = list(body.leader_types)
    print(f"leader flow: {flow_switch.type_names(body.before)} -> "
          f"{flow_switch.type_names(wanted)}; waiting for every OM to apply it")
    done, answers = _until_all(addresses, tls, build.flow_status, args,
                               lambda a: list(a.flow_status.leader_types) == wanted)
    print("\n".join(_node_lines(answers, _flows)))
    if not done:
        return _fail("flow set", f"not every OM applied it within {args.wait} s (the "
                                 "leader routes by it already; a lagging OM applies it once "
                                 "it catches up)")
    print("every OM applied the switch")
    return 0


def run_flow_status(args: argparse.Namespace) -> int:
    return _status_of_each(args, "flow status", build.flow_status, _flows)


def _status_of_each(args: argparse.Namespace, command: str, request: Any,
                    line: Callable[[om_pb2.OMResponse], list[str]]) -> int:
    """Asks every OM with ``request`` and prints one ``line`` each; 0 when all answered OK."""
    setup = _setup(args, command)
    if setup is None:
        return 2
    addresses, tls = setup
    answers = _each_node(addresses, tls, request, args)
    print("\n".join(_node_lines(answers, line)))
    return 0 if all(a is not None and a.status == om_pb2.OK for a in answers.values()) else 1


_RUNS = {"prepare": run_prepare, "cancelprepare": run_cancel_prepare,
         "finalizeupgrade": run_finalize, "finalizationstatus": run_finalization_status}
