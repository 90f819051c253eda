"""Both flows, fed the same request sequence, answer alike and store identical tables.

Intended differences (also in docs/RELIABILITY.md and om/statemachine/replicated_apply.py):
the old flow also stores failed requests' answers in clientRequestReplyTable and
its expiry index (the leader flow's rows are the same bytes, a subset); and
transactionInfoTable records log positions, which differ (the leader flow logs
batches, the old flow requests).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from om.client import requests as build
from om.consensus.local import LocalReplicator
from om.flows.leader_flow import LeaderFlow, leader_service
from om.flows.purge import PurgeConfig
from om.flows.replicated_flow import ReplicatedFlow, replicated_flow_service
from om.flows.settings import LeaderConfig
from om.flows.template import RequestService
from om.gatekeeper.authorize import AclPolicy
from om.observe.tracing import NullTracer
from om.protocol import om_pb2
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store
from tests.leader_harness import seam_at

GROUPS = {"alice": ("dev", "eng")}
# The leader's purger runs on the wall clock (once a second, cutoffs from time.time()),
# while these flows run on a clock of their own that starts in 2023: once a run outlasted
# a second (a busy machine), it purged every deleted key between two requests, and the
# flows' ids parted. The request sequence alone decides here, so the purger waits an hour.
QUIET_PURGER = PurgeConfig(interval_s=3600.0)
DIFFERENT_BY_DESIGN = {"transactionInfoTable", "clientRequestReplyTable",
                       "clientRequestExpiryTable"}


def _fail() -> None:
    raise AssertionError("fail-stop in a test")


class Flow:
    """One flow in-process on a real store, with a deterministic clock."""

    def __init__(self, path: Path, execution: str, config: LeaderConfig | None = None) -> None:
        self.store = Store(path)
        self.now_ms = 1_700_000_000_000
        self.log: list[tuple[int, bytes]] = []   # every entry applied: (position, bytes)
        # A group mapping and a certificate's groups: a create gives the creator's
        # primary group its default ACL, in the old flow's apply as on the leader.
        config = dataclasses.replace(config or LeaderConfig(purge=QUIET_PURGER),
                                     acl=AclPolicy(groups=GROUPS))
        self.machine: StateMachine | ReplicatedStateMachine
        self.service: RequestService[LeaderFlow] | RequestService[ReplicatedFlow]
        if execution == "leader":
            self.machine = StateMachine(self.store)
            replicator = LocalReplicator("om1", "a:1", self.machine.applied_index,
                                         self._apply)
            self.service = leader_service("om1", self.store, self.machine, replicator, config,
                                          NullTracer(), seam_at(lambda: self.now_ms))
        else:
            self.machine = ReplicatedStateMachine(self.store, config.limits,
                                                  MemoryRetryCache(600_000, 1000), 100, _fail,
                                                  groups=GROUPS)
            replicator = LocalReplicator("om1", "a:1", self.machine.applied_index,
                                         self._apply)
            self.service = replicated_flow_service("om1", self.machine, replicator, config,
                                                   NullTracer(), seam_at(lambda: self.now_ms))
        self.call_ids = itertools.count(1)
        self.replies: dict[bytes, bytes] = {}

    def _apply(self, position: int, entry: bytes) -> ApplyResult:
        self.log.append((position, entry))
        return self.machine.apply_entry(position, entry)

    async def start(self) -> None:
        await self.service.start()

    async def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        request.client_id = "client"
        request.user = "alice"
        request.groups[:] = ["ops"]      # what the node reads from the certificate
        request.call_id = next(self.call_ids)
        self.now_ms += 1
        return await self.service.handle(request)

    async def tables(self) -> dict[str, str]:
        await self.service.close()
        if isinstance(self.machine, ReplicatedStateMachine):
            self.machine.close()
        digests = self.store.digests()
        self.replies = dict(self.store.iterate(om_pb2.CLIENT_REQUEST_REPLY))
        self.store.close()
        return digests


def _answer(row: bytes) -> tuple[bytes, bytes]:
    """A reply row's stored answer and request fingerprint."""
    reply = om_pb2.ClientRequestReply.FromString(row)
    return reply.response, reply.fingerprint


