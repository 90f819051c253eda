"""Both flows side by side (docs/FLOW_SWITCH.md): one state machine applies both kinds
of entry, the old flow's answers are found by the leader flow's retry cache and the
other way round, and the shared locks keep an unapplied write of one flow from being
overwritten by the other (the lost update)."""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path

import pytest

from om.cli import main
from om.cli.admin.upgrade import flow_types
from om.client import requests as build
from om.consensus.local import LocalReplicator
from om.executor.admin import upgrade
from om.flows.batch_pipeline import BatchConfig
from om.flows.leader_flow import leader_service
from om.flows.settings import LeaderConfig
from om.gatekeeper.authorize import AclPolicy
from om.gatekeeper.retry_cache import RetryCacheConfig
from om.integrity import auditor
from om.node.parts import MACHINE_SEAM
from om.observe.tracing import NullTracer
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store
from tests.leader_harness import GatedReplicator
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
    assert any(b.ops for _, e in log for b in log_entry.decode_batches(e))
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
    assert flow.service.flow.sweep_expired() == 0, "not expired yet"
    flow.now_ms += 5_000
    assert flow.service.flow.sweep_expired() == 1
    await asyncio.wait_for(flow.service.drain(), 5)   # the sweep's entry, in a task
    assert len(flow.log) == 2
    assert isinstance(flow.machine, ReplicatedStateMachine)
    flow.machine.quiesce()
    assert flow.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 0
    assert flow.store.count(om_pb2.CLIENT_REQUEST_EXPIRY) == 0
    await flow.tables()


# -- both flows in one leader (steps 3 and 4) ------------------------------------------

V, B = "vol", "bkt"
KEY_SIZE = 40
CHARGE = 3 * KEY_SIZE      # replicated three times
ADMIN = "admin"


class Switchable:
    """A switchable leader in-process: the old flow's machine (both kinds of entry),
    the leader flow routing each write by the ``#FLOWS`` row, and a replicator
    whose entries wait at ``replicator.gate`` (``tests/leader_harness.py``)."""

    def __init__(self, path: Path, batch: BatchConfig | None = None,
                 acl_enabled: bool = False) -> None:
        config = LeaderConfig(acl=AclPolicy(acl_enabled=acl_enabled, admins=frozenset({ADMIN})),
                              batch=batch or BatchConfig())
        self.machine = ReplicatedStateMachine(Store(path), config.limits,
                                              MemoryRetryCache(600_000, 1000), 100, _fail)
        inner = LocalReplicator("om1", "127.0.0.1:9862", self.machine.applied_index,
                                self._apply)
        self.replicator = GatedReplicator(inner)
        self.service = leader_service("om1", self.machine.view, self.machine, self.replicator,
                                      config, NullTracer(), MACHINE_SEAM)
        self.kinds: list[bytes] = []        # the tag of every entry applied, in order
        self._call_ids = itertools.count(1)

    def _apply(self, position: int, entry: bytes) -> ApplyResult:
        self.kinds.append(entry[:1])
        return self.machine.apply_entry(position, entry)

    def send(self, request: om_pb2.OMRequest, user: str = "alice",
             call_id: int = 0) -> asyncio.Future[om_pb2.OMResponse]:
        request.client_id, request.user = "client", user
        request.call_id = call_id or next(self._call_ids)
        return self.service.submit(request)

    async def ok(self, request: om_pb2.OMRequest, user: str = "alice") -> om_pb2.OMResponse:
        response = await self.send(request, user)
        assert response.status == om_pb2.OK, response.message
        return response

    async def flows(self, *types: int) -> None:
        await self.ok(build.set_flows(types), user=ADMIN)

    async def open_key(self, key: str) -> int:
        opened = await self.ok(build.create_key(V, B, key, KEY_SIZE))
        return opened.create_key.client_session_id

    def bucket(self) -> om_pb2.BucketInfo:
        raw = self.machine.view.get(om_pb2.BUCKET, tables.bucket_key(V, B))
        assert raw is not None
        return om_pb2.BucketInfo.FromString(raw)

    async def close(self) -> None:
        await self.service.close()
        self.machine.close()
        self.machine.store.close()


async def _switchable(path: Path, batch: BatchConfig | None = None) -> Switchable:
    node = Switchable(path, batch)
    await node.service.start()
    await node.ok(build.create_volume(V))
    await node.ok(build.create_bucket(V, B, quota_in_bytes=0))
    return node


