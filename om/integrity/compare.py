"""Comparing replicas at one verify position: the vote, then down to the rows.

``om admin verify`` collects every replica's roots at the verify position and
calls ``compare``. Per table, the root more than half of the configured nodes
hold wins (``merkle.majority``); a table where no root has a majority stops
everything: nothing is named as wrong, nobody is marked, nothing is repaired,
since there is no telling which copy is right. Otherwise, for each node in a
table's minority, the two trees (a majority holder's and the node's) are
diffed into key ranges, the rows of each range are read from both
checkpoints, the majority's rows are checked against the majority's tree, and
``merkle.compare_rows`` names each row: missing, extra or different.

IO goes through the ``Replica`` port (RPC in the CLI, fakes in tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from om.integrity import merkle
from om.integrity.merkle import KeyRange, RowDiff, TreeView, Verdict

ROWS_MAX_DEFAULT = 1000        # differing rows named per run
RANGE_ROWS_MAX = 100_000       # a larger differing range is reported, not read


class ReplicaError(Exception):
    """A replica could not answer (unreachable, no such verification, a bad tree)."""


class Replica(Protocol):
    """One node's trees and checkpoint rows at the verify position."""

    node_id: str

    def tree(self, table: str) -> TreeView:
        """The node's tree of ``table`` (read level by level, as the diff descends);
        ReplicaError when it cannot say."""
        ...

    def rows(self, key_range: KeyRange) -> list[tuple[bytes, bytes]]:
        """The node's rows in ``key_range``, in key order; ReplicaError when it cannot."""
        ...


@dataclass(frozen=True)
class Difference:
    """One row where a node differs from the majority."""

    node_id: str
    reference: str             # the majority node its rows were compared with
    row: RowDiff


@dataclass(frozen=True)
class Comparison:
    """What verify found at one position."""

    position: int
    verdict: Verdict
    differences: tuple[Difference, ...] = ()
    problems: tuple[str, ...] = ()     # what could not be named, and why
    truncated: bool = False            # more differing rows than were named

    @property
    def clean(self) -> bool:
        return self.verdict.clean

    def majority_roots(self) -> dict[str, bytes]:
        """Table -> the majority's root (only meaningful without ``no_majority``)."""
        return {name: v.root for name, v in self.verdict.tables.items() if v.root is not None}


def compare(position: int, roots_by_node: Mapping[str, Mapping[str, bytes]],
            replicas: Mapping[str, Replica], cluster_size: int,
            rows_max: int = ROWS_MAX_DEFAULT) -> Comparison:
    """Votes per table and names the minority's differing rows (see the module doc)."""
    assert rows_max > 0
    verdict = merkle.majority(roots_by_node, cluster_size)
    if verdict.no_majority or verdict.clean:
        return Comparison(position, verdict)
    differences: list[Difference] = []
    problems: list[str] = []
    truncated = False
    for table, vote in sorted(verdict.tables.items()):
        reference = sorted(vote.agree)[0]
        for node_id in sorted(vote.minority):
            budget = rows_max - len(differences)
            if budget <= 0:
                truncated = True
                break
            found, trouble, cut = _name_rows(table, replicas[reference], replicas[node_id],
                                             budget)
            differences += found
            problems += trouble
            truncated = truncated or cut
    return Comparison(position, verdict, tuple(differences), tuple(problems), truncated)


def _name_rows(table: str, reference: Replica, node: Replica,
               budget: int) -> tuple[list[Difference], list[str], bool]:
    """The rows of ``table`` where ``node`` differs from ``reference``, up to ``budget``."""
    try:
        expected_tree, actual_tree = reference.tree(table), node.tree(table)
        ranges = merkle.diff_counted(expected_tree, actual_tree)
    except (ReplicaError, ValueError) as error:
        return [], [f"{node.node_id} {table}: cannot descend: {error}"], False
    found: list[Difference] = []
    problems: list[str] = []
    for key_range, rows in ranges:
        where = f"{node.node_id} {table} {span(key_range)}"
        if rows > RANGE_ROWS_MAX:
            problems.append(f"{where}: differs over {rows} of the majority's rows: too many "
                            "to name (a repair copies them)")
            continue
        try:
            expected, actual = reference.rows(key_range), node.rows(key_range)
        except ReplicaError as error:
            problems.append(f"{where}: cannot read the rows: {error}")
            continue
        try:
            matches = merkle.range_matches(expected_tree, key_range, expected)
        except ReplicaError as error:
            problems.append(f"{where}: cannot read the majority's leaves: {error}")
            continue
        if not matches:
            problems.append(f"{where}: the majority node {reference.node_id}'s rows do not "
                            "match its own tree")
            continue
        for row in merkle.compare_rows(table, expected, actual):
            if len(found) == budget:
                return found, problems, True
            found.append(Difference(node.node_id, reference.node_id, row))
    return found, problems, False


def span(key_range: KeyRange) -> str:
    """A key range as people read it."""
    if not key_range.start and key_range.end is None:
        return "(the whole table)"
    end = "end" if key_range.end is None else _text(key_range.end)
    return f"[{_text(key_range.start) or 'start'}, {end})"


def _text(key: bytes) -> str:
    return key.decode(errors="backslashreplace")
