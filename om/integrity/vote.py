"""The vote over replicas' digests, and the row-level comparison of what differs.

Pure: no IO, no clock. Per table, the digest more than half of the configured
nodes hold wins (a silent node counts against a majority); a table where no
digest has a majority names nobody. ``compare_rows`` names each row where a
replica differs from the majority: missing, extra or different.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

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