async def _settles(*answers: asyncio.Future[om_pb2.OMResponse]) -> list[om_pb2.OMResponse]:
    return list(await asyncio.wait_for(asyncio.gather(*answers), 5))


async def test_a_leader_flow_write_waits_for_an_unapplied_old_flow_write(
        tmp_path: Path) -> None:
    """The lost update, leader flow over old: a CommitKey of the old flow is committed
    but not applied when a SetBucketProperty of the leader flow arrives. Executed at
    once, the property change would read the bucket without the commit's usage and its
    batch, applied after the commit, would put it back: used_bytes 0 with a key of 120
    bytes in the bucket. The shared locks make it wait until the commit applied."""
    node = await _switchable(tmp_path / "db")
    await node.flows(om_pb2.SetBucketProperty)
    session = await node.open_key("k1")
    node.replicator.gate.clear()
    commit = node.send(build.commit_key(V, B, "k1", session, KEY_SIZE))     # old flow
    await asyncio.sleep(0.05)
    assert node.replicator.waiting == 1, "the commit's entry waits, unapplied"
    change = node.send(build.set_bucket_property(V, B, quota_in_bytes=10_000))   # leader
    await asyncio.sleep(0.05)
    assert not change.done()
    node.replicator.gate.set()
    assert [r.status for r in await _settles(commit, change)] == [om_pb2.OK, om_pb2.OK]
    assert node.kinds[-2:] == [log_entry.REPLICATED_REQUEST, log_entry.MERGED]
    bucket = node.bucket()
    assert (bucket.used_bytes, bucket.quota_in_bytes) == (CHARGE, 10_000)
    await node.close()


async def test_an_old_flow_write_waits_for_an_unapplied_leader_flow_write(
        tmp_path: Path) -> None:
    """The lost update, old flow over leader: a SetBucketProperty of the leader flow
    executed and sits in the batch queue (the one batch slot is taken by another
    write's batch) when a CommitKey of the old flow arrives. Replicated at once, the
    commit's entry would be applied before the property change's batch, which was
    executed without it and puts the bucket back: used_bytes 0. The shared locks make
    the commit wait until the batch applied."""
    node = await _switchable(tmp_path / "db", BatchConfig(inflight_batches_max=1))
    await node.ok(build.create_volume("vol2"))      # no lock of it is the bucket's
    await node.ok(build.create_bucket("vol2", "other"))
    await node.flows(om_pb2.SetBucketProperty)
    session = await node.open_key("k1")
    node.replicator.gate.clear()
    first = node.send(build.set_bucket_property("vol2", "other", quota_in_bytes=5_000))
    await asyncio.sleep(0.05)
    assert node.replicator.waiting == 1, "the other bucket's batch holds the only slot"
    change = node.send(build.set_bucket_property(V, B, quota_in_bytes=10_000))
    await asyncio.sleep(0.05)
    assert len(node.service.flow.reservations) == 0
    assert node.service.in_flight == 2
    commit = node.send(build.commit_key(V, B, "k1", session, KEY_SIZE))     # old flow
    await asyncio.sleep(0.05)
    node.replicator.gate.set()
    assert [r.status for r in await _settles(first, change, commit)] == [om_pb2.OK] * 3
    bucket = node.bucket()
    assert (bucket.used_bytes, bucket.quota_in_bytes) == (CHARGE, 10_000)
    await node.close()


async def _two_writes_over_a_quota(tmp_path: Path) -> tuple[Switchable, str, int, int]:
    """A switchable node whose bucket holds 200 bytes, multipart commits on the leader
    flow and CommitKey on the old one, an upload's part and a key opened, and
    replication held: (node, upload id, the part's session, the key's session)."""
    node = await _switchable(tmp_path / "db")
    await node.ok(build.set_bucket_property(V, B, quota_in_bytes=200))
    await node.flows(om_pb2.CommitMultiPartUpload)
    upload = (await node.ok(build.initiate_multipart_upload(V, B, "big"))
              ).initiate_multipart_upload.upload_id
    part = (await node.ok(build.create_key(V, B, "big", KEY_SIZE, upload_id=upload))
            ).create_key.client_session_id
    session = await node.open_key("k1")
    node.replicator.gate.clear()
    return node, upload, part, session


