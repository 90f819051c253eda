"""Group commit, the pure part: packing executed requests into PersistDb batches.

The asyncio shell (``om/flows/batch_pipeline.py``) decides *when* to seal (whatever
queued while earlier batches were in flight); this module decides *what* goes
in a batch: requests in execution order, under a byte cap. A single request
larger than the cap still travels alone, since the cap is a target and not a
correctness limit (the frame limit bounds a request's size anyway).

Each write is encoded once, when it is queued (``PendingWrite.of``): its part of
a ``PersistDbBatch`` (ops, quota deltas, reply rows, expiry deletes) as bytes.
Sealing writes the header fields and concatenates the parts (protobuf parses
concatenated messages as one, repeated fields in order), so a batch is never
copied field by field nor serialized twice, and a write's size is exact.

Invariant: managed indexes inside a batch are strictly increasing, and every
batch's indexes are above the previous batch's, because requests are executed
and enqueued in one thread in index order. Apply persists the highest.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.executor.change_recorder import ChangeRecorder
from om.protocol import om_pb2
from om.schema.tables import EVERY_SHARDS_TABLES


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """An executed request waiting for its batch to commit: its part of a batch, encoded.

    ``managed_index`` is 0 for a system write (an expiry sweep). ``every_shard``: it
    changes rows of ``EVERY_SHARDS_TABLES`` only (a volume, a token, a certificate, an
    upgrade row): with S > 1 shards its batch is a slice every shard applies."""

    managed_index: int
    encoded: bytes
    every_shard: bool = False

    @classmethod
    def of(cls, managed_index: int, recorder: ChangeRecorder,
           reply: om_pb2.ReplyRow | None = None,
           expiry_ops: list[om_pb2.TableOp] | None = None,
           sharded: bool = False) -> PendingWrite:
        """Encodes an executed write's changes, its reply rows and expiry deletes;
        ``sharded`` (S > 1): whether it is ``every_shard`` is worked out too (at S = 1
        no batch is split by it, and the write path does not pay for the look)."""
        part = om_pb2.PersistDbBatch(
            ops=recorder.ops,
            quota_deltas=[om_pb2.QuotaDelta(table=q.table, key=q.key, object_id=q.object_id,
                                            bytes_delta=q.bytes_delta,
                                            namespace_delta=q.namespace_delta)
                          for q in recorder.quota],
            reply_rows=() if reply is None else (reply,),
            retry_expiry=expiry_ops or ())
        every_shard = sharded and bool(recorder.ops) \
            and all(op.table in EVERY_SHARDS_TABLES for op in recorder.ops) \
            and all(q.table == om_pb2.VOLUME for q in recorder.quota)
        return cls(managed_index, part.SerializeToString(deterministic=True), every_shard)

    @property
    def size(self) -> int:
        """The bytes this write adds to a batch."""
        return len(self.encoded)


class BatchBuilder:
    """Accumulates pending writes for one batch under a byte cap."""

    def __init__(self, bytes_max: int, writes_max: int) -> None:
        assert bytes_max > 0
        assert writes_max > 0
        self._bytes_max = bytes_max
        self._writes_max = writes_max
        self.writes: list[PendingWrite] = []
        self._bytes = 0
        self._last_index = 0   # the highest managed index added (system writes carry 0)

    def fits(self, write: PendingWrite) -> bool:
        """True when ``write`` may join: the batch is empty or stays under both caps."""
        if not self.writes:
            return True
        return (len(self.writes) < self._writes_max
                and self._bytes + len(write.encoded) <= self._bytes_max)

    def add(self, write: PendingWrite) -> None:
        """Adds a write that ``fits``."""
        assert self.fits(write)
        if write.managed_index:
            assert write.managed_index > self._last_index, "batch order is index order"
            self._last_index = write.managed_index
        self.writes.append(write)
        self._bytes += len(write.encoded)

    def seal(self, batch_id: int, timestamp_ms: int, leader_id: str, term: int) -> bytes:
        """The encoded ``PersistDbBatch`` carrying every added write, in order (none: a
        read round's)."""
        header = om_pb2.PersistDbBatch(batch_id=batch_id, timestamp_ms=timestamp_ms,
                                       managed_index=self._last_index, leader_id=leader_id,
                                       request_count=len(self.writes), term=term)
        return b"".join([header.SerializeToString(deterministic=True),
                         *(write.encoded for write in self.writes)])
