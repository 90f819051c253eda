"""Which shard owns a bucket (docs/SHARDS.md, *Routing*): the one rule clients and
shards share.

A bucket's shard is ``crc32(volume + "/" + bucket) mod S``: fixed for the cluster's
life (S is fixed at its creation), the same on every node and in every client,
with no table to keep in step. It sits in ``protocol``, the leaf both the client and
the server import, because it is part of what they agree on: a client that routes
by it sends a bucket's requests straight to its shard, and a shard that finds a
request not its own answers WRONG_SHARD with the right one (and S) instead of
executing it. So are the shards' ports (``shard_address``): a client given the nodes'
client addresses reaches any shard of any node with nothing more than S.
"""

from __future__ import annotations

import zlib

from om.protocol import om_pb2

# Shard k >= 1 of a node listens on the node's client port + SHARD_PORT_OFFSET +
# SHARD_PORT_STEP * k (docs/SHARDS.md, *Ports*): clients derive every shard's address
# from the node addresses they were given, as the node derives its ports (the same
# numbers as ``om.config``'s, which is a leaf and cannot import them: a test holds
# the two equal).
SHARD_PORT_OFFSET = 20
SHARD_PORT_STEP = 10


def shard_of(volume: str, bucket: str, shards: int) -> int:
    """The shard, 0..shards-1, that owns ``bucket`` of ``volume``."""
    assert shards >= 1, f"a node runs at least one shard, not {shards}"
    return zlib.crc32(f"{volume}/{bucket}".encode()) % shards


def shard_address(address: str, shard: int) -> str:
    """The "host:port" of ``shard`` of the node whose client address (shard 0's) is
    ``address``."""
    assert shard >= 0
    if shard == 0:
        return address
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + SHARD_PORT_OFFSET + SHARD_PORT_STEP * shard}"


def request_bucket(request: om_pb2.OMRequest) -> tuple[str, str] | None:
    """The (volume, bucket) whose shard owns ``request``, or None: shard 0's (a volume,
    user, certificate, token or administrative request, an ACL request on a volume,
    and CreateBucket). Every request body names its bucket in ``volume`` and
    ``bucket`` fields, an ACL request in ``obj``. CreateBucket names one too but is
    shard 0's: it holds the volume's lock, against which DeleteVolume checks that no
    bucket is left (its row then reaches every shard, the owner's included)."""
    if request.cmd_type == om_pb2.CreateBucket:
        return None
    field = request.WhichOneof("body")
    if field is None:
        return None
    body = getattr(request, field)
    fields = body.DESCRIPTOR.fields_by_name
    if "obj" in fields:
        obj = body.obj
        return None if obj.res_type == om_pb2.OzoneObj.VOLUME else (obj.volume, obj.bucket)
    if "bucket" in fields and body.bucket:
        return body.volume, body.bucket
    return None


def request_shard(request: om_pb2.OMRequest, shards: int) -> int:
    """The shard, 0..shards-1, that answers ``request``: its bucket's, else shard 0."""
    bucket = request_bucket(request)
    return 0 if bucket is None else shard_of(bucket[0], bucket[1], shards)
