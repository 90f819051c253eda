"""Repairing a stopped replica from its healthy peers, never past a hole.

The node under repair is stopped at a verify position P (``marker`` state
halted: it applied the verify entry at P and nothing after, so its database
*is* the state at P), and every healthy peer holds a checkpoint at P with its
trees. ``repair``:

1. computes the node's own trees at P (the peers' tree shape and salt);
2. diffs each table whose root differs from the majority's against the
   majority's tree, into key ranges; when the ranges hold more than
   ``WHOLE_TABLE_FRACTION`` of a table's rows, the whole table becomes one
   range (a verified copy of that table, in effect a snapshot install of it);
3. for each range, asks the majority's holders in turn for their rows at P and
   takes the first copy whose leaves hash to the majority's tree
   (``merkle.range_matches``); writes it (the node's rows in the range not in
   the copy are deleted); records the progress in the marker (``repairing``);
4. recomputes the node's trees from what is now on disk, and clears the marker
   only when every range was repaired and every root equals the majority's.

The lesson of HDDS-15542 (a reconciliation that advanced its high-water mark
past a chunk it had not written): a range no source can supply (each lacks it,
or its copy fails verification) is *unrepairable*; the ranges that did verify
are still written, since they are the majority's rows, but the marker stays,
naming the range and each source's reason, and the node stays stopped.

Crashes: each range is verified before it is written and writing it twice
writes the same rows; the plan is recomputed from the disk on every run, and
the marker goes last. So a crash anywhere leaves the node stopped (the marker
still there) and a second run finishes the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from om.integrity import marker, merkle, scan, tree_store, verifier
from om.integrity.compare import Replica, ReplicaError, span
from om.integrity.merkle import KeyRange, TreeParams, TreeView
from om.integrity.tree_store import StoredForest
from om.statemachine.store import Store

WHOLE_TABLE_FRACTION = 0.5
WRITE_CHUNK_ROWS = 10_000
TREES_FILE = "repair-trees.db"          # the stopped node's own trees, beside its db
_AFTER_FILE = "repair-trees-after.db"


def local_trees(store: Store, node_dir: Path, params: TreeParams,
                name: str = TREES_FILE) -> StoredForest:
    """The stopped node's trees, streamed to a file in ``node_dir`` (not held in memory)."""
    return tree_store.compute_to_file(store, params, node_dir / name)


def remove_local_trees(node_dir: Path) -> None:
    for name in (TREES_FILE, _AFTER_FILE):
        (node_dir / name).unlink(missing_ok=True)


@dataclass(frozen=True)
class Unrepairable:
    """A range no healthy peer could supply, and each peer's reason."""

    key_range: KeyRange
    reasons: Mapping[str, str]

    def describe(self) -> str:
        reasons = "; ".join(f"{node}: {why}" for node, why in sorted(self.reasons.items()))
        return f"{self.key_range.table} {span(self.key_range)}: {reasons or 'no source'}"


@dataclass(frozen=True)
class RepairResult:
    """What one repair run did."""

    position: int
    planned: tuple[KeyRange, ...] = ()
    repaired: tuple[tuple[KeyRange, str], ...] = ()   # (range, the source it came from)
    rows_written: int = 0
    unrepairable: tuple[Unrepairable, ...] = ()
    differing_after: tuple[str, ...] = ()               # tables still off the majority
    cleared: bool = False
    before: Mapping[str, bytes] = field(default_factory=dict)
    after: Mapping[str, bytes] = field(default_factory=dict)


def plan(majority_trees: Mapping[str, TreeView], local: StoredForest) -> list[KeyRange]:
    """The ranges to copy, table by table, in key order (see the module doc).

    The majority's trees are read level by level (over RPC, a page at a time):
    only the subtrees that differ from the local ones are fetched.
    """
    ranges: list[KeyRange] = []
    for table, tree in sorted(majority_trees.items()):
        found = merkle.diff_counted(tree, local.trees[table])
        if sum(rows for _, rows in found) > WHOLE_TABLE_FRACTION * tree.rows:
            ranges.append(KeyRange(table, b"", None))
        else:
            ranges.extend(key_range for key_range, _ in found)
    return ranges


