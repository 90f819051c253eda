"""The tools' side of the integrity requests: one node at a time, trees and rows.

``om admin verify``, ``repair`` and ``audit`` talk to each node directly (no
leader following, except to propose a verify entry), since each node answers
for its own replica.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from om.client import OMClient, OMClientError
from om.client.retry_policy import RetryPolicy
from om.integrity import merkle
from om.integrity.compare import ReplicaError
from om.integrity.merkle import KeyRange, MerkleTree
from om.protocol import om_pb2
from om.security.tls import ClientTls

ATTEMPT_S = 3.0
POLL_S = 0.2
PAGE_ROWS = 5000


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
                   rows_per_s: int = 0, halt_node_id: str = "") -> om_pb2.StartVerifyResponse:
    """Has the leader propose a verify entry; its position once committed (ReplicaError)."""
    policy = RetryPolicy(deadline_s=timeout_s, attempt_timeout_s=ATTEMPT_S)
    request = om_pb2.OMRequest(cmd_type=om_pb2.StartVerify, start_verify=om_pb2.StartVerifyRequest(
        rows_per_s=rows_per_s, halt_node_id=halt_node_id))
    try:
        with OMClient(addresses, policy=policy, tls=tls) as client:
            response = client.call_raw(request)
    except OMClientError as error:
        raise ReplicaError(f"no leader proposed the verify entry: {error}") from None
    if response.status != om_pb2.OK:
        raise ReplicaError(f"{om_pb2.Status.Name(response.status)} {response.message}")
    return response.start_verify


def verify_trees(link: NodeLink, position: int,
                 tables: tuple[str, ...] = ()) -> om_pb2.GetVerifyTreesResponse:
    """The node's state (and roots, and ``tables``' trees) at ``position``."""
    return link.call(om_pb2.OMRequest(
        cmd_type=om_pb2.GetVerifyTrees,
        get_verify_trees=om_pb2.GetVerifyTreesRequest(position=position, tables=tables))
    ).get_verify_trees


def collect_trees(links: dict[str, NodeLink], position: int,
                  timeout_s: float) -> dict[str, om_pb2.GetVerifyTreesResponse | str]:
    """Each address's finished (done or failed) verification at ``position``, or why not.

    A node that has not applied the entry yet, or is computing, is asked again
    until ``timeout_s``; an unreachable one is given up at once.
    """
    results: dict[str, om_pb2.GetVerifyTreesResponse | str] = {}
    pending = set(links)
    deadline = time.monotonic() + timeout_s
    while pending:
        for address in sorted(pending):
            try:
                answer = verify_trees(links[address], position)
            except ReplicaError as error:
                results[address] = str(error)
                pending.discard(address)
                continue
            if answer.state in (om_pb2.VERIFY_DONE, om_pb2.VERIFY_FAILED):
                results[address] = answer
                pending.discard(address)
        if pending and time.monotonic() >= deadline:
            for address in pending:
                results[address] = f"no trees at position {position} within {timeout_s} s"
            break
        if pending:
            time.sleep(POLL_S)
    return results


def roots_of(answer: om_pb2.GetVerifyTreesResponse) -> dict[str, bytes]:
    """Table -> root of a finished verification."""
    return {root.table: root.root for root in answer.roots}


@dataclass
class RpcReplica:
    """A node's trees and checkpoint rows at one position, over RPC (``compare.Replica``)."""

    node_id: str
    link: NodeLink
    position: int

    def tree(self, table: str) -> MerkleTree:
        answer = verify_trees(self.link, self.position, (table,))
        found = [tree for tree in answer.trees.trees if tree.table == table]
        if answer.state != om_pb2.VERIFY_DONE or not found:
            raise ReplicaError(f"{self.node_id} has no tree of {table} at {self.position}")
        try:
            return merkle.from_proto(found[0])
        except ValueError as error:
            raise ReplicaError(f"{self.node_id}'s tree of {table}: {error}") from None

    def rows(self, key_range: KeyRange) -> list[tuple[bytes, bytes]]:
        rows: list[tuple[bytes, bytes]] = []
        while True:
            body = om_pb2.ReadVerifyRangeRequest(position=self.position, table=key_range.table,
                                                 start=key_range.start, max_rows=PAGE_ROWS)
            if key_range.end is not None:
                body.end = key_range.end
            if rows:
                body.start_after = rows[-1][0]
            page = self.link.call(om_pb2.OMRequest(cmd_type=om_pb2.ReadVerifyRange,
                                                   read_verify_range=body)).read_verify_range
            rows += [(row.key, row.value) for row in page.rows]
            if not page.truncated or not page.rows:
                return rows
