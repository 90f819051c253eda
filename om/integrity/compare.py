"""Comparing replicas at one verify position: the vote, the descent, then the rows.

Every node's table roots at the verify position are its digests as apply kept
them (``om.integrity.verifier``). Per table, the root more than half of the
configured nodes hold wins (``vote.majority``); a table where no root has a
majority stops everything: nothing is named as wrong, nobody is marked, nothing
is repaired, since there is no telling which copy is right. Otherwise, for each
node in a table's minority, the digest trees of a majority holder and of the
node are descended level by level to the leaves that differ
(``digest_tree.differing_leaves``); only then are those leaves' rows read from
both checkpoints, as (key, row digest), and ``vote.compare_rows`` names each
row: missing, extra or different.

A differing leaf whose rows are the same on both sides is *digest drift*: a
leaf whose stored digest no longer matches its own rows (the side whose rows do
not add up to its leaf). That is no divergence of the data: it is reported as
drift, the node is not outvoted for it, and the scrub mends it
(``om.integrity.scrub``).

IO goes through the ``Replica`` port (RPC in the CLI and between nodes, fakes
in tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from om.integrity import digest_tree, vote
from om.integrity.digest_tree import Digest, DigestTree
from om.integrity.vote import RowDiff, Verdict
from om.schema.row_digests import node_bytes

ROWS_MAX_DEFAULT = 1000        # differing rows named per run
LEAVES_A_READ = 256            # differing leaves whose rows one request reads


class ReplicaError(Exception):
    """A replica could not answer (unreachable, no such verification, a bad answer)."""


LeafRow = tuple[int, bytes, int, bytes]     # (leaf, key, row digest, value or b"")


class Replica(Protocol):
    """One node's digests and checkpoint rows at the verify position."""

    @property
    def node_id(self) -> str: ...

    def tree(self, table: str) -> DigestTree:
        """The node's digest tree of ``table``; ReplicaError when it cannot say."""
        ...

    def leaf_rows(self, table: str, leaves: Sequence[int], values: bool) -> list[LeafRow]:
        """The node's rows in ``leaves``, by leaf then key; ReplicaError when it cannot."""
        ...


@dataclass(frozen=True)
class Difference:
    """One row where a node differs from the majority."""

    node_id: str
    reference: str             # the majority node its rows were compared with
    row: RowDiff


@dataclass(frozen=True)
class Drift:
    """A leaf whose stored digest differs from its own rows, on ``node_id``."""

    node_id: str
    table: str
    leaf: int


@dataclass(frozen=True)
class Comparison:
    """What verify found at one position."""

    position: int
    verdict: Verdict
    differences: tuple[Difference, ...] = ()
    drift: tuple[Drift, ...] = ()
    problems: tuple[str, ...] = ()     # what could not be named, and why
    truncated: bool = False            # more differing rows than were named

    @property
    def clean(self) -> bool:
        return self.verdict.clean

    @property
    def diverged(self) -> frozenset[str]:
        """The minority, less the nodes whose every difference was their own drift."""
        drifted = {d.node_id for d in self.drift}
        named = {d.node_id for d in self.differences}
        return frozenset(n for n in self.verdict.minority if n in named or n not in drifted)

    def majority_roots(self) -> dict[str, bytes]:
        """Table -> the majority's root (only meaningful without ``no_majority``)."""
        return {name: v.root for name, v in self.verdict.tables.items() if v.root is not None}


def root_bytes(roots: Mapping[str, Digest]) -> dict[str, bytes]:
    """Roots as the vote compares them."""
    return {table: node_bytes(*digest) for table, digest in roots.items()}


def compare(position: int, roots_by_node: Mapping[str, Mapping[str, bytes]],
            replicas: Mapping[str, Replica], cluster_size: int,
            rows_max: int = ROWS_MAX_DEFAULT) -> Comparison:
    """Votes per table and names the minority's differing rows (see the module doc)."""
    assert rows_max > 0
    verdict = vote.majority(roots_by_node, cluster_size)
    if verdict.no_majority or verdict.clean:
        return Comparison(position, verdict)
    found = _Found(rows_max)
    for table, table_vote in sorted(verdict.tables.items()):
        reference = sorted(table_vote.agree)[0]
        for node_id in sorted(table_vote.minority):
            if node_id in replicas and reference in replicas:
                _name_rows(table, replicas[reference], replicas[node_id], found)
            else:
                found.problems.append(f"{node_id} {table}: not reachable to name its rows")
    return Comparison(position, verdict, tuple(found.differences), tuple(found.drift),
                      tuple(found.problems), found.truncated)


