"""What a handler may read: committed rows of the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from om.schema.tables import TableId

Parsed = TypeVar("Parsed")


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

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        """The row parsed by ``parse`` (always the same ``parse`` for a table), or None.

        The result may be shared with every other caller until the row changes (the
        store keeps the rows the request path reads on every write, a volume's, a
        bucket's, the upgrade rows, parsed: ``om.statemachine.store``): never mutate
        it; copy it to change it. Views without a cache parse each time
        (``parse_row``)."""
        ...


def parse_row(view: ReadView, table: TableId, key: bytes,
              parse: Callable[[bytes], Parsed]) -> Parsed | None:
    """``ReadView.parsed`` for a view that keeps no parsed rows: read, then parse."""
    raw = view.get(table, key)
    return None if raw is None else parse(raw)


class SnapshotViews(Protocol):
    """A node's OM snapshot checkpoints, as handlers may consult them (the node's
    ``om.statemachine.om_snapshot_checkpoints`` provides them)."""

    def open(self, snapshot_id: int) -> ReadView | None:
        """The applied state the snapshot holds, or None when this node has no
        checkpoint of it."""
        ...

    def position(self, snapshot_id: int) -> int:
        """The log position the snapshot's checkpoint holds here (0: none here)."""
        ...

    def headroom_problem(self) -> str | None:
        """Why this node's disk has no room for another checkpoint, or None."""
        ...
