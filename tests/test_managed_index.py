"""The managed index (om/gatekeeper/managed_index.py): strictly increasing, never below
what was persisted, and with S shards on each shard's own residue modulo S, so two
shards never hand out one index (hence never one object id) though neither reads the
other's counter (docs/ARCHITECTURE.md, *Parallel executors*, invariant 5).

Red cases: a counter that steps by one (today's at S = 1) hands shard 1 of 2 an even
index at its second write; one that starts at its residue without looking at what was
persisted reuses an index after a restart; shard 0 handing out 0 (a read's index).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from om.client import requests as build
from om.cluster.preload import Namespace, generate
from om.gatekeeper.managed_index import ManagedIndex
from om.gatekeeper.shard_gate import ShardGate
from om.protocol.shard_routing import shard_of
from om.schema.ids import IDS_PER_INDEX, OBJECT_ID_EPOCH
from om.statemachine.store import Store
from tests.leader_harness import LeaderUnderTest, config

ADDRESSES = ("127.0.0.1:9862", "127.0.0.1:9892")
VOLUME = "vol"


def test_one_shard_counts_one_by_one_from_what_was_persisted() -> None:
    index = ManagedIndex(41)
    assert [index.next() for _ in range(3)] == [42, 43, 44]
    index.advance_to(100)
    assert index.next() == 101
    index.advance_to(7)
    assert index.next() == 102, "never moves back"


def test_shard_0_never_hands_out_0_and_shard_k_starts_at_its_residue() -> None:
    assert ManagedIndex(0, 0, 4).next() == 4
    assert [ManagedIndex(0, k, 4).next() for k in (1, 2, 3)] == [1, 2, 3]
    assert ManagedIndex(9, 1, 4).next() == 13, "above what was persisted"


@given(shards=st.integers(1, 8),
       steps=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 60)),
                      max_size=80))
def test_shards_hand_out_disjoint_increasing_indexes_across_restarts(
        shards: int, steps: list[tuple[int, int, int]]) -> None:
    """Each step: a shard hands out a few indexes, or restarts from its persisted (last
    handed out, or an earlier one a leader persisted) and advances to a value a new
    leader read; indexes stay on the shard's residue, increase, and no two shards share
    one."""
    counters = [ManagedIndex(0, k, shards) for k in range(shards)]
    handed: list[list[int]] = [[] for _ in range(shards)]
    for shard_pick, action, amount in steps:
        shard = shard_pick % shards
        counter = counters[shard]
        if action == 0 and handed[shard]:          # a restart from an older persisted index
            counter = counters[shard] = ManagedIndex(
                handed[shard][amount % len(handed[shard])], shard, shards)
            counter.advance_to(handed[shard][-1])   # the new leader reads the newest
        for _ in range(1 + amount % 4):
            value = counter.next()
            assert value > 0
            assert value % shards == shard
            assert not handed[shard] or value > handed[shard][-1]
            handed[shard].append(value)
    every = [value for values in handed for value in values]
    assert len(every) == len(set(every)), "two shards handed out one index"


def _owned_bucket(shard: int) -> str:
    return next(f"bucket{i}" for i in range(100)
                if shard_of(VOLUME, f"bucket{i}", len(ADDRESSES)) == shard)


def _managed_index(object_id: int) -> int:
    return (object_id - OBJECT_ID_EPOCH) // IDS_PER_INDEX


@pytest.mark.parametrize("shard", [0, 1])
async def test_a_shards_template_assigns_object_ids_of_its_residue_only(
        tmp_path: Path, shard: int) -> None:
    """A shard's leader flow (the template builds its counter from its gate) gives the
    keys it creates ids whose managed index is on the shard's residue: shard 0's and
    shard 1's keys never share an id, whatever each store persisted."""
    bucket = _owned_bucket(shard)
    seeded = Store(tmp_path / "db")
    generate(seeded, Namespace(volume=VOLUME, bucket=bucket))
    seeded.close()
    leader = LeaderUnderTest(tmp_path / "db", config(shard_gate=ShardGate(shard, ADDRESSES)),
                             shard=shard)
    await leader.start()
    try:
        indexes = []
        for n in range(4):
            response = await leader.ok(build.create_key(VOLUME, bucket, f"k{n}", 10))
            indexes.append(_managed_index(response.create_key.key_info.object_id))
        assert all(index % len(ADDRESSES) == shard for index in indexes), indexes
        assert indexes == sorted(set(indexes))
        leader.assert_idle()
    finally:
        await leader.close()