class _Found:
    def __init__(self, rows_max: int) -> None:
        self.rows_max = rows_max
        self.differences: list[Difference] = []
        self.drift: list[Drift] = []
        self.problems: list[str] = []
        self.truncated = False


def _name_rows(table: str, reference: Replica, node: Replica, found: _Found) -> None:
    """Descends to the leaves where ``node`` differs from ``reference``, then names rows."""
    try:
        expected_tree, actual_tree = reference.tree(table), node.tree(table)
        leaves = digest_tree.differing_leaves(expected_tree, actual_tree)
    except (ReplicaError, ValueError) as error:
        found.problems.append(f"{node.node_id} {table}: cannot descend: {error}")
        return
    for first in range(0, len(leaves), LEAVES_A_READ):
        if len(found.differences) >= found.rows_max:
            found.truncated = True
            return
        chunk = leaves[first:first + LEAVES_A_READ]
        try:
            expected = _by_leaf(reference.leaf_rows(table, chunk, False))
            actual = _by_leaf(node.leaf_rows(table, chunk, False))
            digests = (leaf_digests(expected_tree, chunk), leaf_digests(actual_tree, chunk))
        except ReplicaError as error:
            found.problems.append(f"{node.node_id} {table}: cannot read leaves: {error}")
            return
        for leaf in chunk:
            _name_leaf(table, leaf, reference, node, expected.get(leaf, []),
                       actual.get(leaf, []), digests, found)


def _name_leaf(table: str, leaf: int, reference: Replica, node: Replica,
               expected: list[tuple[bytes, int]], actual: list[tuple[bytes, int]],
               leaf_digests: tuple[dict[int, Digest], dict[int, Digest]], found: _Found) -> None:
    rows = vote.compare_rows(table, [(k, d.to_bytes(32, "big")) for k, d in expected],
                             [(k, d.to_bytes(32, "big")) for k, d in actual])
    if not rows:     # the same rows: one side's digest is not its rows' (drift)
        for replica, leaf_rows, digests in ((reference, expected, leaf_digests[0]),
                                            (node, actual, leaf_digests[1])):
            if digest_tree.leaf_digest(leaf_rows) != digests.get(leaf, digest_tree.EMPTY):
                found.drift.append(Drift(replica.node_id, table, leaf))
        return
    if digest_tree.leaf_digest(expected) != leaf_digests[0].get(leaf, digest_tree.EMPTY):
        found.problems.append(f"{table} leaf {leaf}: the majority node {reference.node_id}'s "
                              "rows do not add up to its own digest (drift there too)")
    for row in rows:
        if len(found.differences) >= found.rows_max:
            found.truncated = True
            return
        found.differences.append(Difference(node.node_id, reference.node_id, row))


def _by_leaf(rows: list[LeafRow]) -> dict[int, list[tuple[bytes, int]]]:
    grouped: dict[int, list[tuple[bytes, int]]] = {}
    for leaf, key, digest, _ in rows:
        grouped.setdefault(leaf, []).append((key, digest))
    return grouped


def leaf_digests(tree: DigestTree, leaves: Sequence[int]) -> dict[int, Digest]:
    """The non-empty ones of the leaves' digests, read as the level below their parents."""
    shape = tree.shape
    parents = sorted({shape.ancestor(1, leaf) for leaf in leaves})
    found: dict[int, Digest] = {}
    for first in range(0, len(parents), digest_tree.PARENTS_MAX):
        found.update(tree.children(0, parents[first:first + digest_tree.PARENTS_MAX]))
    return found


def span(table: str, leaves: Sequence[int]) -> str:
    """Leaves as people read them."""
    shown = ", ".join(str(leaf) for leaf in leaves[:8])
    more = f" and {len(leaves) - 8} more" if len(leaves) > 8 else ""
    return f"{table} leaves {shown}{more}"
