"""``om freon generate``: a namespace written straight into a node's RocksDB, offline.

Ozone's freon has generators that fill an OM DB directly rather than through
RPC; this is ours. ``generate(store, Namespace(...))`` runs the real handlers
(``om.executor.registry.dispatch``) on the requests a client would send, in the
order it would send them (CreateVolume per volume, CreateBucket per bucket,
then CreateKey + CommitKey per key), each with the next managed index, as the
leader hands them out, and the time of its chunk. What a chunk of requests
recorded goes to RocksDB in ONE write batch through ``StateMachine.seed``: the
rows, the quota deltas merged per row, and the transaction info, the write
``apply`` makes of a batch.

Invariants, and why they hold:

* Rows are the leader flow's for the same requests, managed indexes and clock,
  byte for byte: the handlers build and encode them, nothing here does
  (``tests/test_preload.py`` compares with a node fed the same requests).
* usedBytes and usedNamespace come from the handlers' quota deltas, added by
  apply's code. Apply adds a delta to the row stored *before* its batch, so
  volumes are written in an earlier batch than the buckets charging them, and
  buckets than the keys: each phase (volumes, buckets, keys) ends its chunk.
* Within a chunk, handlers read the store overlaid with the chunk's own changes
  (``CacheView``, the old flow's write cache), and quota checks count the chunk's
  positive deltas as reservations, as the leader counts in-flight writes'.
* The transaction info keeps the highest managed index used, so a leader
  continues above every generated object and update id. The applied position
  and term stay 0: the seed is state from *before* the Raft log, and a log that
  starts empty (pysyncobj's first entry is position 1) is then applied in full
  over it. So every node of a cluster must start from the same seed:
  ``copy_database`` makes byte-identical copies.
* A row put and then deleted in one chunk that did not exist before it
  (CreateKey's open key, which CommitKey removes) is not written at all.
* The digests (``om.statemachine.digests``) are written with the rows, by the same
  write as apply's, under a digest key drawn at random for the new database: every
  copy carries it, so the nodes seeded from it compare without building anything.
* With shards (``Namespace.shards`` > 1, docs/SHARDS.md) each shard's store gets its
  part (``generate_shards``): every volume's and every bucket's row (rows every shard
  keeps, as a running node's shard 0 writes them: ``tables.EVERY_SHARDS_TABLES``), and
  the keys of the buckets it owns (``shard_of``). Every shard runs the same requests in
  the same order with the same managed indexes and skips (counts without running)
  another shard's keys, so the volume and bucket rows are equal in every shard, and
  each key's rows (object ids included) are the one-shard seed's, in its owner only.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from om.client import requests as build
from om.config import SHARDS_MAX, shard_data_dir
from om.executor.change_recorder import ChangeRecorder, QuotaChange
from om.executor.context import ExecContext
from om.executor.quota_reservations import QuotaReservationTable
from om.executor.registry import dispatch
from om.gatekeeper import validation
from om.protocol import om_pb2
from om.protocol.shard_routing import shard_of
from om.schema.read_view import Parsed, parse_row
from om.schema.tables import TableId
from om.statemachine.apply import StateMachine
from om.statemachine.digests import Digests
from om.statemachine.store import Store
from om.statemachine.write_cache import CacheView, WriteCache

CLIENT_ID = "om-freon-generate"
DEFAULT_BATCH_KEYS = 10_000
Row = tuple[TableId, bytes]
Clock = Callable[[], int]
Progress = Callable[[int], None]


class GenerateError(Exception):
    """A generated request failed (a name taken, an invalid name, a used store...)."""


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, as the leader fixes them."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Namespace:
    """What to generate: ``volumes`` volumes of ``buckets`` buckets each, and ``keys``
    keys spread evenly over all buckets in contiguous ranges of their index.

    Names: the volume ``volume`` (``<volume>-<i>`` when there are several), the
    bucket ``bucket`` in each (``<bucket>-<j>``), keys ``<prefix>/<index>`` with
    one index over all buckets (freon's ``omkg`` names). ``layout`` is the buckets'
    (``fso``: file-system buckets, where ``<prefix>/<index>`` is file ``<index>`` in
    directory ``<prefix>``, created with the first key; empty: the server's default).
    ``shards`` > 1: the namespace of a node with that many shards, of which this one is
    shard ``shard``'s part (``owns``; ``for_shard``).
    """

    volumes: int = 1
    buckets: int = 1
    keys: int = 0
    volume: str = "vol1"
    bucket: str = "bucket1"
    prefix: str = "preload"
    size: int = 0
    user: str = ""
    batch_keys: int = DEFAULT_BATCH_KEYS
    layout: str = ""
    shards: int = 1
    shard: int = 0

    def __post_init__(self) -> None:
        if self.volumes < 1 or self.buckets < 1 or self.keys < 0:
            raise ValueError("--volumes and --buckets must be >= 1, --keys >= 0")
        if self.size < 0 or self.batch_keys < 1:
            raise ValueError("--size must be >= 0 and --batch-keys >= 1")
        if not 1 <= self.shards <= SHARDS_MAX:
            raise ValueError(f"--shards must be 1 to {SHARDS_MAX}")
        assert 0 <= self.shard < self.shards

    def for_shard(self, shard: int) -> Namespace:
        """Shard ``shard``'s part of this namespace."""
        return dataclasses.replace(self, shard=shard)

    def owns(self, volume: str, bucket: str) -> bool:
        """Whether this shard holds the rows of ``bucket`` and its keys (one shard:
        every bucket's, with no hash per key)."""
        return self.shards == 1 or shard_of(volume, bucket, self.shards) == self.shard

    def volume_names(self) -> list[str]:
        """The volumes, in creation order."""
        return _names(self.volume, self.volumes)

    def bucket_names(self) -> list[tuple[str, str]]:
        """Every (volume, bucket), in creation order."""
        return [(v, b) for v in self.volume_names() for b in _names(self.bucket, self.buckets)]

    def key_names(self) -> Iterator[tuple[str, str, str]]:
        """Every (volume, bucket, key), in creation order."""
        buckets = self.bucket_names()
        for number, (volume, bucket) in enumerate(buckets):
            first = number * self.keys // len(buckets)
            last = (number + 1) * self.keys // len(buckets)
            for index in range(first, last):
                yield volume, bucket, f"{self.prefix}/{index}"


def _names(base: str, count: int) -> list[str]:
    return [base] if count == 1 else [f"{base}-{i}" for i in range(count)]


@dataclass(frozen=True)
class GenerateResult:
    """What ``generate`` wrote."""

    volumes: int
    buckets: int
    keys: int
    batches: int
    managed_index: int
    seconds: float

    @property
    def keys_per_s(self) -> float:
        return self.keys / self.seconds if self.seconds > 0 else 0.0


class _ChunkView:
    """What a chunk's handlers read: the store overlaid with the chunk's changes.

    Only writing a chunk changes the store, so store reads are memoized until then
    (every key's handlers read its bucket's row: once per chunk from RocksDB)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.changes = WriteCache()
        self._merged = CacheView(self.changes, store)
        self._read: dict[Row, bytes | None] = {}

    def get(self, table: TableId, key: bytes) -> bytes | None:
        changed, value = self.changes.lookup(table, key)
        if changed:
            return value
        row = (table, key)
        if row not in self._read:
            self._read[row] = self._store.get(table, key)
        return self._read[row]

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        return self._merged.scan(table, prefix, start_after, limit)

    def clear(self) -> None:
        """Forgets the chunk: its changes are in the store now."""
        self.changes.clear()
        self._read.clear()


class _Chunk:
    """Requests executed since the last write batch, and what they recorded."""

    def __init__(self, machine: StateMachine, user: str, clock: Clock) -> None:
        self._machine = machine
        self._user = user
        self._clock = clock
        self._view = _ChunkView(machine.store)
        self._index = machine.managed_index
        self._reset()
        self.batches = 0

    def _reset(self) -> None:
        """Starts the next chunk: nothing executed, the clock read again."""
        self._view.clear()
        self._reservations = QuotaReservationTable()   # the chunk's unwritten deltas
        self._ops: dict[Row, om_pb2.TableOp] = {}      # each row's last op
        self._born: set[Row] = set()        # rows whose first op in the chunk is a put
        self._usage: dict[tuple[TableId, bytes, int], list[int]] = {}
        self._now_ms = self._clock()
        self.requests = 0

    def skip(self, requests: int = 1) -> None:
        """Passes the managed indexes of ``requests`` requests another shard runs."""
        assert requests > 0
        self._index += requests

    def run(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Executes ``request`` with the next managed index; GenerateError if it fails."""
        self._index += 1
        request.client_id = CLIENT_ID
        request.user = self._user
        context = ExecContext(self._user, self._index, self._now_ms, self._reservations)
        refusal = validation.problem(request, context.limits)
        if refusal is not None:   # the gate a client's request passes first
            raise GenerateError(f"{om_pb2.Type.Name(request.cmd_type)} refused: "
                                f"{om_pb2.Status.Name(refusal.status)} {refusal.message}")
        recorder = ChangeRecorder()
        response = dispatch(request, self._view, recorder, context)
        if response.status != om_pb2.OK:
            raise GenerateError(f"{om_pb2.Type.Name(request.cmd_type)} failed: "
                                f"{om_pb2.Status.Name(response.status)} {response.message}")
        for op in recorder.ops:
            self._record(op)
        self._reservations.reserve(self._index, recorder.quota)
        for change in recorder.quota:
            self._charge(change)
        self.requests += 1
        return response

    def _record(self, op: om_pb2.TableOp) -> None:
        row = (op.table, op.key)
        if row not in self._ops and not op.delete:
            self._born.add(row)
        self._ops[row] = op
        self._view.changes.put(op.table, op.key, None if op.delete else op.value, 1)

    def _charge(self, change: QuotaChange) -> None:
        slot = (change.table, change.key, change.object_id)
        usage = self._usage.setdefault(slot, [0, 0])
        usage[0] += change.bytes_delta
        usage[1] += change.namespace_delta

    def write(self) -> None:
        """Writes the chunk in one write batch through ``StateMachine.seed``."""
        if not self.requests:
            return
        store = self._machine.store
        batch = om_pb2.PersistDbBatch(managed_index=self._index, timestamp_ms=self._now_ms,
                                      request_count=self.requests)
        batch.ops.extend(op for row, op in self._ops.items()
                         if not (op.delete and row in self._born and store.get(*row) is None))
        batch.quota_deltas.extend(
            om_pb2.QuotaDelta(table=table, key=key, object_id=object_id,
                              bytes_delta=used[0], namespace_delta=used[1])
            for (table, key, object_id), used in self._usage.items())
        self._machine.seed(batch)
        self.batches += 1
        self._reset()


def generate(store: Store, namespace: Namespace, clock: Clock = wall_clock_ms,
             progress: Progress | None = None) -> GenerateResult:
    """Writes ``namespace`` into ``store``, which no Raft log was applied to.

    ``progress`` is called with the number of keys written after each batch.
    GenerateError when a request fails (e.g. the volume already exists) or the
    store has applied log entries; batches written before the failure stay.
    """
    machine = StateMachine(store)
    if machine.applied_index or machine.term:
        raise GenerateError(f"{store.path} has applied Raft log entries (position "
                            f"{machine.applied_index}): generate into a new database")
    started = time.perf_counter()
    chunk = _Chunk(machine, namespace.user or getpass.getuser(), clock)
    volumes, buckets = _volumes_and_buckets(chunk, namespace)
    written = 0
    for volume, bucket, key in namespace.key_names():
        if not namespace.owns(volume, bucket):
            chunk.skip(2)   # another shard's CreateKey and CommitKey
            continue
        _put_key(chunk, volume, bucket, key, namespace.size)
        written += 1
        if chunk.requests >= 2 * namespace.batch_keys:
            chunk.write()
            if progress is not None:
                progress(written)
    chunk.write()
    if progress is not None:
        progress(written)
    return GenerateResult(volumes, buckets, written, chunk.batches, machine.managed_index,
                          time.perf_counter() - started)


def _volumes_and_buckets(chunk: _Chunk, namespace: Namespace) -> tuple[int, int]:
    """Creates the volumes and then the buckets (every shard keeps every one's row), each
    phase its own chunk (module docstring); the volumes and buckets written."""
    for volume in namespace.volume_names():
        chunk.run(build.create_volume(volume))
    chunk.write()
    for volume, bucket in namespace.bucket_names():
        chunk.run(build.create_bucket(volume, bucket, layout=namespace.layout))
    chunk.write()
    return namespace.volumes, namespace.volumes * namespace.buckets


def _put_key(chunk: _Chunk, volume: str, bucket: str, key: str, size: int) -> None:
    """CreateKey then CommitKey, as a client's put does (``OMClient.put_key``)."""
    created = chunk.run(build.create_key(volume, bucket, key, data_size=size))
    session = created.create_key.client_session_id
    chunk.run(build.commit_key(volume, bucket, key, session, size))


def generate_into(db_path: Path, namespace: Namespace, clock: Clock = wall_clock_ms,
                  progress: Progress | None = None,
                  more: Sequence[Namespace] = ()) -> GenerateResult:
    """``generate`` into a new database at ``db_path``, closed (flushed) afterwards;
    then each namespace of ``more`` (other volumes) into the same database, its
    managed indexes continuing; the result adds them up.

    Written without RocksDB's write-ahead log, which nothing needs: the
    checkpoint taken at the end flushes every memtable to synced files, and a
    generation that did not finish leaves a directory to delete, not a database
    to trust. The database at ``db_path`` is that checkpoint."""
    if db_path.exists():
        raise GenerateError(f"{db_path} exists: generate into a new directory")
    scratch = db_path.with_name(db_path.name + ".generating")
    shutil.rmtree(scratch, ignore_errors=True)
    store = Store(scratch, wal=False)
    try:
        Digests.attach(store, os.urandom(32))   # its own key: every copy carries it
        result = generate(store, namespace, clock, progress)
        for other in more:
            added = generate(store, other, clock)
            result = GenerateResult(
                result.volumes + added.volumes, result.buckets + added.buckets,
                result.keys + added.keys, result.batches + added.batches,
                added.managed_index, result.seconds + added.seconds)
        store.checkpoint(db_path)
    finally:
        store.close()
        Store.destroy(scratch)
    return result


def generate_shards(node_dir: Path, namespace: Namespace, clock: Clock = wall_clock_ms,
                    progress: Progress | None = None) -> list[GenerateResult]:
    """``generate_into`` each shard's part of ``namespace`` (``namespace.shards`` of
    them) into its store in the node data directory ``node_dir`` (shard 0's
    ``node_dir/db``, shard k's ``node_dir/shard-k/db``: ``config.shard_data_dir``), in
    shard order; each shard's result. ``progress`` counts the keys of all shards."""
    results: list[GenerateResult] = []
    for shard in range(namespace.shards):
        before = sum(result.keys for result in results)
        shard_progress = None if progress is None else (
            lambda done, before=before: progress(before + done))
        results.append(generate_into(shard_data_dir(node_dir, shard) / "db",
                                     namespace.for_shard(shard), clock, shard_progress))
    return results


def copy_shards(node_dir: Path, destinations: Sequence[Path], shards: int) -> None:
    """``copy_database`` of each of the ``shards`` stores of the node data directory
    ``node_dir`` into the same place of each node data directory of ``destinations``."""
    for shard in range(shards):
        copy_database(shard_data_dir(node_dir, shard) / "db",
                      [shard_data_dir(node, shard) / "db" for node in destinations])


def copy_database(source: Path, destinations: Sequence[Path]) -> None:
    """Byte-identical copies of the closed database ``source`` (e.g. one node's ``db``).

    SST files are hard-linked (RocksDB never changes one: it writes new files
    and deletes old ones, and a deleted link leaves the other copies theirs);
    every other file is copied, as RocksDB's own checkpoints do. Where a link
    is impossible (another file system) the file is copied."""
    for destination in destinations:
        if destination.exists():
            raise GenerateError(f"{destination} exists: seed only empty data directories")
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, destination, copy_function=_link_or_copy)


def _link_or_copy(source: str, destination: str) -> None:
    if source.endswith(".sst"):
        try:
            os.link(source, destination)
            return
        except OSError:
            pass
    shutil.copy2(source, destination)
