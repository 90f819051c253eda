"""Which requests a shard answers (docs/SHARDS.md, increment B step 4).

With S > 1 shards a request belongs to one shard (``om.protocol.shard_routing``): its
bucket's, or shard 0 (the coordinator) for a volume, user, certificate, token or
administrative request. A shard that receives another's answers ``WRONG_SHARD`` with
the owning shard's address, checked by the template right after field validation, so
it is never executed, read, or remembered as a retry here: executed on the wrong
shard it would read and write rows that shard does not hold.

What several shards hold (docs/SHARDS.md, *Rows every shard needs*): volumes and
buckets, tokens, certificates and upgrade rows are every shard's, written by one shard
as a slice every shard applies (``merged_entry.EVERY_SHARD``) and answered once every
shard of the leader applied it. So shard 0 creates buckets (``shard_routing``: it
holds the volume's lock DeleteVolume takes) and lists them, a bucket's shard deletes
it (it alone knows whether it is empty) and changes it, each under its own locks.
A Prepare is refused (``NOT_SUPPORTED_OPERATION``): it waits for shard 0's writes in
flight only, and the other shards' would commit after its marker (step 4).

The shard's own requests (``RequestKind.internal``: its purge steps, which name rows
of its own buckets only; a client's are refused at the intake) pass. At S = 1 the
template holds no gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from om.executor.registry import RequestKind, error_response
from om.protocol import om_pb2
from om.protocol.shard_routing import request_shard

# What needs every shard's writes in flight to end first: not built with shards (step 4)
NOT_WITH_SHARDS = frozenset({om_pb2.Prepare})


@dataclass(frozen=True)
class ShardGate:
    """Shard ``shard`` of the node whose shards listen at ``addresses`` (host:port, by
    shard)."""

    shard: int
    addresses: tuple[str, ...]

    def __post_init__(self) -> None:
        assert len(self.addresses) > 1, "a gate only where there are shards"
        assert 0 <= self.shard < len(self.addresses)

    @property
    def shards(self) -> int:
        """How many shards the node runs (S)."""
        return len(self.addresses)

    def refusal(self, request: om_pb2.OMRequest, kind: RequestKind) -> om_pb2.OMResponse | None:
        """The answer refusing ``request`` here, or None: this shard answers it."""
        if kind.internal:
            return None
        if request.cmd_type in NOT_WITH_SHARDS:
            return error_response(
                request, om_pb2.NOT_SUPPORTED_OPERATION, f"{kind.name} waits for the writes "
                f"in flight on every one of the {len(self.addresses)} shards: not supported "
                "with shards yet (docs/SHARDS.md, step 4)")
        owner = request_shard(request, len(self.addresses))
        if owner == self.shard:
            return None
        return wrong_shard(request, f"{kind.name} belongs to shard {owner} "
                           f"({self.addresses[owner]}), not to shard {self.shard}: not executed",
                           self.addresses[owner], self.shards)


def wrong_shard(request: om_pb2.OMRequest, message: str, owner_address: str,
                shards: int) -> om_pb2.OMResponse:
    """WRONG_SHARD naming the owning shard's address and S, which a client learns
    (``ClientIdentity.rerouted``): the one shape of every such answer."""
    assert shards > 1
    response = error_response(request, om_pb2.WRONG_SHARD, message)
    response.shard_address = owner_address
    response.shards = shards
    return response