async def test_an_unapplied_old_flow_write_holds_its_quota_against_the_leader_flow(
        tmp_path: Path) -> None:
    """Each of two 120-byte writes fits a 200-byte bucket, both do not. The old flow's
    CommitKey charges the bucket only when it applies; without its reservation on the
    leader, a multipart part committed by the leader flow meanwhile would fit too
    and the bucket end at 240 of 200 bytes."""
    node, upload, part, session = await _two_writes_over_a_quota(tmp_path)
    commit = node.send(build.commit_key(V, B, "k1", session, KEY_SIZE))     # old flow
    await asyncio.sleep(0.05)
    assert node.service.flow.reservations.reserved(om_pb2.BUCKET, tables.bucket_key(V, B)) \
        == (CHARGE, 1)
    waiting = node.service.waiting
    part_commit = node.send(build.commit_multipart_upload(V, B, "big", upload, 1, part,
                                                          KEY_SIZE))
    await asyncio.sleep(0.05)
    assert node.service.waiting == waiting, "the part executed at once, the commit unapplied"
    assert node.service.flow.reservations.reserved(om_pb2.BUCKET, tables.bucket_key(V, B)) \
        == (CHARGE, 1), "the part reserved nothing"
    assert not part_commit.done(), "its refusal waits for a read round, held back too"
    node.replicator.gate.set()
    refused, committed = await _settles(part_commit, commit)
    assert refused.status == om_pb2.QUOTA_EXCEEDED, refused.message
    assert committed.status == om_pb2.OK
    assert len(node.service.flow.reservations) == 0
    assert node.bucket().used_bytes == CHARGE
    await node.close()


async def test_an_unapplied_leader_flow_write_holds_its_quota_against_the_old_flow(
        tmp_path: Path) -> None:
    """The other way round: the leader flow's part is reserved, not applied; the old
    flow's CommitKey, tried on the leader against every reservation, is refused before
    it is replicated (its apply alone would have let it in: 240 of 200 bytes)."""
    node, upload, part, session = await _two_writes_over_a_quota(tmp_path)
    committed = node.send(build.commit_multipart_upload(V, B, "big", upload, 1, part,
                                                        KEY_SIZE))
    await asyncio.sleep(0.05)
    refused = node.send(build.commit_key(V, B, "k1", session, KEY_SIZE))   # old flow
    await asyncio.sleep(0.05)
    assert node.replicator.waiting == 1, "the refused commit was never replicated"
    node.replicator.gate.set()   # the refusal is answered once a read round confirms
    assert (await _settles(committed))[0].status == om_pb2.OK
    answer = await refused
    assert answer.status == om_pb2.QUOTA_EXCEEDED, answer.message
    assert node.bucket().used_bytes == CHARGE
    await node.close()


async def test_each_type_runs_the_flow_the_row_names_and_a_retry_crosses_the_switch(
        tmp_path: Path) -> None:
    """Step 4: no row, every write is a request entry; after SetFlows the named types are
    batches (SetFlows itself always is). A retry of a write the old flow answered gets
    that answer from the leader flow's retry cache after its type switched, and the
    other way round, from the reply rows (memory forgotten, as after a failover)."""
    node = await _switchable(tmp_path / "db")
    assert set(node.kinds[1:]) == {log_entry.REPLICATED_REQUEST}, "no row: the old flow"
    first = await node.send(build.create_volume("vol1"), call_id=1001)
    assert first.status == om_pb2.OK
    assert node.kinds[-1] == log_entry.REPLICATED_REQUEST
    await node.flows(om_pb2.CreateVolume)
    assert node.kinds[-1] == log_entry.MERGED
    status = await node.ok(build.flow_status())
    assert list(status.flow_status.leader_types) == [om_pb2.CreateVolume]
    node.service.flow.retry_cache.clear_memory()
    entries = len(node.kinds)
    retry = await node.send(build.create_volume("vol1"), call_id=1001)
    assert retry.SerializeToString() == first.SerializeToString()
    assert len(node.kinds) == entries, "answered from the old flow's reply row"
    second = await node.send(build.create_volume("vol2"), call_id=1002)
    assert second.status == om_pb2.OK
    assert node.kinds[-1] == log_entry.MERGED
    await node.ok(build.create_bucket("vol2", "bkt"))
    assert node.kinds[-1] == log_entry.REPLICATED_REQUEST, "CreateBucket still runs the old flow"
    await node.flows()
    node.service.flow.retry_cache.clear_memory()
    entries = len(node.kinds)
    retry = await node.send(build.create_volume("vol2"), call_id=1002)
    assert retry.SerializeToString() == second.SerializeToString()
    assert len(node.kinds) == entries
    assert (await node.send(build.create_volume("vol3"))).status == om_pb2.OK
    assert node.kinds[-1] == log_entry.REPLICATED_REQUEST, "switched back"
    await node.close()


