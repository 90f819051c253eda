"""CPU a row change costs apply to keep the digests, two ways (a micro-benchmark).

    python -m bench.digest_cost [--batches 400] [--writes 200] [--preload 200000]

Batches shaped as ``om freon omkg``'s (a CreateKey: its open key, reply and expiry
rows; a CommitKey: the open key deleted, the key put, the bucket's usage rewritten,
reply and expiry) are written to a store already holding ``--preload`` keys, three
ways, each on a fresh copy:

Each way first writes as many batches untimed (the leaf cache warms, as on a node
that has been serving), then the timed ones:

* ``rows``: the rows alone (what apply wrote before digests);
* ``lookup``: the rows and their digests, apply looking the old rows up (one
  multi-get per table and batch, of the rows the batch changes: the way kept);
* ``shipped``: the rows and their digests, each old row's digest handed over by the
  writer (as a leader that read the rows while executing would ship it), computed
  outside the timed part.

Prints JSON: process CPU per row change of each, and of the two ways over ``rows``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from om.protocol import om_pb2
from om.schema import tables
from om.schema.tables import TableId
from om.statemachine.digests import LOOKUP, Digests, OldRow, RowDigest
from om.statemachine.store import Store

Change = tuple[TableId, bytes, bytes | None]
BUCKET = tables.bucket_key("vol", "bkt")


def _batch(first: int, writes: int, value: bytes) -> list[Change]:
    changes: list[Change] = []
    for i in range(first, first + writes // 2):
        key = tables.key_key("vol", "bkt", f"load/{i}")
        open_key = key + b"/1"
        reply = f"client#{i}".encode()
        expiry = tables.expiry_key(i, "client", i)
        changes += [(om_pb2.OPEN_KEY, open_key, value), (om_pb2.CLIENT_REQUEST_REPLY, reply,
                                                          value),
                    (om_pb2.CLIENT_REQUEST_EXPIRY, expiry, b""),
                    (om_pb2.OPEN_KEY, open_key, None), (om_pb2.KEY, key, value),
                    (om_pb2.BUCKET, BUCKET, value[:60] + str(i).encode()),
                    (om_pb2.CLIENT_REQUEST_REPLY, reply + b"c", value),
                    (om_pb2.CLIENT_REQUEST_EXPIRY, expiry + b"c", b"")]
    return changes


def _preloaded(directory: Path, keys: int, value: bytes) -> Path:
    path = directory / "seed"
    store = Store(path, wal=False)
    digests = Digests.attach(store)
    for first in range(0, keys, 10_000):
        with digests.changes() as digest:
            write = store.new_batch()
            for i in range(first, min(keys, first + 10_000)):
                key = tables.key_key("vol", "bkt", f"seed/{i}")
                store.batch_put(write, om_pb2.KEY, key, value)
                digest.put(om_pb2.KEY, key, value, old=None)
            digest.write(write)
    store.close()
    return path


def _run(seed: Path, copy: Path, batches: list[list[Change]], way: str) -> float:
    shutil.copytree(seed, copy)
    store = Store(copy, wal=False)
    digests = Digests.attach(store)
    olds: list[list[OldRow]] = []
    if way == "shipped":     # the writer's knowledge, gathered before the clock starts
        olds = _shipped(store, digests, batches)
    started = 0.0
    for number, batch in enumerate(batches):
        if number == len(batches) // 2:   # the first half warms the leaf cache, untimed
            started = time.process_time()
        if way == "rows":
            _write_rows(store, batch)
            continue
        with digests.changes() as digest:
            write = store.new_batch()
            for (table, key, value), old in zip(batch, olds[number] if olds else
                                                [LOOKUP] * len(batch), strict=True):
                _add(store, write, table, key, value)
                digest.change(table, key, old, value)
            digest.write(write)
    spent = time.process_time() - started
    store.close()
    return spent


def _shipped(store: Store, digests: Digests, batches: list[list[Change]]) -> list[list[OldRow]]:
    """Each change's old row digest, as the rows stand when its batch applies."""
    current: dict[tuple[TableId, bytes], bytes | None] = {}
    olds: list[list[OldRow]] = []
    for batch in batches:
        found: list[OldRow] = []
        for table, key, value in batch:
            old = current[(table, key)] if (table, key) in current else store.get(table, key)
            found.append(None if old is None else RowDigest(digests.hasher.digest(key, old)))
            current[(table, key)] = value
        olds.append(found)
    return olds


def _add(store: Store, write: object, table: TableId, key: bytes, value: bytes | None) -> None:
    if value is None:
        store.batch_delete(write, table, key)  # type: ignore[arg-type]
    else:
        store.batch_put(write, table, key, value)  # type: ignore[arg-type]


def _write_rows(store: Store, batch: list[Change]) -> None:
    write = store.new_batch()
    for table, key, value in batch:
        _add(store, write, table, key, value)
    store.write(write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--writes", type=int, default=200, help="requests a batch")
    parser.add_argument("--preload", type=int, default=200_000, help="keys already stored")
    args = parser.parse_args(argv)
    value = os.urandom(160)
    batches = [_batch(n * args.writes, args.writes, value) for n in range(2 * args.batches)]
    changes = sum(len(b) for b in batches[args.batches:])
    directory = Path(tempfile.mkdtemp(prefix="om-digest-cost-"))
    try:
        seed = _preloaded(directory, args.preload, value)
        spent: dict[str, float] = {}
        for way in ("rows", "lookup", "shipped", "rows", "lookup", "shipped"):
            spent[way] = min(spent.get(way, 1e9),
                             _run(seed, directory / f"{way}-{time.monotonic_ns()}", batches, way))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    per: Callable[[float], float] = lambda s: round(s / changes * 1e6, 2)  # noqa: E731
    print(json.dumps({
        "row_changes": changes, "preloaded_keys": args.preload,
        "load_average_1m": os.getloadavg()[0],
        "us_per_change": {way: per(s) for way, s in spent.items()},
        "digest_us_per_change": {"lookup": per(spent["lookup"] - spent["rows"]),
                                 "shipped": per(spent["shipped"] - spent["rows"])}},
        indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
