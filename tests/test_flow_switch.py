"""Both flows side by side (docs/FLOW_SWITCH.md): one state machine applies both kinds
of entry, the old flow's answers are found by the leader flow's retry cache and the
other way round, and the shared locks keep an unapplied write of one flow from being
overwritten by the other (the lost update)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from om.client import requests as build
from om.flows.leader_flow import LeaderConfig
from om.gatekeeper.retry_cache import RetryCacheConfig
from om.protocol import om_pb2
from om.statemachine import log_entry
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store
from tests.test_flow_determinism import Flow, _next_request


def _fail() -> None:
    raise AssertionError("fail-stop in a test")


def _old_machine(path: Path, unflushed_max: int = 100) -> ReplicatedStateMachine:
    return ReplicatedStateMachine(Store(path), LeaderConfig().limits,
                                  MemoryRetryCache(600_000, 1000), unflushed_max, _fail)


async def test_the_old_flows_machine_applies_a_leader_log_to_identical_tables(
        tmp_path: Path) -> None:
    """Step 2: the leader flow's own log, applied by the old flow's state machine (write
    cache, double buffer), ends in byte-identical tables, transaction info included."""
    leader = Flow(tmp_path / "leader", "leader")
    await leader.start()
    rng, sessions = random.Random(7), dict[str, int]()
    for _ in range(200):
        request = _next_request(rng, sessions)
        response = await leader.call(request)
        if request.cmd_type == om_pb2.CreateKey and response.status == om_pb2.OK:
            body = request.create_key
            sessions[f"{body.volume}/{body.bucket}/{body.key}"] = (
                response.create_key.client_session_id)
    expected = await leader.tables()
    log, machine = leader.log, leader.machine
    assert len(log) > 50
    assert any(log_entry.decode(e).ops for _, e in log)   # type: ignore[union-attr]
    old = _old_machine(tmp_path / "old", unflushed_max=7)
    for position, entry in log:
        assert old.apply_entry(position, entry).applied
    assert old.managed_index == machine.managed_index
    old.close()
    assert old.store.digests() == expected
    old.store.close()


async def test_the_managed_index_is_the_highest_either_kind_carried(tmp_path: Path) -> None:
    old = _old_machine(tmp_path / "old")
    request = build.create_volume("vol1")
    request.client_id, request.call_id, request.user = "c", 1, "alice"
    entries = [
        log_entry.encode_request(om_pb2.ReplicatedRequest(
            request=request, timestamp_ms=5, managed_index=40, leader_id="om1", term=1)),
        log_entry.encode_batch(om_pb2.PersistDbBatch(term=1, managed_index=12,
                                                     timestamp_ms=6, leader_id="om1")),
        log_entry.encode_batch(om_pb2.PersistDbBatch(term=1, managed_index=41,
                                                     timestamp_ms=7, leader_id="om1")),
    ]
    assert [old.apply_entry(p, e).managed_index for p, e in enumerate(entries, 1)] \
        == [40, 40, 41]
    old.close()
    old.store.close()
    reopened = _old_machine(tmp_path / "old")
    assert (reopened.managed_index, reopened.applied_index) == (41, 3)
    reopened.close()
    reopened.store.close()


async def test_the_old_flow_sweeps_its_expired_reply_rows(tmp_path: Path) -> None:
    """Step 1 made the old flow write reply rows; without a sweep they would grow
    without bound (and the auditor flags rows past their expiry)."""
    flow = Flow(tmp_path / "old", "replicated", LeaderConfig(
        retry=RetryCacheConfig(expiry_ms=1_000, memory_entries=100)))
    await flow.start()
    create = build.create_volume("vol1")
    assert (await flow.call(create)).status == om_pb2.OK
    assert flow.service.sweep_expired() == 0, "not expired yet"
    flow.now_ms += 5_000
    assert flow.service.sweep_expired() == 1
    await asyncio.wait_for(flow.service.drain(), 5)   # the sweep's entry, in a task
    assert len(flow.log) == 2
    assert isinstance(flow.machine, ReplicatedStateMachine)
    flow.machine.quiesce()
    assert flow.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 0
    assert flow.store.count(om_pb2.CLIENT_REQUEST_EXPIRY) == 0
    await flow.tables()
