"""The tools' side of the integrity requests: one node at a time, trees and rows.

``om admin verify``, ``repair`` and ``audit`` talk to each node directly (no
leader following, except to propose a verify entry), since each node answers
for its own replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from om.client import OMClient, OMClientError
from om.client.retry_policy import RetryPolicy
from om.integrity.compare import ReplicaError
from om.integrity.remote import ask_verification
from om.protocol import om_pb2
from om.security.tls import ClientTls

ATTEMPT_S = 3.0
POLL_S = 0.2
READ_ANSWER_S = 60.0     # a level or a page of leaf rows read from a checkpoint, on a busy node
STALL_S = 120.0          # a node that has not finished reading its digests by then is given up


class NodeLink:
    """A connection to one node, for its own answers."""

    def __init__(self, address: str, tls: ClientTls | None,
                 answer_timeout_s: float = ATTEMPT_S) -> None:
        """``answer_timeout_s``: how long one answer may take (an audit takes long); a node
        that does not take the connection is given up after ``ATTEMPT_S``."""
        self.address = address
        policy = RetryPolicy(deadline_s=ATTEMPT_S, attempt_timeout_s=answer_timeout_s)
        self._client = OMClient([address], policy=policy, tls=tls)

    def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """The node's OK answer; ReplicaError when it is unreachable or refuses."""
        try:
            response = self._client.call_raw(request)
        except OMClientError as error:
            raise ReplicaError(f"{self.address} did not answer: {error}") from None
        if response.status != om_pb2.OK:
            raise ReplicaError(f"{om_pb2.Status.Name(response.status)} {response.message}")
        return response

    def close(self) -> None:
        self._client.close()


def propose_verify(addresses: list[str], tls: ClientTls | None, timeout_s: float,
                   halt_node_id: str = "") -> om_pb2.StartVerifyResponse:
    """Has the leader propose a verify entry; its position once committed (ReplicaError)."""
    policy = RetryPolicy(deadline_s=timeout_s, attempt_timeout_s=ATTEMPT_S)
    request = om_pb2.OMRequest(cmd_type=om_pb2.StartVerify, start_verify=om_pb2.StartVerifyRequest(
        halt_node_id=halt_node_id))
    try:
        with OMClient(addresses, policy=policy, tls=tls) as client:
            response = client.call_raw(request)
    except OMClientError as error:
        raise ReplicaError(f"no leader proposed the verify entry: {error}") from None
    if response.status != om_pb2.OK:
        raise ReplicaError(f"{om_pb2.Status.Name(response.status)} {response.message}")
    return response.start_verify


@dataclass(frozen=True)
class Progress:
    """A node still reading its digests, or still building them (for the progress lines)."""

    address: str
    node_id: str
    state: str
    waited_s: float


def collect_trees(links: dict[str, NodeLink], position: int, stall_s: float = STALL_S,
                  timeout_s: float | None = None,
                  on_progress: Callable[[Progress], None] = lambda progress: None,
                  ) -> dict[str, om_pb2.GetVerifyTreesResponse | str]:
    """Each address's finished (done or failed) verification at ``position``, or why not.

    A node that has not applied the entry yet, or is reading its digests, is asked
    again every ``POLL_S`` until ``stall_s`` (or ``timeout_s``, when given) passed;
    an unreachable node is given up at once.
    """
    results: dict[str, om_pb2.GetVerifyTreesResponse | str] = {}
    pending = set(links)
    started = time.monotonic()
    limit = stall_s if timeout_s is None else min(stall_s, timeout_s)
    while pending:
        waited = time.monotonic() - started
        for address in sorted(pending):
            try:
                answer = ask_verification(links[address].call, position)
            except ReplicaError as error:
                results[address] = str(error)
                pending.discard(address)
                continue
            if answer.state in (om_pb2.VERIFY_DONE, om_pb2.VERIFY_FAILED):
                results[address] = answer
                pending.discard(address)
            elif waited >= limit:
                results[address] = (f"no digests at position {position} after {limit} s "
                                    f"(state {om_pb2.VerifyState.Name(answer.state)})")
                pending.discard(address)
            else:
                on_progress(Progress(address, answer.node_id,
                                     om_pb2.VerifyState.Name(answer.state), waited))
        if pending:
            time.sleep(POLL_S)
    return results


def scrub(link: NodeLink, rows_per_s: int) -> om_pb2.ScrubReplicaResponse:
    """A whole scrub pass on the node, now (ReplicaError when it cannot)."""
    return link.call(om_pb2.OMRequest(cmd_type=om_pb2.ScrubReplica,
                                      scrub_replica=om_pb2.ScrubReplicaRequest(
                                          rows_per_s=rows_per_s))).scrub_replica
