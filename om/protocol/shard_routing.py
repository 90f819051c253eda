"""Which shard owns a bucket (docs/SHARDS.md, *Routing*): the one rule clients and
shards share.

A bucket's shard is ``crc32(volume + "/" + bucket) mod S``: fixed for the cluster's
life (S is fixed at its creation), the same on every node and in every client,
with no table to keep in step. It sits in ``protocol``, the leaf both the client and
the server import, because it is part of what they agree on: a client that routes
by it sends a bucket's requests straight to its shard, and a shard that finds a
request not its own answers WRONG_SHARD with the right one instead of executing it.
"""

from __future__ import annotations

import zlib


def shard_of(volume: str, bucket: str, shards: int) -> int:
    """The shard, 0..shards-1, that owns ``bucket`` of ``volume``."""
    assert shards >= 1, f"a node runs at least one shard, not {shards}"
    return zlib.crc32(f"{volume}/{bucket}".encode()) % shards
