"""A node's verifications: a checkpoint at each verify entry, its digests read, served.

A verify entry goes through Raft (``om admin verify``, or the leader every
``[verify] interval_s``). Every replica, when it applies that entry, calls
``Verifier.applied``, which takes a RocksDB checkpoint right there, on the apply
path (the old flow's double buffer flushed first): nothing applied after the
entry can be in it, so every replica's checkpoint holds the same log position,
and with it the digests apply kept up to that position (they are rows of the
store, ``om.statemachine.digests``). Nothing is scanned: behind the apply path,
a worker reads the checkpoint's leaf rows and sums each table's root (about
65,000 leaves for a table of millions of rows; a fraction of a second). The
checkpoint then serves the levels of the digest tree (``children``) and the
rows of the leaves that differ (``leaf_rows``), *at that position*, to name
differing rows or to repair a replica.

Layout, under ``<node data dir>/verify/<position, 20 digits>/``:

* ``meta.json``: what the entry fixed (term, halt node); written before the
  checkpoint, so a directory without it is debris;
* ``checkpoint/``: the checkpoint (RocksDB renames it into place when whole).

Invariants: a verification serves only once its roots are read, and its
checkpoint is never written to; at most ``keep`` verifications are kept (the
newest); a restart reads the kept ones again. A verify entry replayed after a
crash (RocksDB had lost its position) retakes the checkpoint from scratch. A
store whose digests are still being built (``DigestMeta.complete`` false) has
no comparable digests: its verification fails, saying so.
"""

from __future__ import annotations

import json
import logging
import queue
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from om.integrity import digest_tree
from om.integrity.digest_tree import Digest, Shape
from om.integrity.scan import TABLE_IDS
from om.integrity.store_digests import VERIFY_DIR, table_root, tree_children
from om.protocol import om_pb2
from om.schema import row_digests, tables
from om.statemachine import digests
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

PAGE_ROWS_MAX = 10_000
PAGE_BYTES_MAX = 2 * 1024 * 1024
_META = "meta.json"
_CHECKPOINT = "checkpoint"


class VerifyUnavailable(Exception):
    """This node cannot serve that verification (none, not read yet, or failed)."""


@dataclass(frozen=True)
class VerifySpec:
    """What a verify entry fixes for every replica."""

    position: int
    term: int
    halt_node_id: str = ""


@dataclass(frozen=True)
class Verification:
    """One verification on this node, and how far it got."""

    spec: VerifySpec
    state: om_pb2.VerifyState.ValueType
    detail: str = ""
    roots: dict[str, Digest] = field(default_factory=dict)
    shape: Shape | None = None
    key_id: bytes = b""
    compute_s: float = 0.0


def spec_of(position: int, batch: om_pb2.PersistDbBatch) -> VerifySpec:
    """The verification a verify entry at ``position`` asks for."""
    return VerifySpec(position, batch.term, batch.verify.halt_node_id)


@dataclass
class _Open:
    """A done verification's checkpoint, open for reads, and its hashes."""

    store: Store
    hasher: row_digests.RowHasher
    lock: threading.Lock = field(default_factory=threading.Lock)


