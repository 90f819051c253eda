"""The tree above a table's digest leaves, and the descent to the leaves that differ.

Pure: no IO. The leaves are kept by apply (``om.statemachine.digests``); a node of
level j >= 1 is the sum (modulo 2**256) and row count of the ``2**fanout_bits``
nodes of level j - 1 below it: node i of level j covers leaves
``[i << (j * fanout_bits), (i + 1) << (j * fanout_bits))``, and the root (level
``depth``) covers the table. Nothing above the leaves is stored: a node computes
the levels from its leaves when asked (``children``).

The descent (``differing_leaves``): compare the roots; then, level by level, ask
both replicas for the children of every node that differed one level up, all of
a level in one request per ``PARENTS_MAX`` parents, and keep the children that
differ (an empty node is absent from an answer and counts as zero). At the leaves
it stops: what remains are the leaves whose rows differ, or whose digest drifted.
Equal sums stand for equal multisets of rows: the row digests are keyed hashes of
256 bits, which nobody without the cluster's key can aim at a collision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from om.schema.row_digests import SUM_MODULUS, depth

PARENTS_MAX = 256        # parents a level request names at most (4,096 children of 16)
Digest = tuple[int, int]  # (sum, rows)
EMPTY: Digest = (0, 0)


@dataclass(frozen=True)
class Shape:
    """A digest tree's shape: ``2**leaf_bits`` leaves, ``2**fanout_bits`` children a node."""

    leaf_bits: int
    fanout_bits: int

    def __post_init__(self) -> None:
        assert 1 <= self.leaf_bits <= 24
        assert 1 <= self.fanout_bits <= 8

    @property
    def depth(self) -> int:
        """The root's level."""
        return depth(self.leaf_bits, self.fanout_bits)

    def span(self, level: int, index: int) -> range:
        """The leaves under node ``index`` of ``level``."""
        assert 0 <= level <= self.depth
        if level == self.depth:
            return range(1 << self.leaf_bits)
        shift = level * self.fanout_bits
        return range(index << shift, min((index + 1) << shift, 1 << self.leaf_bits))

    def ancestor(self, level: int, leaf: int) -> int:
        """The node of ``level`` above ``leaf`` (0 at the root's level)."""
        return 0 if level >= self.depth else leaf >> (level * self.fanout_bits)


def add(a: Digest, b: Digest) -> Digest:
    """The digest of two disjoint sets of rows."""
    return (a[0] + b[0]) % SUM_MODULUS, a[1] + b[1]


def total(digests: Iterable[Digest]) -> Digest:
    """The digest of the union of disjoint sets of rows."""
    found = EMPTY
    for digest in digests:
        found = add(found, digest)
    return found


def children(shape: Shape, leaves: Iterable[tuple[int, int, int]], level: int,
             parents: Sequence[int]) -> dict[int, Digest]:
    """The non-empty nodes of ``level`` under ``parents`` (nodes of ``level + 1``),
    from the ``(leaf, sum, rows)`` of the leaves under them, in any order."""
    assert 0 <= level < shape.depth
    wanted = set(parents)
    found: dict[int, Digest] = {}
    for leaf, leaf_sum, rows in leaves:
        if shape.ancestor(level + 1, leaf) not in wanted:
            continue
        node = shape.ancestor(level, leaf)
        found[node] = add(found.get(node, EMPTY), (leaf_sum, rows))
    return found


class DigestTree(Protocol):
    """One replica's digest tree of one table at one position, read level by level (in
    memory, from a checkpoint, or over RPC)."""

    @property
    def shape(self) -> Shape: ...

    def root(self) -> Digest: ...

    def children(self, level: int, parents: Sequence[int]) -> Mapping[int, Digest]:
        """The non-empty nodes of ``level`` below ``parents`` (at most ``PARENTS_MAX``)."""
        ...


def differing_leaves(a: DigestTree, b: DigestTree) -> list[int]:
    """The leaves whose digests differ between the two trees, ascending."""
    if a.shape != b.shape:
        raise ValueError(f"digest trees of shapes {a.shape} and {b.shape} do not compare")
    if a.root() == b.root():
        return []
    differing = [0]
    for level in range(a.shape.depth - 1, -1, -1):
        below: list[int] = []
        for first in range(0, len(differing), PARENTS_MAX):
            parents = differing[first:first + PARENTS_MAX]
            mine, theirs = a.children(level, parents), b.children(level, parents)
            below += sorted(node for node in set(mine) | set(theirs)
                            if mine.get(node, EMPTY) != theirs.get(node, EMPTY))
        differing = below
    return differing


def leaf_digest(rows: Iterable[tuple[bytes, int]]) -> Digest:
    """The digest of a leaf from its rows' ``(key, digest)``."""
    return total((digest, 1) for _, digest in rows)
