"""ChangeRecorder: the row changes and quota deltas one request makes.

The recorder is the executor's only output besides the response. Its contents
become part of a ``PersistDbBatch``; apply writes them verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from om.protocol import om_pb2
from om.schema.tables import TableId

QUOTA_TABLES = (om_pb2.VOLUME, om_pb2.BUCKET)
TABLES = frozenset(om_pb2.Table.values())


@dataclass(frozen=True)
class QuotaChange:
    """A change of a volume's or bucket's used counters."""

    table: TableId
    key: bytes
    object_id: int
    bytes_delta: int
    namespace_delta: int


@dataclass
class ChangeRecorder:
    """Collects puts, deletes and quota deltas, in the order they were made."""

    ops: list[om_pb2.TableOp] = field(default_factory=list)
    quota: list[QuotaChange] = field(default_factory=list)

    def put(self, table: TableId, key: bytes, value: bytes) -> None:
        """Records that ``key`` of ``table`` becomes ``value``."""
        assert table in TABLES
        assert key
        self.ops.append(om_pb2.TableOp(table=table, key=key, value=value))

    def delete(self, table: TableId, key: bytes) -> None:
        """Records that ``key`` of ``table`` is removed."""
        assert table in TABLES
        assert key
        self.ops.append(om_pb2.TableOp(table=table, key=key, delete=True))

    def move(self, src_table: TableId, src_key: bytes, dst_table: TableId, dst_key: bytes,
             value: bytes) -> None:
        """Records a row leaving ``src_table`` for ``dst_table`` with ``value``.

        Apply is dumb, so the leader ships the destination value; a move is a
        delete plus a put that land together in one write batch.
        """
        assert (src_table, src_key) != (dst_table, dst_key)
        self.delete(src_table, src_key)
        self.put(dst_table, dst_key, value)

    def quota_delta(self, table: TableId, key: bytes, object_id: int, bytes_delta: int,
                    namespace_delta: int) -> None:
        """Records that a volume's or bucket's used counters change by the deltas."""
        assert table in QUOTA_TABLES
        assert object_id > 0
        if bytes_delta or namespace_delta:
            self.quota.append(QuotaChange(table, key, object_id, bytes_delta, namespace_delta))

    def clear(self) -> None:
        """Forgets everything: the request ended in an error and writes nothing."""
        self.ops.clear()
        self.quota.clear()

    @property
    def empty(self) -> bool:
        """True when the request changes nothing."""
        return not self.ops and not self.quota

    def encoded_size(self) -> int:
        """Approximate bytes the changes add to a batch (for the batch byte cap)."""
        return sum(op.ByteSize() for op in self.ops) + 48 * len(self.quota)
