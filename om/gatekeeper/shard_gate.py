"""Which requests a shard answers (docs/SHARDS.md, increment B step 4).

With S > 1 shards a request belongs to one shard (``om.protocol.shard_routing``): its
bucket's, or shard 0 (the coordinator) for a volume, user, certificate, token or
administrative request. A shard that receives another's answers ``WRONG_SHARD`` with
the owning shard's address, checked by the template right after field validation, so
it is never executed, read, or remembered as a retry here: executed on the wrong
shard it would read and write rows that shard does not hold.

Until shard 0 coordinates what spans shards (step 3), the requests that change or list
rows several shards hold are ``NOT_SUPPORTED_OPERATION`` at S > 1, on every shard:
creating, deleting or changing a bucket (its row lives in its shard, its volume's in
shard 0), a bucket's ACL changes, listing a volume's buckets, deleting or changing a
volume or its ACLs (every shard holding one of its buckets holds a copy of its row,
which a change on shard 0 alone would leave stale there). Buckets are seeded offline
meanwhile (``om freon generate --shards``, ``om/cluster/preload.py``); CreateVolume
passes on shard 0 (the new volume has no bucket, so no other shard needs its row).

The shard's own requests (``RequestKind.internal``: its purge steps, which name rows
of its own buckets only; a client's are refused at the intake) pass. At S = 1 the
template holds no gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.executor.registry import RequestKind, error_response
from om.protocol import om_pb2
from om.protocol.shard_routing import request_shard

# Changes and lists of rows that several shards hold: shard 0 coordinates them in step 3
ACROSS_SHARDS = frozenset({om_pb2.CreateBucket, om_pb2.DeleteBucket,
                           om_pb2.SetBucketProperty, om_pb2.ListBuckets,
                           om_pb2.DeleteVolume, om_pb2.SetVolumeProperty})
ACL_CHANGES = frozenset({om_pb2.AddAcl, om_pb2.RemoveAcl, om_pb2.SetAcl})
# Whose ACL changes span shards: a bucket's row (its shard's; shard 0 coordinates) and a
# volume's (copied into shard 0 and every shard holding one of its buckets)
COPIED_ROWS = frozenset({om_pb2.OzoneObj.BUCKET, om_pb2.OzoneObj.VOLUME})


def _across_shards(request: om_pb2.OMRequest, kind: RequestKind) -> bool:
    if request.cmd_type in ACL_CHANGES:
        return getattr(request, kind.body_field).obj.res_type in COPIED_ROWS
    return request.cmd_type in ACROSS_SHARDS


@dataclass(frozen=True)
class ShardGate:
    """Shard ``shard`` of the node whose shards listen at ``addresses`` (host:port, by
    shard)."""

    shard: int
    addresses: tuple[str, ...]

    def __post_init__(self) -> None:
        assert len(self.addresses) > 1, "a gate only where there are shards"
        assert 0 <= self.shard < len(self.addresses)

    def refusal(self, request: om_pb2.OMRequest, kind: RequestKind) -> om_pb2.OMResponse | None:
        """The answer refusing ``request`` here, or None: this shard answers it."""
        if kind.internal:
            return None
        if _across_shards(request, kind):
            return error_response(
                request, om_pb2.NOT_SUPPORTED_OPERATION, f"{kind.name} changes or lists rows "
                f"that several of the {len(self.addresses)} shards hold: not supported with "
                "shards yet (docs/SHARDS.md, step 3)")
        owner = request_shard(request, len(self.addresses))
        if owner == self.shard:
            return None
        response = error_response(
            request, om_pb2.WRONG_SHARD, f"{kind.name} belongs to shard {owner} "
            f"({self.addresses[owner]}), not to shard {self.shard}: not executed")
        response.shard_address = self.addresses[owner]
        return response
