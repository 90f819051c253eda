"""A store's digest tree read from its leaf rows, and the verifications kept beside it.

No threads, no processes: what the verifier (a checkpoint's tree), repair (a
stopped node's own tree) and the repair tool (``forget_up_to``) share.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from om.integrity import digest_tree
from om.integrity.digest_tree import Digest, Shape
from om.schema.read_view import ReadView
from om.schema.tables import TableId
from om.statemachine import digests

VERIFY_DIR = "verify"


def tree_children(view: ReadView, table: TableId, shape: Shape, level: int,
                  parents: Sequence[int]) -> dict[int, Digest]:
    """The non-empty nodes of ``level`` under ``parents``, from a store's leaf rows."""
    found: dict[int, Digest] = {}
    for parent in sorted(set(parents)):
        span = shape.span(level + 1, parent)
        leaves = digests.stored_leaves(view, table, span.start - 1 if span.start else None,
                                       span.stop)
        found.update(digest_tree.children(shape, leaves, level, [parent]))
    return found


def table_root(view: ReadView, table: TableId) -> Digest:
    """A table's root: the sum of its stored leaves."""
    return digest_tree.total((total, rows) for _, total, rows
                             in digests.stored_leaves(view, table))


@dataclass(frozen=True)
class StoreTree:
    """A store's digest tree of one table, read from its leaf rows (``DigestTree``): a
    checkpoint's, or a stopped node's own."""

    view: ReadView
    table: TableId
    shape: Shape

    def root(self) -> Digest:
        return table_root(self.view, self.table)

    def children(self, level: int, parents: Sequence[int]) -> dict[int, Digest]:
        return tree_children(self.view, self.table, self.shape, level, parents)


def forget_up_to(node_dir: Path, position: int) -> None:
    """Removes the node's verifications at or below ``position`` (a stopped node's:
    after a repair they describe a state it no longer holds)."""
    root = node_dir / VERIFY_DIR
    if not root.is_dir():
        return
    for directory in root.iterdir():
        if directory.name.isdigit() and int(directory.name) <= position:
            shutil.rmtree(directory, ignore_errors=True)
