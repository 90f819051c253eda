"""Listing as ``ozone sh ... list`` does: prefix, exclusive start, length or all.

The server answers pages (ListVolume, ListBuckets, ListKeys: prefix, exclusive
``start_key``, ``max_keys``, ``truncated``); these helpers walk them until the
shell's limit is reached, as Ozone's client-side iterators walk the OM's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from om.client import OMClient
from om.protocol import om_pb2

PAGE = 1000  # entries per request, the server's default page

T = TypeVar("T")
# (start, wanted) -> (entries kept, name of the last entry read, more on the server)
Fetch = Callable[[str, int], tuple[list[T], str, bool]]


def collect(fetch: Fetch[T], start: str, limit: int | None) -> tuple[list[T], bool]:
    """Entries after ``start``, at most ``limit`` (None: all); and whether more follow."""
    items: list[T] = []
    while True:
        wanted = PAGE if limit is None else min(PAGE, limit - len(items))
        entries, last, truncated = fetch(start, wanted)
        items.extend(entries)
        if not truncated or not last:
            return items, False
        if limit is not None and len(items) >= limit:
            return items, True
        start = last


def volumes(client: OMClient, prefix: str, owner: str | None) -> Fetch[om_pb2.VolumeInfo]:
    """Pages of volumes; only those ``owner`` owns unless None (Ozone's ``--all``)."""
    def fetch(start: str, wanted: int) -> tuple[list[om_pb2.VolumeInfo], str, bool]:
        page = client.list_volumes(prefix, start, wanted)
        infos = list(page.volume_info)
        kept = [v for v in infos if owner is None or v.owner_name == owner]
        return kept, infos[-1].volume if infos else "", page.truncated
    return fetch


def buckets(client: OMClient, volume: str, prefix: str) -> Fetch[om_pb2.BucketInfo]:
    """Pages of the buckets of ``volume``."""
    def fetch(start: str, wanted: int) -> tuple[list[om_pb2.BucketInfo], str, bool]:
        page = client.list_buckets(volume, prefix, start, wanted)
        infos = list(page.bucket_info)
        return infos, infos[-1].bucket_name if infos else "", page.truncated
    return fetch


def keys(client: OMClient, volume: str, bucket: str, prefix: str) -> Fetch[om_pb2.KeyInfo]:
    """Pages of the committed keys of ``volume/bucket``."""
    def fetch(start: str, wanted: int) -> tuple[list[om_pb2.KeyInfo], str, bool]:
        page = client.list_keys(volume, bucket, prefix, start, wanted)
        infos = list(page.key_info)
        return infos, infos[-1].key_name if infos else "", page.truncated
    return fetch
