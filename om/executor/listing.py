"""Paging for the List* requests: prefix, exclusive start key, max keys, truncated."""

from __future__ import annotations

from om.executor.context import Limits
from om.schema.read_view import ReadView
from om.schema.tables import TableId


def page_size(requested: int, limits: Limits) -> int:
    """The number of entries to return: the default for 0 (the gate refused more than
    ``list_max_keys``)."""
    assert requested <= limits.list_max_keys
    return requested or limits.list_default_keys


def list_page(view: ReadView, table: TableId, scope: bytes, prefix: str, start: str,
              limit: int) -> tuple[list[bytes], bool]:
    """Values of up to ``limit`` rows under ``scope + prefix`` after ``scope + start``.

    Returns the values and whether more rows follow (the truncated flag).
    """
    assert limit > 0
    full_prefix = scope + prefix.encode()
    start_after = scope + start.encode() if start else None
    rows = view.scan(table, full_prefix, start_after, limit + 1)
    assert len(rows) <= limit + 1
    truncated = len(rows) > limit
    return [value for _, value in rows[:limit]], truncated
