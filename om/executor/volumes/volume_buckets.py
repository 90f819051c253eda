"""Questions about the buckets of one volume."""

from __future__ import annotations

from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

_SCAN_PAGE = 1024


def sum_bucket_quotas(view: ReadView, volume: str) -> int:
    """The sum of the space quotas of the volume's buckets (unlimited ones count 0)."""
    prefix = tables.bucket_prefix(volume)
    total = 0
    start: bytes | None = None
    while True:
        rows = view.scan(om_pb2.BUCKET, prefix, start, _SCAN_PAGE)
        for _, raw in rows:
            quota = om_pb2.BucketInfo.FromString(raw).quota_in_bytes
            total += max(quota, 0)
        if len(rows) < _SCAN_PAGE:
            return total
        start = rows[-1][0]


def has_buckets(view: ReadView, volume: str) -> bool:
    """True when the volume holds at least one bucket."""
    return bool(view.scan(om_pb2.BUCKET, tables.bucket_prefix(volume), None, 1))
