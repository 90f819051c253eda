"""The scrub: every leaf recomputed from its rows and compared with the digest apply kept.

Digests kept by apply stay equal on every node when a row changes behind the
store's back (bit rot, a tool writing the database directly), and a digest leaf
changed alone would differ from its own rows on one node only. Neither is a
replica divergence a verify can name; both are *digest drift*. As the container
scanner of the seed (HDDS-10239) recomputes its Merkle tree from the chunks on
disk, the scrub, on every node, in the background:

1. takes a checkpoint of the live store (rows and digests are written in the same
   batches, so any checkpoint holds them consistent with each other);
2. in a process of its own (``python -m om.integrity.scrub CHECKPOINT OUT
   ROWS_PER_S``, ``nice 19``, paced at ``[verify] scrub_rows_per_s``) sums every
   table's rows into their leaves, counts the index entries of every leaf, and
   compares both with the stored leaves; for the leaves that differ it reads the
   table again for their keys;
3. mends each drifted leaf on the live store (``Digests.recompute_leaf``, under
   apply's lock: the leaf and its index set to the rows it holds now), logs it
   (``digest drift ...``), counts it (``om_scrub_drift_leaves_total``), and asks
   for a verification: a row changed behind the store's back is then compared
   with the other replicas', and named if it differs.

One pass at a time (``om admin verify --full`` runs one now, at its own pace);
passes follow each other with at least ``PASS_GAP_S`` between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from om.integrity import scan
from om.integrity.scan import RateLimit
from om.protocol import om_pb2
from om.schema import tables
from om.schema.row_digests import LEAF_VALUE, SUM_MODULUS
from om.schema.tables import TableId
from om.statemachine import digests
from om.statemachine.digests import Digests
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

SCRUB_DIR = "scrub"
NICE = 19
PASS_GAP_S = 60.0            # between two background passes
KEYS_MAX = 100_000           # keys of drifted leaves a pass hands over, at most
FIRST_PASS_DELAY_S = 30.0    # a node's first pass waits for it to settle


def _leaf_sums(view: Store, meta: om_pb2.DigestMeta, table: TableId,
               limit: RateLimit) -> tuple[list[int], list[int]]:
    """Each leaf's sum and row count, from the table's rows."""
    hasher = digests.hasher_of(meta)
    size = 1 << meta.leaf_bits
    sums, counts = [0] * size, [0] * size
    for page in scan.table_pages(view, table, limit):
        for key, value in page:
            leaf = hasher.leaf(key)
            sums[leaf] = (sums[leaf] + hasher.digest(key, value)) % SUM_MODULUS
            counts[leaf] += 1
    return sums, counts


def _index_counts(view: Store, table: TableId, size: int) -> list[int]:
    counts = [0] * size
    prefix = digests.INDEX_TAG + bytes((table,))
    for key, _ in view.iterate(om_pb2.DIGESTS, prefix):
        counts[int.from_bytes(key[len(prefix):len(prefix) + 4], "big")] += 1
    return counts


def scrub_checkpoint(view: Store, limit: RateLimit) -> dict[str, Any]:
    """Every drifted leaf of a checkpoint (see the module doc), as JSON-ready values."""
    meta = digests.read_meta(view)
    info = view.transaction_info()
    if meta is None or not meta.complete:
        return {"position": info.applied_index, "building": True, "rows": 0, "leaves": 0,
                "drift": []}
    hasher = digests.hasher_of(meta)
    drift: list[dict[str, Any]] = []
    rows = leaves = 0
    for table in sorted(tables.TABLE_NAMES):
        sums, counts = _leaf_sums(view, meta, table, limit)
        index = _index_counts(view, table, len(sums))
        stored = {leaf: (total, count) for leaf, total, count
                  in digests.stored_leaves(view, table)}
        rows += sum(counts)
        leaves += len(stored)
        found = [leaf for leaf in range(len(sums))
                 if stored.get(leaf, (0, 0)) != (sums[leaf], counts[leaf])
                 or index[leaf] != counts[leaf]]
        keys: dict[int, list[str]] = {leaf: [] for leaf in found}
        if found:        # a second read, for the keys of the drifted leaves only
            for key, _ in scan.table_rows(view, table, limit):
                leaf = hasher.leaf(key)
                if leaf in keys and sum(map(len, keys.values())) < KEYS_MAX:
                    keys[leaf].append(key.hex())
        drift += [{"table": tables.TABLE_NAMES[table], "leaf": leaf,
                   "recorded": _pack(*stored.get(leaf, (0, 0))).hex(),
                   "computed": _pack(sums[leaf], counts[leaf]).hex(),
                   "index_rows": index[leaf], "rows": counts[leaf], "keys": keys[leaf]}
                  for leaf in found]
    return {"position": info.applied_index, "building": False, "rows": rows,
            "leaves": leaves, "drift": drift}


def _pack(total: int, rows: int) -> bytes:
    return LEAF_VALUE.pack(total.to_bytes(32, "big"), rows % (1 << 64))


def main(argv: list[str]) -> int:
    """Scrubs a checkpoint into a JSON file; returns the exit status (2: bad arguments)."""
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    checkpoint, out, rows_per_s = Path(argv[0]), Path(argv[1]), int(argv[2])
    with contextlib.suppress(OSError):  # not allowed here: run at the normal priority
        os.nice(NICE)
    store = Store(checkpoint, read_only=True)
    try:
        found = scrub_checkpoint(store, RateLimit(rows_per_s=rows_per_s or None))
    finally:
        store.close()
    out.write_text(json.dumps(found))
    return 0


class Scrubber:
    """This node's scrub passes: in the background, and now (``scrub_now``)."""

    def __init__(self, node_dir: Path, store: Store,
                 applying: Callable[[], AbstractContextManager[object]],
                 rows_per_s: int, on_drift: Callable[[int], None]) -> None:
        assert rows_per_s >= 0
        self._work = node_dir / SCRUB_DIR
        self._store = store
        self._applying = applying
        self.rows_per_s = rows_per_s
        self._on_drift = on_drift        # mended leaves: verify soon
        self._lock = asyncio.Lock()
        self._loop: asyncio.Task[None] | None = None
        self.passes = 0
        self.drift_leaves = 0
        self.last: om_pb2.ScrubReplicaResponse | None = None

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def start(self) -> None:
        """Starts the background passes (none when ``rows_per_s`` is 0)."""
        if self.rows_per_s:
            self._loop = asyncio.get_running_loop().create_task(self._forever())

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)

    async def _forever(self) -> None:
        await asyncio.sleep(FIRST_PASS_DELAY_S)
        while True:
            started = time.monotonic()
            try:
                await self.scrub_now(self.rows_per_s)
            except Exception:
                logger.exception("scrub pass failed")
            await asyncio.sleep(max(PASS_GAP_S, PASS_GAP_S - (time.monotonic() - started)))

    async def scrub_now(self, rows_per_s: int = 0) -> om_pb2.ScrubReplicaResponse:
        """One pass (after any pass running now); each drifted leaf mended."""
        async with self._lock:
            started = time.perf_counter()
            found = await self._pass(rows_per_s or self.rows_per_s)
            answer = om_pb2.ScrubReplicaResponse(position=found["position"], rows=found["rows"],
                                                 leaves=found["leaves"])
            for drift in found["drift"]:
                answer.drift.append(await asyncio.to_thread(self._mend, drift))
            answer.duration_s = time.perf_counter() - started
        self.passes += 1
        self.drift_leaves += len(answer.drift)
        self.last = answer
        logger.info("scrub pass at position %d: %d rows, %d leaves, %d drifted, in %.1f s",
                    answer.position, answer.rows, answer.leaves, len(answer.drift),
                    answer.duration_s)
        if answer.drift:
            self._on_drift(len(answer.drift))
        return answer

    async def _pass(self, rows_per_s: int) -> dict[str, Any]:
        await asyncio.to_thread(shutil.rmtree, self._work, True)
        self._work.mkdir(parents=True)
        try:
            await asyncio.to_thread(self._store.checkpoint, self._work / "checkpoint")
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "om.integrity.scrub", str(self._work / "checkpoint"),
                str(self._work / "drift.json"), str(rows_per_s),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            try:
                _, errors = await process.communicate()
            finally:
                if process.returncode is None:
                    process.kill()
            if process.returncode != 0:
                tail = " | ".join(errors.decode(errors="replace").strip().splitlines()[-3:])
                raise RuntimeError(f"the scrub process failed ({process.returncode}): {tail}")
            found: dict[str, Any] = json.loads((self._work / "drift.json").read_text())
            return found
        finally:
            await asyncio.to_thread(shutil.rmtree, self._work, True)

    def _mend(self, drift: dict[str, Any]) -> om_pb2.DigestDrift:
        """Sets a drifted leaf to its rows on the live store; what the scrub saw."""
        table = scan.TABLE_IDS[drift["table"]]
        with self._applying():
            before, after = Digests.attach(self._store).recompute_leaf(
                table, drift["leaf"], {bytes.fromhex(k) for k in drift["keys"]})
        logger.error("digest drift: %s leaf %d held %s for %d index entries, its %d rows "
                     "hash to %s; recomputed from the rows (%s -> %s): a verify compares "
                     "them with the other replicas next", drift["table"], drift["leaf"],
                     drift["recorded"][:16], drift["index_rows"], drift["rows"],
                     drift["computed"][:16], before.hex()[:16], after.hex()[:16])
        return om_pb2.DigestDrift(table=drift["table"], leaf=drift["leaf"],
                                  recorded=bytes.fromhex(drift["recorded"]),
                                  computed=bytes.fromhex(drift["computed"]),
                                  index_rows=drift["index_rows"], rows=drift["rows"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
