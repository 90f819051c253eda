"""``om admin om transfer``: hand leadership to a named (``-n``) or random (``-r``)
caught-up follower, as Ozone's ``ozone admin om transfer``.

The tool finds the leader through ServiceList, sends it a TransferLeadership
request (``om/node/transfer.py`` answers it), then polls ServiceList until the
target reports itself LEADER (``--wait`` seconds at most) and prints the roles.
Exit status: 0 once the target leads, 1 on a refusal or when it does not lead
in time, 2 on a configuration error.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from om.cli.common import add_target, client_tls, render_table, target_infos
from om.client import OMClient, OMClientError
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2

POLL_S = 0.1
ANSWER_S = 8.0   # the leader answers once the target caught up (transfer.CATCH_UP_S) or not


def register(commands: Any) -> None:
    """Adds ``transfer`` under ``om admin om``."""
    transfer = commands.add_parser("transfer", help="hand leadership to a caught-up follower")
    add_target(transfer)
    whom = transfer.add_mutually_exclusive_group(required=True)
    whom.add_argument("-n", "--new-leader-id", dest="node_id", help="the follower to lead")
    whom.add_argument("-r", "--random", action="store_true",
                      help="a random caught-up follower")
    transfer.add_argument("--wait", type=float, default=10.0,
                          help="seconds to wait for the new leader to report itself")
    transfer.add_argument("--timeout", type=float, default=3.0)
    transfer.set_defaults(run=run_transfer)


def run_transfer(args: argparse.Namespace) -> int:
    """Asks the leader to transfer; waits for the new leader; prints the roles."""
    infos = target_infos(args, "om transfer")
    if infos is None:
        return 2
    leaders = [i for i in infos if i.role == "LEADER"]
    if len(leaders) != 1:
        return _fail(f"no ready leader among {[(i.node_id or i.address, i.role) for i in infos]}")
    addresses = [leaders[0].address] + [i.address for i in infos if i is not leaders[0]]
    response = _ask(addresses, args, client_tls(args, addresses))
    if response.status != om_pb2.OK:
        return _fail(f"{om_pb2.Status.Name(response.status)}: {response.message}")
    target = response.transfer_leadership.node_id
    print(f"OM:{leaders[0].node_id} sent TimeoutNow to OM:{target} at term "
          f"{response.transfer_leadership.term}")
    final = _wait_for_leader(target, addresses, args)
    print(render_table(final))
    if not any(i.node_id == target and i.role == "LEADER" for i in final):
        return _fail(f"OM:{target} did not report itself LEADER within {args.wait} s")
    return 0


def _ask(addresses: list[str], args: argparse.Namespace, tls: Any) -> om_pb2.OMResponse:
    request = om_pb2.OMRequest(
        cmd_type=om_pb2.TransferLeadership,
        transfer_leadership=om_pb2.TransferLeadershipRequest(
            node_id=args.node_id or "", random=bool(args.random)))
    policy = RetryPolicy(deadline_s=ANSWER_S + args.timeout, attempt_timeout_s=ANSWER_S)
    try:
        with OMClient(addresses, policy=policy, tls=tls) as client:
            return client.call_raw(request)
    except OMClientError as error:
        return om_pb2.OMResponse(status=om_pb2.TIMEOUT, message=f"no leader answered: {error}")


def _wait_for_leader(target: str, addresses: list[str],
                     args: argparse.Namespace) -> list[om_pb2.NodeInfo]:
    """The roles once ``target`` reports LEADER, or the last ones seen at ``--wait``."""
    deadline = time.monotonic() + args.wait
    tls = client_tls(args, addresses)
    while True:
        infos = om_cluster.node_infos(addresses, args.timeout, tls)
        if any(i.node_id == target and i.role == "LEADER" for i in infos):
            return infos
        if time.monotonic() > deadline:
            return infos
        time.sleep(POLL_S)


def _fail(message: str) -> int:
    print(f"om admin om transfer: {message}", file=sys.stderr)
    return 1
