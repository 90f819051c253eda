"""Group commit, the pure part: packing executed requests into PersistDb batches.

The asyncio shell (``om/flows/batch_pipeline.py``) decides *when* to seal (whatever
queued while earlier batches were in flight); this module decides *what* goes
in a batch: requests in execution order, under a byte cap. A single request
larger than the cap still travels alone, since the cap is a target and not a
correctness limit (the frame limit bounds a request's size anyway).

Invariant: managed indexes inside a batch are strictly increasing, and every
batch's indexes are above the previous batch's, because requests are executed
and enqueued in one thread in index order. Apply persists the highest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from om.executor.change_recorder import ChangeRecorder
from om.protocol import om_pb2


@dataclass
class PendingWrite:
    """An executed request waiting for its batch to commit."""

    managed_index: int
    recorder: ChangeRecorder
    reply: om_pb2.ClientRequestReply | None   # None for system writes (expiry sweeps)
    expiry_ops: list[om_pb2.TableOp] = field(default_factory=list)

    @cached_property
    def size(self) -> int:
        """Approximate bytes this write adds to a batch (computed once: an
        executed write's changes are final)."""
        reply = 0 if self.reply is None else self.reply.ByteSize()
        return self.recorder.encoded_size() + reply + 16 * len(self.expiry_ops)


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
                and self._bytes + write.size <= self._bytes_max)

    def add(self, write: PendingWrite) -> None:
        """Adds a write that ``fits``."""
        assert self.fits(write)
        if write.managed_index:
            assert write.managed_index > self._last_index, "batch order is index order"
            self._last_index = write.managed_index
        self.writes.append(write)
        self._bytes += write.size

    def seal(self, batch_id: int, timestamp_ms: int, leader_id: str) -> om_pb2.PersistDbBatch:
        """The batch carrying every added write, in order (none: a read round's)."""
        batch = om_pb2.PersistDbBatch(batch_id=batch_id, timestamp_ms=timestamp_ms,
                                      managed_index=self._last_index, leader_id=leader_id,
                                      request_count=len(self.writes))
        for write in self.writes:
            batch.ops.extend(write.recorder.ops)
            batch.quota_deltas.extend(
                om_pb2.QuotaDelta(table=q.table, key=q.key, object_id=q.object_id,
                                  bytes_delta=q.bytes_delta, namespace_delta=q.namespace_delta)
                for q in write.recorder.quota)
            if write.reply is not None:
                reply = batch.replies.add()
                reply.CopyFrom(write.reply)
                reply.timestamp_ms = timestamp_ms
            batch.retry_expiry.extend(write.expiry_ops)
        return batch
