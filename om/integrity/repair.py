"""Repairing a stopped replica from its healthy peers, leaf by leaf, never past a hole.

The node under repair is stopped at a verify position P (``marker`` state
halted: it applied the verify entry at P and nothing after, so its database
*is* the state at P, digests included), and every healthy peer holds a
checkpoint at P. ``repair``:

1. reads the node's own digests (no scan: they are rows of its store) and, for
   each table whose root differs from the majority's, descends the majority's
   tree and its own, level by level, to the differing leaves;
2. fetches only those leaves' rows from a majority holder at P, in batches of
   ``LEAVES_A_READ`` leaves, and keeps a leaf's copy only if its rows' digests
   (recomputed here with the node's own key) add up to the majority's leaf; a
   leaf a source cannot supply is asked of the next source;
3. writes each verified leaf (the majority's rows put, the node's other rows of
   the leaf deleted) through the digests (``Digests.changes``), so the leaf and
   its index follow, and records the progress in the marker (``repairing``);
4. clears the marker only when every leaf was repaired and every root, read
   again from the node's digests, equals the majority's.

The lesson of HDDS-15542 (a reconciliation that advanced its high-water mark
past a chunk it had not written): a leaf no source can supply is
*unrepairable*; the leaves that did verify are still written, being the
majority's rows, but the marker stays, naming the leaves and each source's
reason, and the node stays stopped. Crashes: each leaf is verified before it is
written and writing it twice writes the same rows; the plan is recomputed from
the node's digests on every run, and the marker goes last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from om.integrity import digest_tree, marker, store_digests
from om.integrity.compare import LEAVES_A_READ, Replica, ReplicaError, leaf_digests, root_bytes
from om.integrity.digest_tree import Digest, DigestTree, Shape
from om.integrity.scan import TABLE_IDS
from om.integrity.store_digests import StoreTree
from om.schema import tables
from om.statemachine import digests
from om.statemachine.digests import Digests
from om.statemachine.store import Store

WRITE_CHUNK_ROWS = 10_000


@dataclass(frozen=True)
class Unrepairable:
    """Leaves no healthy peer could supply, and each peer's reason."""

    table: str
    leaves: tuple[int, ...]
    reasons: Mapping[str, str]

    def describe(self) -> str:
        reasons = "; ".join(f"{node}: {why}" for node, why in sorted(self.reasons.items()))
        shown = ", ".join(map(str, self.leaves[:8])) + (" ..." if len(self.leaves) > 8 else "")
        return f"{self.table} leaves {shown}: {reasons or 'no source'}"


@dataclass(frozen=True)
class RepairResult:
    """What one repair run did."""

    position: int
    planned: Mapping[str, int] = field(default_factory=dict)     # table -> differing leaves
    repaired: Mapping[str, int] = field(default_factory=dict)    # table -> leaves written
    sources: tuple[str, ...] = ()
    rows_written: int = 0
    unrepairable: tuple[Unrepairable, ...] = ()
    differing_after: tuple[str, ...] = ()               # tables still off the majority
    cleared: bool = False


def local_roots(store: Store) -> dict[str, Digest]:
    """The stopped node's roots, from its digests."""
    return {name: store_digests.table_root(store, table)
            for table, name in tables.TABLE_NAMES.items()}


def repair(store: Store, node_dir_marker: Callable[[], marker.Marker | None],
           save_marker: Callable[[marker.Marker], None], position: int,
           majority_roots: Mapping[str, bytes], majority_tree: Callable[[str], DigestTree],
           sources: Mapping[str, Sequence[Replica]],
           after_chunk: Callable[[int], None] = lambda done: None) -> RepairResult:
    """Repairs the stopped node whose database is ``store`` (at ``position``).

    ``majority_tree(table)`` reads the majority's digest tree of a table;
    ``sources[table]`` are the healthy peers holding the majority's rows of it, in
    the order to ask them; ``after_chunk`` hears the count of leaves written so far
    (a test's crash point).
    """
    found = node_dir_marker()
    assert found is not None, "repair only a node a repair stopped"
    assert found.stops_start, "repair only a node a repair stopped"
    assert store.transaction_info().applied_index == position, "the store is not at P"
    kept = Digests.attach(store)
    assert kept.complete, "a stopped node's digests are complete (checked by the caller)"
    shape = Shape(kept.meta.leaf_bits, kept.meta.fanout_bits)
    differing = sorted(t for t, root in majority_roots.items()
                       if root_bytes(local_roots(store)).get(t) != root)
    planned: dict[str, list[int]] = {
        table: digest_tree.differing_leaves(majority_tree(table),
                                            StoreTree(store, TABLE_IDS[table], shape))
        for table in differing}
    work = _Work(store, kept)
    for table, leaves in planned.items():
        for first in range(0, len(leaves), LEAVES_A_READ):
            chunk = leaves[first:first + LEAVES_A_READ]
            work.leaf_chunk(table, chunk, majority_tree(table), sources.get(table, ()))
            found = found.moved(marker.REPAIRING, repaired=sum(work.repaired.values()))
            save_marker(found)
            after_chunk(sum(work.repaired.values()))
    after = root_bytes(local_roots(store))
    still = tuple(sorted(t for t, root in majority_roots.items() if after.get(t) != root))
    result = RepairResult(position, {t: len(v) for t, v in planned.items()}, work.repaired,
                          tuple(sorted(work.sources)), work.rows_written,
                          tuple(work.unrepairable), still)
    if work.unrepairable or still:
        reasons = tuple(u.describe() for u in work.unrepairable) + tuple(
            f"{t}: the root after the repair still differs from the majority's" for t in still)
        save_marker(found.moved(marker.REPAIRING, unrepairable=reasons))
        return result
    return RepairResult(result.position, result.planned, result.repaired, result.sources,
                        result.rows_written, (), (), cleared=True)


