"""Which shard answers a request (docs/SHARDS.md, increment B step 4): a bucket's
requests its shard, everything else shard 0; a request another shard owns is answered
WRONG_SHARD with that shard's address and never executed.

Red cases: a gate that let another shard's write through executes it against rows this
shard does not hold (the leader flow seals an entry for it); routing by the volume
alone sends two buckets of a volume to one shard; a request of no bucket taken for
shard k's; CreateBucket run by the bucket's own shard (which does not hold the
volume's lock DeleteVolume takes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.registry import KINDS
from om.gatekeeper.shard_gate import ShardGate
from om.protocol import om_pb2
from om.protocol.shard_routing import request_shard, shard_of
from tests.leader_harness import LeaderUnderTest, config

SHARDS = 2
ADDRESSES = ("127.0.0.1:9862", "127.0.0.1:9892")
VOLUME = "vol"
OWN = next(f"bucket{i}" for i in range(100) if shard_of(VOLUME, f"bucket{i}", SHARDS) == 0)
OTHER = next(f"bucket{i}" for i in range(100) if shard_of(VOLUME, f"bucket{i}", SHARDS) == 1)


def _obj(kind: om_pb2.OzoneObj.ResourceType.ValueType, bucket: str = "") -> om_pb2.OzoneObj:
    return om_pb2.OzoneObj(res_type=kind, volume=VOLUME, bucket=bucket,
                           key="k" if kind == om_pb2.OzoneObj.KEY else "")


@pytest.mark.parametrize(("request_", "shard"), [
    (build.create_key(VOLUME, OTHER, "k"), 1),
    (build.lookup_key(VOLUME, OWN, "k"), 0),
    (build.info_bucket(VOLUME, OTHER), 1),
    (build.get_acl(_obj(om_pb2.OzoneObj.KEY, OTHER)), 1),
    (build.get_acl(_obj(om_pb2.OzoneObj.BUCKET, OTHER)), 1),
    (build.get_acl(_obj(om_pb2.OzoneObj.VOLUME)), 0),
    (build.create_volume(VOLUME), 0),
    (build.info_volume(VOLUME), 0),
    (build.get_delegation_token(), 0),
    (build.service_list(), 0),
])
def test_a_request_belongs_to_its_buckets_shard_else_to_shard_0(
        request_: om_pb2.OMRequest, shard: int) -> None:
    assert request_shard(request_, SHARDS) == shard


def test_the_shards_of_one_volumes_buckets_differ() -> None:
    """Routing is by volume and bucket, not by volume alone."""
    assert {request_shard(build.create_key(VOLUME, b, "k"), SHARDS) for b in (OWN, OTHER)} \
        == {0, 1}


def _refusal(shard: int, request: om_pb2.OMRequest) -> om_pb2.OMResponse | None:
    return ShardGate(shard, ADDRESSES).refusal(request, KINDS[request.cmd_type])


def test_another_shards_request_is_answered_with_its_address() -> None:
    refused = _refusal(1, build.create_volume(VOLUME))
    assert refused is not None
    assert refused.status == om_pb2.WRONG_SHARD
    assert refused.shard_address == ADDRESSES[0]
    refused = _refusal(0, build.lookup_key(VOLUME, OTHER, "k"))
    assert refused is not None
    assert refused.status == om_pb2.WRONG_SHARD
    assert refused.shard_address == ADDRESSES[1]
    assert _refusal(1, build.lookup_key(VOLUME, OTHER, "k")) is None
    assert _refusal(0, build.create_volume(VOLUME)) is None


@pytest.mark.parametrize(("request_", "shard"), [
    (build.create_bucket(VOLUME, OTHER), 0), (build.delete_bucket(VOLUME, OTHER), 1),
    (build.set_bucket_property(VOLUME, OTHER, quota_in_bytes=1), 1),
    (build.list_buckets(VOLUME), 0), (build.delete_volume(VOLUME), 0),
    (build.set_volume_property(VOLUME, quota_in_bytes=1), 0),
    (build.set_acl(_obj(om_pb2.OzoneObj.BUCKET, OTHER), []), 1),
    (build.set_acl(_obj(om_pb2.OzoneObj.VOLUME), []), 0),
])
def test_a_change_over_rows_every_shard_holds_runs_on_one_shard(
        request_: om_pb2.OMRequest, shard: int) -> None:
    """Shard 0 creates a bucket (it holds the volume's lock) whichever shard owns it;
    the owning shard deletes and changes it; the rows reach every shard."""
    assert _refusal(shard, request_) is None
    refused = _refusal(1 - shard, request_)
    assert refused is not None
    assert refused.status == om_pb2.WRONG_SHARD


def test_a_prepare_is_refused_with_shards() -> None:
    prepare = om_pb2.OMRequest(cmd_type=om_pb2.Prepare, prepare=om_pb2.PrepareRequest())
    refused = _refusal(0, prepare)
    assert refused is not None
    assert refused.status == om_pb2.NOT_SUPPORTED_OPERATION


def test_a_shards_own_purge_step_passes() -> None:
    purge = om_pb2.OMRequest(cmd_type=om_pb2.PurgeKeys, purge_keys=om_pb2.PurgeKeysRequest())
    assert KINDS[purge.cmd_type].internal
    assert _refusal(1, purge) is None


async def test_the_template_answers_another_shards_write_without_executing_it(
        tmp_path: Path) -> None:
    leader = LeaderUnderTest(tmp_path / "db", config(shard_gate=ShardGate(0, ADDRESSES)))
    await leader.start()
    try:
        await leader.ok(build.create_volume(VOLUME))
        sent = leader.replicator.entries
        for request in (build.create_key(VOLUME, OTHER, "k"),
                        build.lookup_key(VOLUME, OTHER, "k")):
            response = await leader.call(request)
            assert response.status == om_pb2.WRONG_SHARD, response
            assert response.shard_address == ADDRESSES[1]
        assert leader.replicator.entries == sent, "nothing executed, nothing replicated"
        leader.assert_idle()
    finally:
        await leader.close()
