"""Group commit under concurrency: what the leader merges into batches keeps the store's
invariants, and a broken merge order is caught.

Many writes arrive as groups (as one read of a connection delivers them), execute
directly or wait for locks, and are merged into PersistDb batches in managed-index
order; the persisted managed index is the highest applied (the high-water mark
never passes a hole: ``seeds/bcsid-hole-bug.md``). The auditor's determinism
invariants (ids never above the persisted managed index, quota equal to the rows,
parents present) must hold after any such run; a builder that merges a batch's
writes in another order (here: sorted by key, persisting the last one's index) must
make them fail.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor import batcher
from om.flows import batch_pipeline
from om.integrity import auditor
from om.protocol import om_pb2
from tests.leader_harness import LeaderUnderTest, config

AUDIT = auditor.AuditConfig(retry_expiry_ms=600_000, retry_grace_ms=1000)


class KeySortedBuilder(batcher.BatchBuilder):
    """A broken merge: a batch's writes sorted by their first row's key, not by index."""

    def seal(self, batch_id: int, timestamp_ms: int, leader_id: str, term: int) -> bytes:
        self.writes.sort(key=_first_key)
        sealed = om_pb2.PersistDbBatch.FromString(
            super().seal(batch_id, timestamp_ms, leader_id, term))
        if self.writes:
            sealed.managed_index = self.writes[-1].managed_index
        return sealed.SerializeToString()


def _first_key(write: batcher.PendingWrite) -> bytes:
    ops = om_pb2.PersistDbBatch.FromString(write.encoded).ops
    return ops[0].key if ops else b""


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    under_test = LeaderUnderTest(tmp_path / "db", config(lock_timeout_s=10.0))
    await under_test.start()
    await under_test.ok(build.create_volume("vol"))
    for bucket in ("bkt-a", "bkt-b"):
        await under_test.ok(build.create_bucket("vol", bucket, quota_in_bytes=10**9))
    yield under_test
    await under_test.close()


async def _concurrent_groups(leader: LeaderUnderTest, seed: int,
                             groups: int = 12) -> tuple[int, set[str]]:
    """Groups of creates, commits, renames and deletes over few keys (so many wait for
    locks), each group submitted at once as a read would deliver it; the OKs, and the
    auditor's violation categories found after any group (each group ends quiescent:
    every write answered, so every batch applied)."""
    rng = random.Random(seed)
    sessions: dict[str, int] = {}
    oks = 0
    found: set[str] = set()
    for _ in range(groups):
        requests = []
        for _ in range(32):
            bucket, key = rng.choice(["bkt-a", "bkt-b"]), f"k{rng.randrange(6)}"
            roll = rng.randrange(4)
            if roll == 0 or not sessions:
                requests.append(build.create_key("vol", bucket, key, rng.randrange(1, 50)))
            elif roll == 1:
                name = rng.choice(sorted(sessions))
                vol_bucket, committed = name.rsplit("/", 1)
                requests.append(build.commit_key("vol", vol_bucket.split("/")[1], committed,
                                                 sessions[name], rng.randrange(1, 50)))
            elif roll == 2:
                requests.append(build.rename_key("vol", bucket, key, f"k{rng.randrange(6)}"))
            else:
                requests.append(build.delete_key("vol", bucket, key))
        answers = await asyncio.gather(*(leader.service.submit(leader.stamp(r))
                                         for r in requests))
        for request, answer in zip(requests, answers, strict=True):
            oks += answer.status == om_pb2.OK
            if request.cmd_type == om_pb2.CreateKey and answer.status == om_pb2.OK:
                body = request.create_key
                sessions[f"vol/{body.bucket}/{body.key}"] = answer.create_key.client_session_id
        found |= set(auditor.audit(leader.store, AUDIT).by_category())
    return oks, found


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_concurrent_groups_keep_every_invariant(leader: LeaderUnderTest,
                                                      seed: int) -> None:
    oks, violations = await _concurrent_groups(leader, seed)
    assert oks > 100
    leader.assert_idle()
    assert leader.service.flow.pipeline.batches < leader.service.flow.pipeline.writes, "batched"
    assert not violations


async def test_a_broken_merge_order_is_caught(leader: LeaderUnderTest,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_pipeline, "BatchBuilder", KeySortedBuilder)
    _, violations = await _concurrent_groups(leader, seed=1)
    assert auditor.ID_ABOVE_MANAGED_INDEX in violations, violations