class _Work:
    """The leaves of one repair run: pulled, verified, written."""

    def __init__(self, store: Store, kept: Digests) -> None:
        self.store = store
        self.digests = kept
        self.repaired: dict[str, int] = {}
        self.sources: set[str] = set()
        self.rows_written = 0
        self.unrepairable: list[Unrepairable] = []

    def leaf_chunk(self, table: str, leaves: list[int], tree: DigestTree,
                   sources: Sequence[Replica]) -> None:
        """Pulls ``leaves`` from the first source that has each right, writes them."""
        expected = leaf_digests(tree, leaves)
        wanted, reasons = set(leaves), {}
        for source in sources:
            if not wanted:
                break
            try:
                rows = source.leaf_rows(table, sorted(wanted), True)
            except ReplicaError as error:
                reasons[source.node_id] = f"cannot read the leaves: {error}"
                continue
            good = self._verified(rows, expected, wanted)
            if wanted - good:
                reasons[source.node_id] = (f"{len(wanted - good)} leaves' rows do not add up "
                                           "to the majority's digests")
            if good:
                self._write(table, good, [r for r in rows if r[0] in good])
                self.sources.add(source.node_id)
                self.repaired[table] = self.repaired.get(table, 0) + len(good)
                wanted -= good
        if wanted:
            self.unrepairable.append(Unrepairable(table, tuple(sorted(wanted)), reasons))

    def _verified(self, rows: list[tuple[int, bytes, int, bytes]],
                  expected: Mapping[int, Digest], wanted: set[int]) -> set[int]:
        """The leaves whose rows, hashed here, add up to the majority's digest."""
        hasher = self.digests.hasher
        sums: dict[int, Digest] = {}
        for leaf, key, _, value in rows:
            if hasher.leaf(key) != leaf:
                continue           # a row filed under the wrong leaf: that leaf fails
            sums[leaf] = digest_tree.add(sums.get(leaf, digest_tree.EMPTY),
                                         (hasher.digest(key, value), 1))
        return {leaf for leaf in wanted
                if sums.get(leaf, digest_tree.EMPTY) == expected.get(leaf, digest_tree.EMPTY)}

    def _write(self, table: str, leaves: set[int],
               rows: list[tuple[int, bytes, int, bytes]]) -> None:
        """Makes the store's rows in ``leaves`` exactly ``rows``, digests and all."""
        table_id = TABLE_IDS[table]
        wanted = {key: value for _, key, _, value in rows}
        stale = [key for leaf in sorted(leaves)
                 for key in digests.leaf_keys(self.store, table_id, leaf, None, 1 << 30)
                 if key not in wanted]
        ops: list[tuple[bytes, bytes | None]] = [(key, None) for key in stale]
        ops += [(key, value) for key, value in wanted.items()
                if self.store.get(table_id, key) != value]
        for first in range(0, len(ops), WRITE_CHUNK_ROWS):
            with self.digests.changes() as digest:
                write = self.store.new_batch()
                for key, value in ops[first:first + WRITE_CHUNK_ROWS]:
                    if value is None:
                        self.store.batch_delete(write, table_id, key)
                        digest.delete(table_id, key)
                    else:
                        self.store.batch_put(write, table_id, key, value)
                        digest.put(table_id, key, value)
                digest.write(write)
        self.rows_written += len(ops)
