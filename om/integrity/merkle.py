"""Merkle trees over a table's rows in key order: build, diff, vote, compare rows.

Pure: no IO, no clock. ``om.integrity.scan`` feeds it rows from a store.

Layout: content-defined key ranges
----------------------------------

A tree covers one table. Its leaves are consecutive key ranges
``[start, next start)``; the first starts at the empty key and the last runs
to the end of the table. A key *starts a leaf* when its boundary hash,
SHA-256(salt + key), ends in at least ``leaf_bits`` zero bits (so a leaf holds
about ``2**leaf_bits`` rows); a leaf start with ``leaf_bits + j * fanout_bits``
zero bits also starts a node of levels 1 to j, so each level groups about
``2**fanout_bits`` nodes of the level below. The root is the first level with
a single node. A leaf's hash is SHA-256 over ``b"L"`` and its rows, each as
4-byte length + key + 4-byte length + value; an internal node's is SHA-256
over ``b"N"`` and its children's hashes.

Why not fixed-count runs (leaf i = rows 64i to 64i+63): diffing two replicas
whose row sets differ needs their leaf boundaries to line up. With fixed
counts one extra row near the start shifts every later boundary and every
leaf differs. Here a boundary depends only on a key, never on its value or
its neighbours, so two replicas cut their tables at the same keys except at a
key one of them lacks; a missing, extra or changed row changes one leaf (or
merges two, when the row itself was a boundary) and its ancestors, nothing
else. Why not bucketing by key hash: a differing bucket is then scattered
over the whole key space, and fetching its rows (to name them, or to repair
them) needs a full scan; a key range is a seek and a short read.

The salt is chosen per verification (the wiring derives it from the verify
entry, which every replica applies), so a client cannot grind key names that
all fall in one giant leaf: that would only make the diff coarser, never
wrong, since ranges are compared row by row at the end.

Diff: the two trees are walked from the root. Lists of sibling nodes covering
the same key span are aligned at the boundaries both share; an aligned pair of
single nodes with equal hashes is equal and skipped, anything else is
expanded into children until only leaves remain, whose span is a differing
range. Equal hashes stand for equal rows (SHA-256), and a range the diff does
not return holds identical rows on both sides.

Size: with the defaults, 200,000 rows of ~150 bytes make about 3,200 leaves
and a 200 KB message, built in under a second of CPU; about 1 MB per million
rows travels when a peer asks for a whole tree. So the tools do not: they read
a tree level by level (``TreeView.nodes``: one level's nodes in a key span, a
page at a time over RPC), and ``diff`` descends only under nodes that differ.

Only the leaves are serialized (``om.proto`` ``MerkleTree``): the internal
nodes follow from the leaf starts and the parameters, so ``from_proto``
rebuilds them and refuses a tree whose rebuilt root is not the stored one.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from om.protocol import om_pb2

_LENGTH_MAX = 1 << 32
_HASH_BYTES = 32


@dataclass(frozen=True)
class TreeParams:
    """What shapes a tree. Replicas compare trees built with equal parameters only."""

    salt: bytes = b""
    leaf_bits: int = 6      # about 64 rows per leaf
    fanout_bits: int = 4    # about 16 children per internal node

    def __post_init__(self) -> None:
        assert 0 <= self.leaf_bits <= 24
        assert 1 <= self.fanout_bits <= 16


DEFAULT_PARAMS = TreeParams()


@dataclass(frozen=True)
class Node:
    """A key range ``[start, end)`` of a table (``end`` None: to the table's end)."""

    start: bytes
    end: bytes | None
    level: int                            # 0: a leaf
    hash: bytes
    rows: int
    children: tuple[Node, ...] = ()

    @property
    def leaf(self) -> bool:
        return self.level == 0


@dataclass(frozen=True)
class MerkleTree:
    """One table's tree: its leaves in key order and the root above them."""

    table: str
    params: TreeParams
    root: Node
    leaves: tuple[Node, ...]

    @property
    def root_hash(self) -> bytes:
        return self.root.hash

    @property
    def rows(self) -> int:
        return self.root.rows

    @property
    def depth(self) -> int:
        """The root's level (0: a single leaf)."""
        return self.root.level

    def nodes(self, level: int, start: bytes, end: bytes | None,
              limit: int | None = None) -> list[Node]:
        """The nodes of ``level`` (the root at or above its level) starting in [start, end),
        the first ``limit`` of them when given.

        A pruned walk from the root: it visits only the subtrees that overlap
        the span, so a page costs the tree's depth plus the nodes returned.
        """
        found: list[Node] = []
        _collect(self.root, min(level, self.depth), start, end, found,
                 len(self.leaves) if limit is None else limit)
        return found


def _collect(node: Node, level: int, start: bytes, end: bytes | None,
             found: list[Node], limit: int) -> None:
    if len(found) >= limit:
        return
    if not _before(start, node.end) or not (end is None or node.start < end):
        return                                    # no overlap with [start, end)
    if node.level == level:
        if node.start >= start:
            found.append(node)
        return
    for child in node.children:
        _collect(child, level, start, end, found, limit)


class TreeView(Protocol):
    """A tree read level by level: in memory (``MerkleTree``) or over RPC, a page at a time."""

    @property
    def table(self) -> str: ...

    @property
    def params(self) -> TreeParams: ...

    @property
    def root_hash(self) -> bytes: ...

    @property
    def rows(self) -> int: ...

    @property
    def depth(self) -> int: ...

    def nodes(self, level: int, start: bytes, end: bytes | None) -> list[Node]:
        """The nodes of ``level`` (``min(level, depth)``) whose start lies in [start, end),
        in key order; a node's ``end`` may be None when it is the last one returned."""
        ...


@dataclass(frozen=True)
class Forest:
    """Every table's tree, as one replica computed them at one log position."""

    applied_index: int
    term: int
    trees: Mapping[str, MerkleTree]

    def __post_init__(self) -> None:
        assert all(name == tree.table for name, tree in self.trees.items())

    def roots(self) -> dict[str, bytes]:
        """The root hash of each table."""
        return {name: tree.root_hash for name, tree in self.trees.items()}


@dataclass(frozen=True)
class KeyRange:
    """Keys ``start <= key < end`` of one table (``end`` None: no upper bound)."""

    table: str
    start: bytes
    end: bytes | None

    def __post_init__(self) -> None:
        assert self.end is None or self.start < self.end

    def contains(self, key: bytes) -> bool:
        return self.start <= key and (self.end is None or key < self.end)


# ------------------------------------------------------------------ build ---

def boundary_height(key: bytes, params: TreeParams) -> int:
    """0: the key lies inside a leaf; h >= 1: it starts a leaf and nodes of levels < h."""
    digest = hashlib.sha256(params.salt + key).digest()
    value = int.from_bytes(digest[:8], "big")
    zeros = 64 if value == 0 else (value & -value).bit_length() - 1
    if zeros < params.leaf_bits:
        return 0
    return 1 + (zeros - params.leaf_bits) // params.fanout_bits


def row_bytes(key: bytes, value: bytes) -> bytes:
    """A row as the leaf hash sees it: length-prefixed key, length-prefixed value."""
    assert len(key) < _LENGTH_MAX
    assert len(value) < _LENGTH_MAX
    return len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value


def build(table: str, rows: Iterable[tuple[bytes, bytes]],
          params: TreeParams = DEFAULT_PARAMS) -> MerkleTree:
    """The tree of ``rows``, which must come in strictly increasing key order."""
    return _assemble(table, params, list(_leaf_ranges(rows, params)))


def _leaf_ranges(rows: Iterable[tuple[bytes, bytes]], params: TreeParams,
                 start: bytes = b"") -> Iterator[tuple[bytes, bytes, int]]:
    """(start, hash, row count) of each leaf, in key order, the first from ``start``."""
    hasher = hashlib.sha256(b"L")
    count = 0
    previous: bytes | None = None
    for key, value in rows:
        assert previous is None or key > previous, "rows must come in increasing key order"
        previous = key
        if key != start and boundary_height(key, params) >= 1:
            yield start, hasher.digest(), count
            start, hasher, count = key, hashlib.sha256(b"L"), 0
        hasher.update(row_bytes(key, value))
        count += 1
    yield start, hasher.digest(), count


def assemble(table: str, params: TreeParams,
             leaves: Sequence[tuple[bytes, bytes, int]]) -> MerkleTree:
    """The tree above ``leaves`` ((start, hash, rows) in key order, the first at b"")."""
    return _assemble(table, params, leaves)


def _assemble(table: str, params: TreeParams,
              leaves: Sequence[tuple[bytes, bytes, int]]) -> MerkleTree:
    assert leaves, "a tree has at least one leaf"
    assert leaves[0][0] == b""
    ends: list[bytes | None] = [leaf[0] for leaf in leaves[1:]]
    ends.append(None)
    level = [Node(start, end, 0, digest, rows)
             for (start, digest, rows), end in zip(leaves, ends, strict=True)]
    leaf_nodes = tuple(level)
    heights = {node.start: boundary_height(node.start, params) for node in level[1:]}
    depth = 0
    while len(level) > 1:
        depth += 1
        level = _group(level, depth, heights)
    return MerkleTree(table, params, level[0], leaf_nodes)


def _group(nodes: list[Node], depth: int, heights: Mapping[bytes, int]) -> list[Node]:
    """The nodes of level ``depth``: a new one starts at each key of height > depth."""
    groups: list[list[Node]] = []
    for node in nodes:
        if not groups or heights[node.start] > depth:
            groups.append([])
        groups[-1].append(node)
    return [_parent(group, depth) for group in groups]


def _parent(children: list[Node], depth: int) -> Node:
    digest = hashlib.sha256(b"N" + b"".join(child.hash for child in children)).digest()
    return Node(children[0].start, children[-1].end, depth, digest,
                sum(child.rows for child in children), tuple(children))


def range_matches(tree: TreeView, key_range: KeyRange,
                  rows: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether ``rows`` are exactly ``tree``'s rows in ``key_range``.

    The range must be a run of whole leaves of ``tree`` (as ``diff(tree, other)``
    returns them, or the whole table): its leaves are rebuilt from ``rows`` and
    compared with the tree's, hash for hash. Rows out of order or outside the
    range do not match. This is what lets a repair trust rows a peer sends: the
    peer cannot hand over anything but the majority's rows (SHA-256). Only the
    range's leaves are read from ``tree`` (a page at a time over RPC).
    """
    assert tree.table == key_range.table
    expected = [(leaf.start, leaf.hash, leaf.rows)
                for leaf in tree.nodes(0, key_range.start, key_range.end)]
    assert expected, "the range holds a leaf"
    assert expected[0][0] == key_range.start, "the range starts at a leaf"
    keys = [key for key, _ in rows]
    if any(not key_range.contains(key) for key in keys):
        return False
    if any(a >= b for a, b in itertools.pairwise(keys)):
        return False
    return list(_leaf_ranges(rows, tree.params, key_range.start)) == expected


def rows_in(tree: TreeView, key_range: KeyRange) -> int:
    """How many of ``tree``'s rows lie in ``key_range`` (a run of whole leaves)."""
    return sum(leaf.rows for leaf in tree.nodes(0, key_range.start, key_range.end))


# ------------------------------------------------------------------- diff ---

def diff(a: TreeView, b: TreeView) -> list[KeyRange]:
    """The key ranges whose rows differ between the two trees' tables, in key order.

    Every differing row lies in one of the ranges; adjacent ranges are merged.
    ValueError when the trees are not comparable (another table or parameters).

    Level by level: both trees are read at the top level, then only the spans
    whose nodes differ are read one level down (``TreeView.nodes``), so over
    RPC no message and no list grows with the table, only with the difference.
    """
    return [key_range for key_range, _ in diff_counted(a, b)]


def diff_counted(a: TreeView, b: TreeView) -> list[tuple[KeyRange, int]]:
    """``diff``, each range with the count of ``a``'s rows in it."""
    if a.table != b.table or a.params != b.params:
        raise ValueError(f"trees of {a.table} {a.params} and {b.table} {b.params} "
                         "are not comparable")
    if a.root_hash == b.root_hash:
        return []
    spans = _diff_level(a, b, max(a.depth, b.depth), b"", None)
    merged: list[tuple[bytes, bytes | None, int]] = []
    for start, end, rows in spans:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end, merged[-1][2] + rows)
        else:
            merged.append((start, end, rows))
    return [(KeyRange(a.table, start, end), rows) for start, end, rows in merged]


def _diff_level(a: TreeView, b: TreeView, level: int, start: bytes,
                end: bytes | None) -> list[tuple[bytes, bytes | None, int]]:
    """Differing spans within [start, end), a span both trees cut at ``level + 1``."""
    xs, ys = _spanned(a.nodes(level, start, end), end), _spanned(b.nodes(level, start, end), end)
    found: list[tuple[bytes, bytes | None, int]] = []
    for run_x, run_y in _aligned(xs, ys):
        x, y = run_x[0], run_y[0]
        if (len(run_x) == 1 and len(run_y) == 1 and x.level == y.level
                and x.hash == y.hash):
            continue
        if all(node.leaf for node in (*run_x, *run_y)):
            found.append((x.start, run_x[-1].end, sum(node.rows for node in run_x)))
        else:
            found.extend(_diff_level(a, b, max(level - 1, 0), x.start, run_x[-1].end))
    return found


def _spanned(nodes: list[Node], end: bytes | None) -> list[Node]:
    """The nodes with the last one ending at ``end`` (a page may not know its end)."""
    assert nodes, "a span holds a node of every level"
    last = nodes[-1]
    if last.end != end:
        nodes = [*nodes[:-1], Node(last.start, end, last.level, last.hash, last.rows,
                                   last.children)]
    return nodes


def _aligned(xs: Sequence[Node], ys: Sequence[Node]) -> Iterator[tuple[list[Node], list[Node]]]:
    """Splits both lists at the boundaries they share into runs of equal span."""
    assert xs[0].start == ys[0].start
    assert xs[-1].end == ys[-1].end
    i = j = 0
    while i < len(xs):
        run_x, run_y = [xs[i]], [ys[j]]
        i, j = i + 1, j + 1
        while run_x[-1].end != run_y[-1].end:
            if _before(run_x[-1].end, run_y[-1].end):
                run_x.append(xs[i])
                i += 1
            else:
                run_y.append(ys[j])
                j += 1
        yield run_x, run_y
    assert j == len(ys)


def _before(a: bytes | None, b: bytes | None) -> bool:
    """a < b for range ends, where None is past every key."""
    return b is None or (a is not None and a < b)


# --------------------------------------------------------------- majority ---

MISSING_TABLE = b""  # the root a node reports for a table it has no tree of


@dataclass(frozen=True)
class TableVerdict:
    """Which nodes hold the majority's root of one table."""

    table: str
    root: bytes | None                    # None: no root has a majority
    agree: frozenset[str]
    minority: frozenset[str]              # empty when there is no majority
    groups: Mapping[bytes, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The vote over every table."""

    tables: Mapping[str, TableVerdict]

    @property
    def no_majority(self) -> list[str]:
        """Tables where no root has a majority: nothing may be repaired."""
        return sorted(name for name, verdict in self.tables.items() if verdict.root is None)

    @property
    def minority(self) -> frozenset[str]:
        """Nodes that differ from the majority in at least one table."""
        return frozenset().union(*(v.minority for v in self.tables.values()))

    @property
    def clean(self) -> bool:
        return not self.no_majority and not self.minority


def majority(roots_by_node: Mapping[str, Mapping[str, bytes]],
             cluster_size: int | None = None) -> Verdict:
    """Per table, the root more than half of ``cluster_size`` nodes hold.

    ``roots_by_node`` maps a node to its table roots (``Forest.roots()``);
    ``cluster_size`` defaults to the nodes that answered, and should be the
    configured membership, so that silent nodes count against a majority.
    """
    size = len(roots_by_node) if cluster_size is None else cluster_size
    assert size >= len(roots_by_node) > 0
    names = sorted({name for roots in roots_by_node.values() for name in roots})
    return Verdict({name: _vote(name, roots_by_node, size) for name in names})


def _vote(table: str, roots_by_node: Mapping[str, Mapping[str, bytes]],
          size: int) -> TableVerdict:
    groups: dict[bytes, set[str]] = {}
    for node, roots in roots_by_node.items():
        groups.setdefault(roots.get(table, MISSING_TABLE), set()).add(node)
    frozen = {root: frozenset(nodes) for root, nodes in groups.items()}
    winners = [root for root, nodes in frozen.items()
               if 2 * len(nodes) > size and root != MISSING_TABLE]
    if not winners:
        return TableVerdict(table, None, frozenset(), frozenset(), frozen)
    (root,) = winners
    agree = frozen[root]
    return TableVerdict(table, root, agree, frozenset(roots_by_node) - agree, frozen)


# ---------------------------------------------------------- row comparison ---

RowDiffKind = Literal["missing", "extra", "different"]


@dataclass(frozen=True)
class RowDiff:
    """A row where a replica differs from the reference (the majority).

    ``missing``: only the reference has it; ``extra``: only the replica;
    ``different``: both, with other values.
    """

    table: str
    key: bytes
    kind: RowDiffKind
    expected: bytes | None
    actual: bytes | None


def compare_rows(table: str, expected: Iterable[tuple[bytes, bytes]],
                 actual: Iterable[tuple[bytes, bytes]]) -> list[RowDiff]:
    """The differing rows of two row streams of one range, each in key order."""
    diffs: list[RowDiff] = []
    left, right = iter(expected), iter(actual)
    x, y = next(left, None), next(right, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            diffs.append(RowDiff(table, x[0], "missing", x[1], None))
            x = next(left, None)
        elif x is None or y[0] < x[0]:
            diffs.append(RowDiff(table, y[0], "extra", None, y[1]))
            y = next(right, None)
        else:
            if x[1] != y[1]:
                diffs.append(RowDiff(table, x[0], "different", x[1], y[1]))
            x, y = next(left, None), next(right, None)
    return diffs


# ---------------------------------------------------------- serialization ---

def to_proto(tree: MerkleTree) -> om_pb2.MerkleTree:
    """The tree as it travels and is stored: parameters, root and leaves."""
    return om_pb2.MerkleTree(
        table=tree.table, root=tree.root_hash, salt=tree.params.salt,
        leaf_bits=tree.params.leaf_bits, fanout_bits=tree.params.fanout_bits,
        rows=tree.rows,
        leaves=[om_pb2.MerkleNode(start=leaf.start, hash=leaf.hash, rows=leaf.rows)
                for leaf in tree.leaves])


def from_proto(message: om_pb2.MerkleTree) -> MerkleTree:
    """The tree, its internal nodes rebuilt; ValueError when the message is inconsistent."""
    if not 0 <= message.leaf_bits <= 24 or not 1 <= message.fanout_bits <= 16:
        raise ValueError(f"tree of {message.table}: bad parameters")
    params = TreeParams(message.salt, message.leaf_bits, message.fanout_bits)
    leaves = [(leaf.start, leaf.hash, leaf.rows) for leaf in message.leaves]
    _check_leaves(message.table, params, leaves)
    tree = _assemble(message.table, params, leaves)
    if tree.root_hash != message.root or tree.rows != message.rows:
        raise ValueError(f"tree of {message.table}: the leaves do not add up to its root")
    return tree


def _check_leaves(table: str, params: TreeParams,
                  leaves: Sequence[tuple[bytes, bytes, int]]) -> None:
    if not leaves or leaves[0][0] != b"":
        raise ValueError(f"tree of {table}: the first leaf must start at the empty key")
    for (start, _, _), (after, _, _) in itertools.pairwise(leaves):
        if not start < after or boundary_height(after, params) < 1:
            raise ValueError(f"tree of {table}: leaf start {after!r} is not a boundary")
    if any(len(digest) != _HASH_BYTES for _, digest, _ in leaves):
        raise ValueError(f"tree of {table}: a leaf hash is not {_HASH_BYTES} bytes")


def forest_to_proto(forest: Forest) -> om_pb2.TableTrees:
    """Every tree of a forest, in table name order."""
    return om_pb2.TableTrees(
        applied_index=forest.applied_index, term=forest.term,
        trees=[to_proto(forest.trees[name]) for name in sorted(forest.trees)])


def forest_from_proto(message: om_pb2.TableTrees) -> Forest:
    """The forest; ValueError when a tree is inconsistent or a table repeats."""
    trees = [from_proto(tree) for tree in message.trees]
    by_name = {tree.table: tree for tree in trees}
    if len(by_name) != len(trees):
        raise ValueError("a table has two trees")
    return Forest(message.applied_index, message.term, by_name)