def repair(store: Store, node_dir: Path, position: int, params: TreeParams,
           majority_roots: Mapping[str, bytes], majority_tree: Callable[[str], TreeView],
           sources: Mapping[str, Sequence[Replica]],
           after_range: Callable[[int], None] = lambda done: None,
           local: StoredForest | None = None) -> RepairResult:
    """Repairs the stopped node whose database is ``store`` (at ``position``).

    ``majority_tree(table)`` fetches the majority's tree of a table;
    ``sources[table]`` are the healthy peers holding the majority's rows of it,
    in the order to ask them; ``after_range`` is called with the count of
    ranges written so far (a test's crash point); ``local``: the store's trees
    when the caller has just computed them (one scan fewer).
    """
    found = marker.load(node_dir)
    assert found is not None, "repair only a node a repair stopped"
    assert found.stops_start, "repair only a node a repair stopped"
    assert store.transaction_info().applied_index == position, "the store is not at P"
    if local is None or local.applied_index != position:
        local = local_trees(store, node_dir, params)
    differing = sorted(t for t, root in majority_roots.items() if local.roots().get(t) != root)
    ranges = plan({t: majority_tree(t) for t in differing}, local)
    trees = {t: majority_tree(t) for t in {r.table for r in ranges}}
    repaired: list[tuple[KeyRange, str]] = []
    unrepairable: list[Unrepairable] = []
    written = 0
    for key_range in ranges:
        copy = _pull(key_range, trees[key_range.table], sources.get(key_range.table, ()))
        if isinstance(copy, Unrepairable):
            unrepairable.append(copy)
            continue
        source, rows = copy
        written += _write(store, key_range, rows)
        repaired.append((key_range, source))
        found = found.moved(marker.REPAIRING, repaired=len(repaired))
        marker.save(node_dir, found)
        after_range(len(repaired))
    return _finish(store, node_dir, found, position, params, majority_roots,
                   RepairResult(position, tuple(ranges), tuple(repaired), written,
                                tuple(unrepairable), before=local.roots()))


def _pull(key_range: KeyRange, tree: TreeView,
          sources: Sequence[Replica]) -> tuple[str, list[tuple[bytes, bytes]]] | Unrepairable:
    """The first source's rows that hash to the majority's tree, or why none did."""
    reasons: dict[str, str] = {}
    for source in sources:
        try:
            rows = source.rows(key_range)
        except ReplicaError as error:
            reasons[source.node_id] = f"cannot read the range: {error}"
            continue
        try:
            matches = merkle.range_matches(tree, key_range, rows)
        except ReplicaError as error:
            reasons[source.node_id] = f"cannot read the majority's leaves: {error}"
            continue
        if matches:
            return source.node_id, rows
        reasons[source.node_id] = (f"its {len(rows)} rows do not hash to the majority's tree "
                                   "(its copy lacks rows or holds others)")
    return Unrepairable(key_range, reasons)


def _write(store: Store, key_range: KeyRange, rows: list[tuple[bytes, bytes]]) -> int:
    """Makes the store's rows in ``key_range`` exactly ``rows``; returns rows written."""
    table = scan.TABLE_IDS[key_range.table]
    wanted = dict(rows)
    stale = [key for key, _ in scan.read_range(store, key_range) if key not in wanted]
    ops: list[tuple[bytes, bytes | None]] = [(key, None) for key in stale]
    ops += [(key, value) for key, value in rows]
    for first in range(0, len(ops), WRITE_CHUNK_ROWS):
        batch = store.new_batch()
        for key, value in ops[first:first + WRITE_CHUNK_ROWS]:
            if value is None:
                store.batch_delete(batch, table, key)
            else:
                store.batch_put(batch, table, key, value)
        store.write(batch)
    return len(ops)


def _finish(store: Store, node_dir: Path, found: marker.Marker, position: int,
            params: TreeParams, majority_roots: Mapping[str, bytes],
            result: RepairResult) -> RepairResult:
    """Re-verifies the whole store; clears the marker only if it equals the majority."""
    after = local_trees(store, node_dir, params, _AFTER_FILE).roots()
    remove_local_trees(node_dir)
    differing = tuple(sorted(t for t, root in majority_roots.items() if after.get(t) != root))
    if not result.unrepairable and not differing:
        verifier.forget_up_to(node_dir, position)
        marker.clear(node_dir)
        return _with(result, after, differing, cleared=True)
    reasons = tuple(u.describe() for u in result.unrepairable) + tuple(
        f"{t}: the root after the repair still differs from the majority's" for t in differing)
    marker.save(node_dir, found.moved(marker.REPAIRING, unrepairable=reasons))
    return _with(result, after, differing, cleared=False)


def _with(result: RepairResult, after: Mapping[str, bytes], differing: tuple[str, ...],
          cleared: bool) -> RepairResult:
    return RepairResult(result.position, result.planned, result.repaired, result.rows_written,
                        result.unrepairable, differing, cleared, result.before, after)

