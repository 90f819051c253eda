"""Ozone's quota rules, counting what in-flight requests have reserved.

A quota of -1 means unlimited (Ozone's QUOTA_RESET). A request passes a check
when ``used + reserved + delta <= quota``: ``used`` is the applied counter and
``reserved`` the positive deltas of requests executed but not yet applied, so
concurrent requests can never together exceed a quota. Without a quota, the bytes in
use still stop at ``USAGE_MAX``: the stored counters and the deltas a batch merges
stay 64-bit numbers, so apply never overflows one (it would stop every node).
"""

from __future__ import annotations

from om.executor.context import ExecContext
from om.executor.errors import OMError
from om.protocol import om_pb2
from om.schema import tables

UNLIMITED = -1
USAGE_MAX = (1 << 63) - 1   # a bucket's bytes in use, as Ozone's long counts them


def normalize_quota(value: int) -> int:
    """Maps a requested quota (0 or -1 = unlimited; the gate refused anything below) to
    the stored value."""
    assert value >= UNLIMITED
    return UNLIMITED if value == 0 else value


def check_bucket_quota(bucket: om_pb2.BucketInfo, ctx: ExecContext, bytes_delta: int,
                       namespace_delta: int) -> None:
    """QUOTA_EXCEEDED when adding the deltas would pass the bucket's quotas, or its bytes
    in use ``USAGE_MAX``."""
    key = tables.bucket_key(bucket.volume_name, bucket.bucket_name)
    reserved_bytes, reserved_namespace = ctx.reservations.reserved(om_pb2.BUCKET, key)
    assert reserved_bytes >= 0
    assert reserved_namespace >= 0
    name = f"/{bucket.volume_name}/{bucket.bucket_name}"
    if bytes_delta > 0:
        total = bucket.used_bytes + reserved_bytes + bytes_delta
        if total > USAGE_MAX:
            raise OMError(om_pb2.QUOTA_EXCEEDED,
                          f"Bucket {name} would hold {total} bytes, more than it can count "
                          f"({USAGE_MAX})")
        if bucket.quota_in_bytes != UNLIMITED and total > bucket.quota_in_bytes:
            raise OMError(om_pb2.QUOTA_EXCEEDED,
                          f"The DiskSpace quota of bucket {name} is exceeded: quota "
                          f"{bucket.quota_in_bytes} bytes, in use and reserved "
                          f"{bucket.used_bytes + reserved_bytes}, requested {bytes_delta}")
    if namespace_delta > 0 and bucket.quota_in_namespace != UNLIMITED:
        total = bucket.used_namespace + reserved_namespace + namespace_delta
        if total > bucket.quota_in_namespace:
            raise OMError(om_pb2.QUOTA_EXCEEDED,
                          f"The namespace quota of bucket {name} is exceeded: quota "
                          f"{bucket.quota_in_namespace}, in use and reserved "
                          f"{bucket.used_namespace + reserved_namespace}")


def check_volume_namespace(volume: om_pb2.VolumeInfo, ctx: ExecContext) -> None:
    """QUOTA_EXCEEDED when one more bucket would pass the volume's namespace quota."""
    if volume.quota_in_namespace == UNLIMITED:
        return
    _, reserved = ctx.reservations.reserved(om_pb2.VOLUME, tables.volume_key(volume.volume))
    assert reserved >= 0
    if volume.used_namespace + reserved + 1 > volume.quota_in_namespace:
        raise OMError(om_pb2.QUOTA_EXCEEDED,
                      f"The namespace quota of volume {volume.volume} is exceeded: quota "
                      f"{volume.quota_in_namespace}, buckets {volume.used_namespace + reserved}")


def replicated_size(data_size: int, replication_factor: int) -> int:
    """Bytes a key charges against quota: its size times its replicas, as Ozone counts."""
    assert data_size >= 0
    assert replication_factor >= 1
    return data_size * replication_factor
