"""Another node's digests at a verify position, over the integrity requests.

``RemoteReplica`` is the ``compare.Replica`` of a node reached through a
``Call`` (one request, its OK answer, or ReplicaError): the tools give it their
client (``om.cli.admin.integrity_rpc``), a node gives it its peer link
(``om.node.integrity_peers``). Levels travel a request per ``PARENTS_MAX``
parents; rows a page at a time, each page halved while a node refuses it as over
its frame limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from om.integrity import digest_tree
from om.integrity.compare import LeafRow, ReplicaError
from om.integrity.digest_tree import Digest, Shape
from om.protocol import om_pb2

Call = Callable[[om_pb2.OMRequest], om_pb2.OMResponse]
PAGE_ROWS = 5000
FRAME_LIMIT = "over the frame limit"     # a node's refusal of an answer too large


def digests_of(answer: om_pb2.GetVerifyTreesResponse) -> dict[str, Digest]:
    """Table -> (sum, rows) of a finished verification."""
    return {root.table: (int.from_bytes(root.root[:32], "big"), root.rows)
            for root in answer.roots}


def roots_of(answer: om_pb2.GetVerifyTreesResponse) -> dict[str, bytes]:
    """Table -> root, as the vote compares them."""
    return {root.table: root.root for root in answer.roots}


def ask_verification(call: Call, position: int) -> om_pb2.GetVerifyTreesResponse:
    """A node's state and roots at ``position``."""
    return call(om_pb2.OMRequest(
        cmd_type=om_pb2.GetVerifyTrees,
        get_verify_trees=om_pb2.GetVerifyTreesRequest(position=position))).get_verify_trees


@dataclass(frozen=True)
class RemoteTree:
    """A node's digest tree of one table (``digest_tree.DigestTree``) over requests."""

    table: str
    shape: Shape
    digest: Digest
    _children: Callable[[str, int, Sequence[int]], Mapping[int, Digest]]

    def root(self) -> Digest:
        return self.digest

    def children(self, level: int, parents: Sequence[int]) -> Mapping[int, Digest]:
        return self._children(self.table, level, parents)


class RemoteReplica:
    """A node's digests and checkpoint rows at one position."""

    def __init__(self, node_id: str, call: Call, answer: om_pb2.GetVerifyTreesResponse) -> None:
        assert answer.state == om_pb2.VERIFY_DONE
        self.node_id = node_id
        self.position = answer.position
        self._call = call
        self._shape = Shape(answer.leaf_bits, answer.fanout_bits)
        self._roots = digests_of(answer)
        self.page_rows = PAGE_ROWS

    def tree(self, table: str) -> RemoteTree:
        if table not in self._roots:
            raise ReplicaError(f"{self.node_id} has no digests of {table}")
        return RemoteTree(table, self._shape, self._roots[table], self.children)

    def children(self, table: str, level: int, parents: Sequence[int]) -> dict[int, Digest]:
        assert len(parents) <= digest_tree.PARENTS_MAX
        query = om_pb2.DigestLevelQuery(table=table, level=level, parents=parents)
        answer = self._call(om_pb2.OMRequest(
            cmd_type=om_pb2.GetVerifyTrees, get_verify_trees=om_pb2.GetVerifyTreesRequest(
                position=self.position, level=query))).get_verify_trees
        if answer.state != om_pb2.VERIFY_DONE or not answer.HasField("level_page"):
            raise ReplicaError(f"{self.node_id} no longer serves position {self.position}: "
                               f"{answer.detail or om_pb2.VerifyState.Name(answer.state)}")
        return {node.index: (int.from_bytes(node.sum, "big"), node.rows)
                for node in answer.level_page.nodes}

    def leaf_rows(self, table: str, leaves: Sequence[int], values: bool) -> list[LeafRow]:
        rows: list[LeafRow] = []
        body = om_pb2.ReadVerifyLeavesRequest(position=self.position, table=table,
                                              leaves=sorted(leaves), values=values)
        while True:
            body.max_rows = self.page_rows
            page = self._page(body)
            rows += [(row.leaf, row.key, int.from_bytes(row.digest, "big"), row.value)
                     for row in page.rows]
            if not page.truncated or not page.rows:
                return rows
            body.after_leaf, body.after_key = page.rows[-1].leaf, page.rows[-1].key

    def _page(self, body: om_pb2.ReadVerifyLeavesRequest) -> om_pb2.ReadVerifyLeavesResponse:
        """A page; asked again at half the size while the node finds it too large."""
        while True:
            try:
                return self._call(om_pb2.OMRequest(cmd_type=om_pb2.ReadVerifyLeaves,
                                                   read_verify_leaves=body)).read_verify_leaves
            except ReplicaError as error:
                if FRAME_LIMIT not in str(error) or self.page_rows <= 1:
                    raise
            self.page_rows //= 2
            body.max_rows = self.page_rows