class Verifier:
    """The verifications of one node: taken in apply, read behind, served to peers."""

    def __init__(self, node_dir: Path, store: Store, quiesce: Callable[[], None],
                 keep: int, on_done: Callable[[Verification], None] = lambda done: None) -> None:
        assert keep >= 1
        self._on_done = on_done     # on the worker thread, once a verification's roots are read
        self._root = node_dir / VERIFY_DIR
        self._store = store
        self._quiesce = quiesce
        self._keep = keep
        self._lock = threading.Lock()   # the tables below
        self._verifications: dict[int, Verification] = {}
        self._open: dict[int, _Open] = {}
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._recover()
        self._worker = threading.Thread(target=self._run, name="verify-digests", daemon=True)
        self._worker.start()

    # -- the apply path -----------------------------------------------------------------

    def applied(self, position: int, batch: om_pb2.PersistDbBatch) -> VerifySpec:
        """Checkpoints the store at ``position``: call it right after applying the entry.

        A failed checkpoint (a full disk) fails this verification only: the
        replica's data is fine, and apply goes on.
        """
        spec = spec_of(position, batch)
        directory = self._directory(position)
        started = time.perf_counter()
        try:
            self._forget(position)
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            _write_meta(directory, spec)
            self._quiesce()
            self._store.checkpoint(directory / _CHECKPOINT)
        except Exception as error:
            logger.exception("verify at position %d: no checkpoint", position)
            self._set(Verification(spec, om_pb2.VERIFY_FAILED, f"no checkpoint: {error}"))
            return spec
        logger.info("verify at position %d: checkpoint in %.3f s", position,
                    time.perf_counter() - started)
        self._set(Verification(spec, om_pb2.VERIFY_COMPUTING))
        self._queue.put(position)
        return spec

    # -- what peers ask ---------------------------------------------------------------

    def get(self, position: int = 0) -> Verification | None:
        """The verification at ``position`` (0: the newest), or None."""
        with self._lock:
            if not self._verifications:
                return None
            return self._verifications.get(position or max(self._verifications))

    def latest_done(self) -> Verification | None:
        """The newest verification whose digests are read."""
        with self._lock:
            done = [v for v in self._verifications.values() if v.state == om_pb2.VERIFY_DONE]
        return max(done, key=lambda v: v.spec.position, default=None)

    def children(self, position: int, table: str, level: int,
                 parents: Sequence[int]) -> dict[int, Digest]:
        """The non-empty nodes of ``level`` under ``parents`` in the digest tree of
        ``table`` at ``position`` (computed from the checkpoint's leaves)."""
        verification, opened = self._served(position)
        shape = verification.shape
        assert shape is not None
        if not 0 <= level < shape.depth or len(parents) > digest_tree.PARENTS_MAX:
            raise ValueError(f"no level {level} below the root's ({shape.depth}), or more "
                             f"than {digest_tree.PARENTS_MAX} parents")
        with opened.lock:
            return tree_children(opened.store, TABLE_IDS[table], shape, level, parents)

    def leaf_rows(self, position: int, table: str, leaves: Sequence[int], values: bool,
                  after: tuple[int, bytes] | None, max_rows: int
                  ) -> tuple[list[om_pb2.LeafRow], bool]:
        """A page of the rows of ``leaves`` at ``position`` (each with its digest, and its
        value when asked), after ``(leaf, key)`` when given; and whether more follow."""
        assert max_rows > 0
        _, opened = self._served(position)
        table_id = TABLE_IDS[table]
        rows: list[om_pb2.LeafRow] = []
        size = 0
        limit = min(max_rows, PAGE_ROWS_MAX)
        with opened.lock:
            for leaf in sorted(set(leaves)):
                if after is not None and leaf < after[0]:
                    continue
                start = after[1] if after is not None and leaf == after[0] else None
                while True:
                    # a page of the leaf's index, its rows in one multi-get (a get
                    # each cost ~0.4 ms at 10M keys: verify-and-repair.md), no more
                    # than this answer can still take
                    wanted = min(1000, limit - len(rows) + 1)
                    keys = digests.leaf_keys(opened.store, table_id, leaf, start, wanted)
                    for key, found in zip(keys, opened.store.get_many(table_id, keys), strict=True):
                        if len(rows) == limit or size >= PAGE_BYTES_MAX:
                            return rows, True
                        value = found or b""
                        rows.append(om_pb2.LeafRow(
                            leaf=leaf, key=key, value=value if values else b"",
                            digest=opened.hasher.digest(key, value).to_bytes(32, "big")))
                        size += len(key) + (len(value) if values else 32)
                    if len(keys) < wanted:
                        break
                    start = keys[-1]
        return rows, False

    def close(self) -> None:
        """Stops the worker and closes the open checkpoints."""
        self._queue.put(None)
        self._worker.join(timeout=30)
        with self._lock:
            for opened in self._open.values():
                opened.store.close()
            self._open.clear()

    # -- behind the apply path ----------------------------------------------------------

    def _served(self, position: int) -> tuple[Verification, _Open]:
        with self._lock:
            verification = self._verifications.get(position)
            opened = self._open.get(position)
        if verification is None or verification.state != om_pb2.VERIFY_DONE or opened is None:
            raise VerifyUnavailable(_unavailable(position, verification, self._keep))
        return verification, opened

    def _run(self) -> None:
        while True:
            position = self._queue.get()
            if position is None:
                return
            self._read(position)
            self._retire()

    def _read(self, position: int) -> None:
        """Opens the checkpoint at ``position`` and sums each table's root from its leaves."""
        verification = self.get(position)
        if verification is None or verification.state != om_pb2.VERIFY_COMPUTING:
            return
        started = time.perf_counter()
        try:
            store = Store(self._directory(position) / _CHECKPOINT, read_only=True)
        except Exception as error:
            self._set(replace(verification, state=om_pb2.VERIFY_FAILED,
                              detail=f"cannot open the checkpoint: {error}"))
            return
        found = _roots(store, position)
        if isinstance(found, str):
            store.close()
            logger.error("verify at position %d: %s", position, found)
            self._set(replace(verification, state=om_pb2.VERIFY_FAILED, detail=found))
            return
        roots, meta = found
        elapsed = time.perf_counter() - started
        with self._lock:
            self._open[position] = _Open(store, digests.hasher_of(meta))
            self._verifications[position] = Verification(
                verification.spec, om_pb2.VERIFY_DONE, "", roots,
                Shape(meta.leaf_bits, meta.fanout_bits), row_digests.key_id(meta.key), elapsed)
        logger.info("verify at position %d: digests read in %.3f s", position, elapsed)
        done = self.get(position)
        if done is None:
            return
        try:
            self._on_done(done)
        except Exception:      # a failed check must not stop the verifications behind it
            logger.exception("verify at position %d: the check after it failed", position)

    def _retire(self) -> None:
        """Removes all but the newest ``keep`` verifications."""
        with self._lock:
            old = sorted(self._verifications)[:-self._keep]
        for position in old:
            self._forget(position)
            shutil.rmtree(self._directory(position), ignore_errors=True)

    def _forget(self, position: int) -> None:
        with self._lock:
            self._verifications.pop(position, None)
            opened = self._open.pop(position, None)
        if opened is not None:
            with opened.lock:
                opened.store.close()

    def _recover(self) -> None:
        """Reads the kept verifications again; drops debris."""
        if not self._root.is_dir():
            return
        for directory in sorted(self._root.iterdir()):
            spec = _read_meta(directory)
            if spec is None or not (directory / _CHECKPOINT).is_dir():
                shutil.rmtree(directory, ignore_errors=True)
                continue
            self._verifications[spec.position] = Verification(spec, om_pb2.VERIFY_COMPUTING)
            self._queue.put(spec.position)

    def _set(self, verification: Verification) -> None:
        with self._lock:
            self._verifications[verification.spec.position] = verification

    def _directory(self, position: int) -> Path:
        return self._root / f"{position:020d}"


