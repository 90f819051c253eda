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
from om.integrity.merkle import KeyRange, Node, TreeParams
from om.protocol import om_pb2
from om.security.tls import ClientTls

ATTEMPT_S = 3.0
POLL_S = 0.2
PAGE_ROWS = 5000
PAGE_NODES = 2000        # tree nodes a page (~100 bytes each: ~200 KB a message)
FRAME_LIMIT = "over the frame limit"   # the node's refusal of a response too large
STALL_S = 120.0          # a node whose scan does not advance for this long is given up


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


@dataclass(frozen=True)
class Progress:
    """How far one node got computing its trees (for the tool's progress lines)."""

    address: str
    node_id: str
    rows_scanned: int
    rows_total: int            # 0: the node cannot say
    waited_s: float


def collect_trees(links: dict[str, NodeLink], position: int, stall_s: float = STALL_S,
                  timeout_s: float | None = None,
                  on_progress: Callable[[Progress], None] = lambda progress: None,
                  ) -> dict[str, om_pb2.GetVerifyTreesResponse | str]:
    """Each address's finished (done or failed) verification at ``position``, or why not.

    A node that has not applied the entry yet, or is computing, is asked again
    as long as it advances (its rows hashed grow, or it reaches the entry):
    it is given up once it has not advanced for ``stall_s``, or, when
    ``timeout_s`` is given, once that much time has passed in all. An
    unreachable node is given up at once. ``on_progress`` hears each node's
    progress whenever it advances.
    """
    results: dict[str, om_pb2.GetVerifyTreesResponse | str] = {}
    pending = set(links)
    started = time.monotonic()
    advanced = {address: (started, (-1, 0)) for address in links}
    while pending:
        now = time.monotonic()
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
                continue
            mark = (int(answer.state), answer.rows_scanned)
            if mark > advanced[address][1]:
                advanced[address] = (now, mark)
                on_progress(Progress(address, answer.node_id, answer.rows_scanned,
                                     answer.rows_total, now - started))
            elif now - advanced[address][0] >= stall_s:
                results[address] = (f"no trees at position {position}: no progress for "
                                    f"{stall_s} s (state "
                                    f"{om_pb2.VerifyState.Name(answer.state)}, "
                                    f"{answer.rows_scanned} rows hashed)")
                pending.discard(address)
        if pending and timeout_s is not None and time.monotonic() - started >= timeout_s:
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
    page_nodes: int = PAGE_NODES    # halved while a page is over the node's frame limit
    page_rows: int = PAGE_ROWS

    def _paged_call(self, request: om_pb2.OMRequest, size: str) -> om_pb2.OMResponse:
        """The node's answer; a page over its frame limit is asked again at half the size
        (``size`` names the attribute whose bound to halve, kept for the next pages)."""
        while True:
            try:
                return self.link.call(request)
            except ReplicaError as error:
                if FRAME_LIMIT not in str(error) or getattr(self, size) <= 1:
                    raise
            setattr(self, size, getattr(self, size) // 2)
            if size == "page_nodes":
                level = request.get_verify_trees.level
                level.max_nodes = min(level.max_nodes, self.page_nodes)
            else:
                request.read_verify_range.max_rows = min(
                    request.read_verify_range.max_rows, self.page_rows)

    def tree(self, table: str) -> RemoteTree:
        """The node's tree of ``table``, read level by level and a page at a time."""
        page = self._level_page(table, 0, b"", b"", 1)
        if page is None:
            raise ReplicaError(f"{self.node_id} has no tree of {table} at {self.position}")
        answer, first = page
        params = TreeParams(answer.salt, answer.leaf_bits, answer.fanout_bits)
        return RemoteTree(table, params, first.root, first.rows, first.depth,
                          lambda level, start, end: self.level_nodes(table, level, start, end))

    def level_nodes(self, table: str, level: int, start: bytes,
                    end: bytes | None) -> list[Node]:
        """Every node of ``level`` starting in [start, end), fetched a page at a time."""
        nodes: list[Node] = []
        after = b""
        while True:
            page = self._level_page(table, level, start, after, self.page_nodes, end)
            if page is None:
                raise ReplicaError(f"{self.node_id} has no tree of {table} at "
                                   f"{self.position}")
            found = page[1]
            nodes += [Node(n.start, None, n.level, n.hash, n.rows) for n in found.nodes]
            if not found.truncated or not found.nodes:
                return _ended(nodes, end)
            after = found.nodes[-1].start

    def _level_page(self, table: str, level: int, start: bytes, after: bytes,
                    max_nodes: int, end: bytes | None = None
                    ) -> tuple[om_pb2.GetVerifyTreesResponse, om_pb2.TreeLevelPage] | None:
        query = om_pb2.TreeLevelQuery(table=table, level=level, start=start,
                                      max_nodes=max_nodes)
        if end is not None:
            query.end = end
        if after:
            query.start_after = after
        answer = self._paged_call(om_pb2.OMRequest(
            cmd_type=om_pb2.GetVerifyTrees, get_verify_trees=om_pb2.GetVerifyTreesRequest(
                position=self.position, level=query)), "page_nodes").get_verify_trees
        if answer.state != om_pb2.VERIFY_DONE:
            return None
        if not answer.HasField("level_page"):
            raise ReplicaError(f"{self.node_id} does not serve its trees level by level "
                               "(an older version): upgrade it")
        return answer, answer.level_page

    def rows(self, key_range: KeyRange) -> list[tuple[bytes, bytes]]:
        rows: list[tuple[bytes, bytes]] = []
        while True:
            body = om_pb2.ReadVerifyRangeRequest(position=self.position, table=key_range.table,
                                                 start=key_range.start,
                                                 max_rows=self.page_rows)
            if key_range.end is not None:
                body.end = key_range.end
            if rows:
                body.start_after = rows[-1][0]
            page = self._paged_call(om_pb2.OMRequest(cmd_type=om_pb2.ReadVerifyRange,
                                                     read_verify_range=body),
                                    "page_rows").read_verify_range
            rows += [(row.key, row.value) for row in page.rows]
            if not page.truncated or not page.rows:
                return rows


@dataclass(frozen=True)
class RemoteTree:
    """A node's tree over RPC (``merkle.TreeView``): only what a diff asks for travels."""

    table: str
    params: TreeParams
    root_hash: bytes
    rows: int
    depth: int
    _fetch: Callable[[int, bytes, bytes | None], list[Node]]

    def nodes(self, level: int, start: bytes, end: bytes | None) -> list[Node]:
        return self._fetch(level, start, end)


def _ended(nodes: list[Node], end: bytes | None) -> list[Node]:
    """Each node's end: the next one's start, the last one's the span's ``end``."""
    return [Node(node.start, after.start if after is not None else end, node.level,
                 node.hash, node.rows)
            for node, after in zip(nodes, [*nodes[1:], None], strict=True)]
