"""A node's verifications: a checkpoint at each verify entry, trees beside it, served.

``om admin verify`` proposes a verify entry through Raft. Every replica, when
it applies that entry, calls ``Verifier.applied``, which takes a RocksDB
checkpoint right there, on the apply path: nothing applied after the entry can
be in it, so every replica's checkpoint holds the same log position (the
transaction info row inside says which). The trees are computed afterwards,
off the apply path, by ``om.integrity.compute`` in a process of its own, at a
lower priority and at the pace the entry fixed, and saved beside the
checkpoint. The checkpoint stays, so peers can later read the rows of a range
*at that position* (to name differing rows, or to repair a replica).

Layout, under ``<node data dir>/verify/<position, 20 digits>/``:

* ``meta.json``: what the entry fixed (term, salt, tree shape, pace); written
  before the checkpoint, so a directory without it is debris;
* ``checkpoint/``: the checkpoint (RocksDB renames it into place when whole);
* ``trees.db``: the trees (``tree_store``: SQLite, a node a row), once computed; only
  their roots are held in memory, pages of nodes are read from the file.

Invariants: a verification is served (rows or trees) only once its trees are
saved, and its checkpoint is then never written to; at most ``KEEP``
verifications are kept (the newest); a restart keeps the finished ones and
computes again the ones it was computing. A verify entry replayed after a crash
(RocksDB had lost its position) retakes the checkpoint from scratch.

The salt of the trees comes from the entry (a random id the proposer chose, and
the entry's position), so it is equal on every replica and new each time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from om.integrity import compute, scan, tree_store
from om.integrity.merkle import DEFAULT_PARAMS, KeyRange, TreeParams
from om.integrity.tree_store import StoredForest
from om.protocol import om_pb2
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

VERIFY_DIR = "verify"
KEEP = 3
# At 10M keys under write load, three nodes on 2 cores (docs/OPERATIONS.md): 150k rows/s
# verified in 72 s, 50k in 211 s (over the 120 s target); the scan costs ~2 us of CPU a row
# (1/3 core per node at 150k), which a node on a host of its own hardly notices.
DEFAULT_ROWS_PER_S = 100_000
PAGE_ROWS_MAX = 10_000
PAGE_BYTES_MAX = 2 * 1024 * 1024
_META = "meta.json"
_CHECKPOINT = "checkpoint"
_TREES = "trees.db"


class VerifyUnavailable(Exception):
    """This node cannot serve that verification (none, not computed yet, or failed)."""


@dataclass(frozen=True)
class VerifySpec:
    """What a verify entry fixes for every replica."""

    position: int
    term: int
    params: TreeParams
    rows_per_s: int
    halt_node_id: str = ""


@dataclass(frozen=True)
class Verification:
    """One verification on this node, and how far it got."""

    spec: VerifySpec
    state: om_pb2.VerifyState.ValueType
    detail: str = ""
    forest: StoredForest | None = None
    compute_s: float = 0.0


def spec_of(position: int, batch: om_pb2.PersistDbBatch) -> VerifySpec:
    """The verification a verify entry at ``position`` asks for.

    A committed entry is never refused: a tree shape out of bounds falls back
    to the default (a proposer bug must not stop every replica's apply).
    """
    marker = batch.verify
    salt = hashlib.sha256(b"om-verify\0" + marker.verify_id
                          + position.to_bytes(8, "big")).digest()[:16]
    leaf_bits, fanout_bits = marker.leaf_bits, marker.fanout_bits
    if not (1 <= leaf_bits <= 24 and 1 <= fanout_bits <= 16):
        leaf_bits, fanout_bits = DEFAULT_PARAMS.leaf_bits, DEFAULT_PARAMS.fanout_bits
    return VerifySpec(position, batch.term, TreeParams(salt, leaf_bits, fanout_bits),
                      int(marker.rows_per_s) or DEFAULT_ROWS_PER_S, marker.halt_node_id)


class Verifier:
    """The verifications of one node: taken in apply, computed behind, served to peers."""

    def __init__(self, node_dir: Path, store: Store, quiesce: Callable[[], None],
                 keep: int = KEEP) -> None:
        assert keep >= 1
        self._root = node_dir / VERIFY_DIR
        self._store = store
        self._quiesce = quiesce
        self._keep = keep
        self._lock = threading.Lock()   # the table below; one checkpoint open at a time
        self._verifications: dict[int, Verification] = {}
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._process: subprocess.Popen[bytes] | None = None
        self._closing = False
        self._recover()
        self._worker = threading.Thread(target=self._run, name="verify-trees", daemon=True)
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
        """The newest verification whose trees are computed."""
        with self._lock:
            done = [v for v in self._verifications.values() if v.state == om_pb2.VERIFY_DONE]
        return max(done, key=lambda v: v.spec.position, default=None)

    def progress(self, position: int) -> tuple[int, int]:
        """(rows hashed, rows estimated) of the trees being computed at ``position``."""
        return compute.read_progress(self._directory(position) / _TREES)

    def read_range(self, position: int, key_range: KeyRange, start_after: bytes | None,
                   max_rows: int) -> tuple[list[tuple[bytes, bytes]], bool]:
        """A page of the rows of ``key_range`` in the checkpoint at ``position``.

        Returns the rows (after ``start_after``, when given) and whether more
        follow. Raises VerifyUnavailable unless the verification is done.
        """
        assert max_rows > 0
        with self._lock:
            verification = self._verifications.get(position)
            if verification is None or verification.state != om_pb2.VERIFY_DONE:
                raise VerifyUnavailable(_unavailable(position, verification))
            store = Store(self._directory(position) / _CHECKPOINT)
            try:
                return _page(store, key_range, start_after, min(max_rows, PAGE_ROWS_MAX))
            finally:
                store.close()

    def close(self) -> None:
        """Stops computing (a restart computes again) and the worker."""
        with self._lock:
            self._closing = True
            if self._process is not None:
                self._process.kill()
        self._queue.put(None)
        self._worker.join(timeout=30)

    # -- behind the apply path ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            position = self._queue.get()
            if position is None:
                return
            self._compute(position)
            self._retire()

    def _compute(self, position: int) -> None:
        verification = self.get(position)
        if verification is None or verification.state != om_pb2.VERIFY_COMPUTING:
            return
        spec, directory = verification.spec, self._directory(position)
        command = [sys.executable, "-m", "om.integrity.compute", str(directory / _CHECKPOINT),
                   str(directory / _TREES), str(position), spec.params.salt.hex(),
                   str(spec.params.leaf_bits), str(spec.params.fanout_bits),
                   str(spec.rows_per_s)]
        started = time.perf_counter()
        with self._lock:
            if self._closing:
                return
            process = self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.PIPE)
        _, errors = process.communicate()
        status = process.returncode
        elapsed = time.perf_counter() - started
        forest = tree_store.open_forest(directory / _TREES) if status == 0 else None
        if forest is None or forest.applied_index != position:
            if not self._closing:
                detail = errors.decode(errors="replace").strip().splitlines()[-3:]
                logger.error("verify at position %d: trees failed (status %s): %s", position,
                             status, " | ".join(detail))
                self._set(replace(verification, state=om_pb2.VERIFY_FAILED,
                                  detail=f"computing the trees failed (status {status}): "
                                         + " | ".join(detail)))
            return
        logger.info("verify at position %d: trees in %.2f s", position, elapsed)
        self._set(Verification(spec, om_pb2.VERIFY_DONE, "", forest, elapsed))

    def _retire(self) -> None:
        """Removes all but the newest ``keep`` verifications."""
        with self._lock:
            old = sorted(self._verifications)[:-self._keep]
            for position in old:
                del self._verifications[position]
                shutil.rmtree(self._directory(position), ignore_errors=True)

    def _recover(self) -> None:
        """Keeps finished verifications, computes interrupted ones, drops debris."""
        if not self._root.is_dir():
            return
        for directory in sorted(self._root.iterdir()):
            spec = _read_meta(directory)
            if spec is None or not (directory / _CHECKPOINT).is_dir():
                shutil.rmtree(directory, ignore_errors=True)
                continue
            forest = tree_store.open_forest(directory / _TREES)
            if forest is not None and forest.applied_index == spec.position:
                self._verifications[spec.position] = Verification(spec, om_pb2.VERIFY_DONE,
                                                                  "", forest)
            else:
                self._verifications[spec.position] = Verification(spec,
                                                                  om_pb2.VERIFY_COMPUTING)
                self._queue.put(spec.position)

    def _set(self, verification: Verification) -> None:
        with self._lock:
            self._verifications[verification.spec.position] = verification

    def _directory(self, position: int) -> Path:
        return self._root / f"{position:020d}"


def forget_up_to(node_dir: Path, position: int) -> None:
    """Removes the node's verifications at or below ``position`` (a stopped node's:
    after a repair they describe a state it no longer holds)."""
    root = node_dir / VERIFY_DIR
    if not root.is_dir():
        return
    for directory in root.iterdir():
        if directory.name.isdigit() and int(directory.name) <= position:
            shutil.rmtree(directory, ignore_errors=True)


def _page(store: Store, key_range: KeyRange, start_after: bytes | None,
          max_rows: int) -> tuple[list[tuple[bytes, bytes]], bool]:
    if start_after is not None and start_after < key_range.start:
        start_after = None
    begin = key_range.start if start_after is None else start_after
    rows: list[tuple[bytes, bytes]] = []
    size = 0
    for key, value in scan.table_rows(store, scan.TABLE_IDS[key_range.table], None, begin):
        if start_after is not None and key <= start_after:
            continue
        if key_range.end is not None and key >= key_range.end:
            return rows, False
        if len(rows) == max_rows or size >= PAGE_BYTES_MAX:
            return rows, True
        rows.append((key, value))
        size += len(key) + len(value)
    return rows, False


def _unavailable(position: int, verification: Verification | None) -> str:
    if verification is None:
        return f"no verification at position {position} here (kept: the newest {KEEP})"
    if verification.state == om_pb2.VERIFY_COMPUTING:
        return f"the trees at position {position} are still being computed"
    return f"the verification at position {position} failed: {verification.detail}"


def _write_meta(directory: Path, spec: VerifySpec) -> None:
    meta = {"position": spec.position, "term": spec.term, "salt": spec.params.salt.hex(),
            "leaf_bits": spec.params.leaf_bits, "fanout_bits": spec.params.fanout_bits,
            "rows_per_s": spec.rows_per_s, "halt_node_id": spec.halt_node_id}
    (directory / _META).write_text(json.dumps(meta))


def _read_meta(directory: Path) -> VerifySpec | None:
    try:
        meta = json.loads((directory / _META).read_text())
        leaf_bits, fanout_bits = int(meta["leaf_bits"]), int(meta["fanout_bits"])
        if not (1 <= leaf_bits <= 24 and 1 <= fanout_bits <= 16):
            return None
        params = TreeParams(bytes.fromhex(meta["salt"]), leaf_bits, fanout_bits)
        return VerifySpec(int(meta["position"]), int(meta["term"]), params,
                          int(meta["rows_per_s"]), str(meta.get("halt_node_id", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