async def test_set_flows_is_an_administrators_write_of_write_types_after_finalizing(
        tmp_path: Path) -> None:
    node = Switchable(tmp_path / "db", acl_enabled=True)
    await node.service.start()
    denied = await node.send(build.set_flows([om_pb2.CreateKey]))
    assert denied.status == om_pb2.PERMISSION_DENIED
    for wrong in ([om_pb2.InfoVolume], [om_pb2.SetFlows], [om_pb2.CreateKey, 99_999]):
        refused = await node.send(build.set_flows(wrong), user=ADMIN)
        assert refused.status == om_pb2.INVALID_REQUEST, wrong
    changed = await node.ok(build.set_flows([om_pb2.CreateKey, om_pb2.CommitKey,
                                             om_pb2.CreateKey]), user=ADMIN)
    assert list(changed.set_flows.leader_types) == [om_pb2.CreateKey, om_pb2.CommitKey]
    assert list(changed.set_flows.before) == []
    await node.close()
    store = Store(tmp_path / "old-layout")
    batch = store.new_batch()
    store.batch_put(batch, om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY,
                    upgrade.layout_row(upgrade.LEADER_EXECUTION.version - 1))
    store.write(batch)
    store.close()
    node = Switchable(tmp_path / "old-layout")
    await node.service.start()
    refused = await node.send(build.set_flows([om_pb2.CreateKey]), user=ADMIN)
    assert refused.status == om_pb2.NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION
    assert "LEADER_EXECUTION" in refused.message
    await node.ok(build.finalize_upgrade(), user=ADMIN)
    await node.ok(build.set_flows([om_pb2.CreateKey]), user=ADMIN)
    await node.close()


def test_the_commands_name_types_and_the_nemesis_needs_switchable_oms(
        capsys: pytest.CaptureFixture[str]) -> None:
    every = flow_types("all")
    assert om_pb2.CommitKey in every
    assert om_pb2.PurgeDirectories in every, "the leader's own writes switch too"
    assert om_pb2.SetFlows not in every
    assert om_pb2.LookupKey not in every
    assert flow_types("none") == []
    assert flow_types("CreateKey, CommitKey") == [om_pb2.CreateKey, om_pb2.CommitKey]
    with pytest.raises(ValueError, match="no request type 'Nope'"):
        flow_types("Nope")
    assert main(["chaos", "--faults", "flow_switch,kill_leader", "--duration", "1"]) == 2
    assert "needs --execution switchable" in capsys.readouterr().err


async def test_the_auditor_accepts_the_flows_row_and_flags_a_malformed_one(
        tmp_path: Path) -> None:
    node = await _switchable(tmp_path / "db")
    await node.flows(om_pb2.CommitKey, om_pb2.CreateKey)
    await node.ok(build.create_key(V, B, "k1", KEY_SIZE))     # both kinds of entry
    node.machine.quiesce()
    store = node.machine.store
    assert store.get(om_pb2.TRANSACTION_INFO, tables.FLOWS_KEY) is not None
    assert store.count(om_pb2.CLIENT_REQUEST_REPLY) >= 4, "both flows' answers"
    assert auditor.audit(store, auditor.AuditConfig()).violations == ()
    bad = store.new_batch()
    unsorted = sorted([om_pb2.CreateKey, om_pb2.CommitKey], reverse=True)
    store.batch_put(bad, om_pb2.TRANSACTION_INFO, tables.FLOWS_KEY,
                    om_pb2.FlowSelection(leader_types=unsorted).SerializeToString())
    store.write(bad)
    (violation,) = auditor.audit(store, auditor.AuditConfig()).violations
    assert "FlowSelection" in violation.detail
    await node.close()