def _next_request(rng: random.Random, sessions: dict[str, int]) -> om_pb2.OMRequest:
    volume = rng.choice(["vol1", "vol2"])
    bucket = rng.choice(["bkt1", "bkt2"])
    key = f"k{rng.randrange(12)}"
    choice = rng.randrange(11)
    if choice == 0:
        return build.create_volume(volume, quota_in_namespace=rng.choice([0, 1, 5]))
    if choice == 1:
        return build.create_bucket(volume, bucket, quota_in_bytes=rng.choice([0, 90, 1000]))
    if choice in (2, 3):
        return build.create_key(volume, bucket, key, rng.randrange(40))
    if choice in (4, 5) and sessions:
        name = rng.choice(sorted(sessions))
        vol, bkt, k = name.split("/")
        return build.commit_key(vol, bkt, k, sessions[name], rng.randrange(40))
    if choice == 6:
        return build.delete_key(volume, bucket, key)
    if choice == 7:
        return build.rename_key(volume, bucket, key, f"k{rng.randrange(12)}")
    if choice == 8:
        return build.set_bucket_property(volume, bucket, rng.choice([0, 50, 500]), 0)
    if choice == 9:
        return build.delete_bucket(volume, bucket)
    return build.list_keys(volume, bucket, max_keys=rng.randrange(1, 5))


async def _run(flow: Flow, seed: int, steps: int) -> list[bytes]:
    rng = random.Random(seed)
    sessions: dict[str, int] = {}
    answers = []
    for _ in range(steps):
        request = _next_request(rng, sessions)
        response = await flow.call(request)
        if request.cmd_type == om_pb2.CreateKey and response.status == om_pb2.OK:
            body = request.create_key
            sessions[f"{body.volume}/{body.bucket}/{body.key}"] = (
                response.create_key.client_session_id)
        answers.append(response.SerializeToString(deterministic=True))
    return answers


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
async def test_both_flows_store_identical_tables(tmp_path_factory: object, seed: int) -> None:
    assert hasattr(tmp_path_factory, "mktemp")
    base = Path(tmp_path_factory.mktemp("flows"))
    leader, replicated = Flow(base / "leader", "leader"), Flow(base / "old", "replicated")
    await leader.start()
    leader_answers = await _run(leader, seed, 250)
    replicated_answers = await _run(replicated, seed, 250)
    assert leader_answers == replicated_answers, "the flows answered differently"
    ok = sum(om_pb2.OMResponse.FromString(a).status == om_pb2.OK for a in leader_answers)
    assert ok >= 20, "the sequence should succeed often enough to matter"
    leader_tables, replicated_tables = await leader.tables(), await replicated.tables()
    for table in leader_tables.keys() - DIFFERENT_BY_DESIGN:
        assert leader_tables[table] == replicated_tables[table], table
    # the leader flow stores the answers of successful writes, the old flow every
    # write's: the same rows, so a retry finds the same answer whichever flow takes it
    assert leader.replies, "successful writes store their answers"
    assert leader.replies.keys() <= replicated.replies.keys()
    for key, row in leader.replies.items():   # the batch's time is the pipeline's clock
        assert _answer(row) == _answer(replicated.replies[key]), key
    failed = len(replicated.replies) - len(leader.replies)
    writes = sum(om_pb2.OMResponse.FromString(a).cmd_type != om_pb2.ListKeys
                 for a in leader_answers)
    assert len(replicated.replies) == writes, "the old flow stores every write's answer"
    assert failed > 0


async def test_old_flow_restart_resumes_flushing_where_the_store_left_off(
        tmp_path: Path) -> None:
    flow = Flow(tmp_path / "old", "replicated")
    assert (await flow.call(build.create_volume("vol1"))).status == om_pb2.OK
    await flow.tables()
    reopened = Flow(tmp_path / "old", "replicated")
    assert isinstance(reopened.machine, ReplicatedStateMachine)
    assert reopened.machine.applied_index == 1
    reopened.machine.quiesce()  # returns at once: nothing is unflushed
    assert (await reopened.call(build.info_volume("vol1"))).status == om_pb2.OK
    await reopened.tables()


async def test_old_flow_answers_a_retry_after_a_restart_from_its_reply_row(
        tmp_path: Path) -> None:
    """The old flow's retry cache was in memory only: a restart forgot it and a retry
    of a committed write executed again (here: VOLUME_ALREADY_EXISTS instead of OK)."""
    flow = Flow(tmp_path / "old", "replicated")
    create = build.create_volume("vol1")
    assert (await flow.call(create)).status == om_pb2.OK
    await flow.tables()
    reopened = Flow(tmp_path / "old", "replicated")
    retry = om_pb2.OMRequest()
    retry.CopyFrom(create)
    retry.call_id = 1
    reopened.now_ms = flow.now_ms
    response = await reopened.service.handle(retry)
    assert response.status == om_pb2.OK, response.message
    assert response.SerializeToString() == (
        await reopened.service.handle(retry)).SerializeToString()
    await reopened.tables()