def _roots(store: Store, position: int) -> tuple[dict[str, Digest], om_pb2.DigestMeta] | str:
    """Each table's root in a checkpoint at ``position``, or why there are none."""
    info = store.transaction_info()
    if info.applied_index != position:
        return f"the checkpoint holds position {info.applied_index}, not {position} (a bug)"
    meta = digests.read_meta(store)
    if meta is None or not meta.complete:
        return ("this node's digests are still being built (a store from before them): "
                "verifiable once the build is done")
    roots = {name: table_root(store, table) for table, name in tables.TABLE_NAMES.items()}
    return roots, meta


def _unavailable(position: int, verification: Verification | None, keep: int) -> str:
    if verification is None:
        return f"no verification at position {position} here (kept: the newest {keep})"
    if verification.state == om_pb2.VERIFY_COMPUTING:
        return f"the digests at position {position} are still being read"
    return f"the verification at position {position} failed: {verification.detail}"


def _write_meta(directory: Path, spec: VerifySpec) -> None:
    meta = {"position": spec.position, "term": spec.term, "halt_node_id": spec.halt_node_id}
    (directory / _META).write_text(json.dumps(meta))


def _read_meta(directory: Path) -> VerifySpec | None:
    try:
        meta = json.loads((directory / _META).read_text())
        return VerifySpec(int(meta["position"]), int(meta["term"]),
                          str(meta.get("halt_node_id", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class LocalTree:
    """This node's digest tree of one table at a verification (``DigestTree``)."""

    verifier: Verifier
    position: int
    table: str
    shape: Shape
    digest: Digest

    def root(self) -> Digest:
        return self.digest

    def children(self, level: int, parents: Sequence[int]) -> dict[int, Digest]:
        return self.verifier.children(self.position, self.table, level, parents)


@dataclass(frozen=True)
class LocalReplica:
    """This node's digests and rows at a done verification (``compare.Replica``)."""

    node_id: str
    verifier: Verifier
    verification: Verification

    def tree(self, table: str) -> LocalTree:
        shape = self.verification.shape
        assert shape is not None
        return LocalTree(self.verifier, self.verification.spec.position, table, shape,
                         self.verification.roots[table])

    def leaf_rows(self, table: str, leaves: Sequence[int],
                  values: bool) -> list[tuple[int, bytes, int, bytes]]:
        found: list[tuple[int, bytes, int, bytes]] = []
        after: tuple[int, bytes] | None = None
        while True:
            rows, more = self.verifier.leaf_rows(self.verification.spec.position, table,
                                                 leaves, values, after, PAGE_ROWS_MAX)
            found += [(r.leaf, r.key, int.from_bytes(r.digest, "big"), r.value) for r in rows]
            if not more or not rows:
                return found
            after = (rows[-1].leaf, rows[-1].key)
