"""What a handler may read: committed rows of the store."""

from __future__ import annotations

from typing import Protocol

from om.schema.tables import TableId


class ReadView(Protocol):
    """Read access to applied state. Implementations must not see uncommitted writes."""

    def get(self, table: TableId, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table``, or None."""
        ...

    def scan(
        self, table: TableId, prefix: bytes, start_after: bytes | None, limit: int
    ) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` rows whose key starts with ``prefix``, in key order,
        beginning after ``start_after`` (exclusive) when given."""
        ...
