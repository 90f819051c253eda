"""Prepare and upgrade (om/executor/admin/upgrade.py): the handlers in both flows, and the gate
of the leader's template in-process (refusals write nothing, a Prepare drains the
writes in flight, bounded). Real 3-node clusters: tests/test_upgrade_cluster.py."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.admin import upgrade
from om.gatekeeper.authorize import AclPolicy
from om.integrity import auditor
from om.node.parts import init_layout
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.store import Store
from tests.handler_harness import LEADER, OLD, Harness, status_name
from tests.leader_harness import LeaderUnderTest, config

ADMIN = "admin"
SLV = upgrade.SOFTWARE_LAYOUT_VERSION


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    db = Store(tmp_path_factory.mktemp("upgrade") / "db")
    yield db
    db.close()


@pytest.fixture(params=[LEADER, OLD])
def om(store: Store, request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(store, flow=request.param)
    yield harness
    harness.close()


def marker(h: Harness) -> om_pb2.PrepareMarker | None:
    return upgrade.prepared(h.old_flow.view if h.old_flow is not None else h.store)


def set_layout(h: Harness, version: int) -> None:
    """Starts the harness's (wiped) store at ``version``, as init_layout does, and its
    state machines read it, as at a node's start."""
    init_layout(h.store, version)
    h.state_machine.reload()
    if h.old_flow is not None:
        h.old_flow.reload()


# ------------------------------------------------------------------ handlers ---

class TestPrepare:
    def test_prepare_writes_the_marker_and_cancel_removes_it(self, om: Harness) -> None:
        response = om.run(build.prepare(), user=ADMIN)
        assert status_name(response) == "OK"
        assert not response.prepare.already_prepared
        index = response.prepare.prepare_index
        assert index > 0
        written = marker(om)
        assert written is not None
        assert (written.prepare_index, written.prepared_by) == (index, ADMIN)
        status = om.run(build.prepare_status()).prepare_status
        assert (status.status, status.prepare_index) == (om_pb2.PREPARE_COMPLETED, index)
        cancelled = om.run(build.cancel_prepare(), user=ADMIN)
        assert cancelled.cancel_prepare.was_prepared
        assert marker(om) is None
        assert om.run(build.prepare_status()).prepare_status.status == om_pb2.NOT_PREPARED

    def test_prepare_twice_answers_the_first_marker(self, om: Harness) -> None:
        first = om.run(build.prepare(), user=ADMIN).prepare
        again = om.run(build.prepare(), user=ADMIN)
        assert status_name(again) == "OK"
        assert again.prepare.already_prepared
        assert again.prepare.prepare_index == first.prepare_index
        held = marker(om)
        assert held is not None
        assert held.prepare_index == first.prepare_index

    def test_cancel_when_not_prepared_says_so_and_changes_no_row(self, om: Harness) -> None:
        before = om.data_digests()
        answer = om.run(build.cancel_prepare(), user=ADMIN)
        assert status_name(answer) == "OK"
        assert not answer.cancel_prepare.was_prepared
        assert om.data_digests() == before

    def test_the_marker_is_a_transaction_info_row_the_auditor_accepts(self, om: Harness) -> None:
        om.run(build.prepare(), user=ADMIN)
        om.run(build.finalize_upgrade(), user=ADMIN)
        if om.old_flow is not None:
            om.old_flow.quiesce()
        keys = {key for key, _ in om.store.iterate(om_pb2.TRANSACTION_INFO)}
        assert keys == {tables.TRANSACTION_INFO_KEY, tables.PREPARED_KEY,
                        tables.LAYOUT_VERSION_KEY}
        assert auditor.audit(om.store, auditor.AuditConfig()).violations == ()
        bad = om.store.new_batch()
        om.store.batch_put(bad, om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY,
                           om_pb2.LayoutVersion(version=SLV + 1).SerializeToString())
        om.store.write(bad)
        (violation,) = auditor.audit(om.store, auditor.AuditConfig()).violations
        assert "LayoutVersion" in violation.detail


class TestLayout:
    def test_a_fresh_store_runs_at_the_software_layout(self, om: Harness) -> None:
        progress = om.run(build.finalize_upgrade_progress()).finalize_upgrade_progress
        assert progress.status == om_pb2.ALREADY_FINALIZED
        assert progress.metadata_layout_version == progress.software_layout_version == SLV
        assert om.store.get(om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY) is None

    def test_finalize_raises_the_layout_once(self, om: Harness) -> None:
        set_layout(om, 0)
        progress = om.run(build.finalize_upgrade_progress()).finalize_upgrade_progress
        assert (progress.status, progress.metadata_layout_version) == (
            om_pb2.FINALIZATION_REQUIRED, 0)
        machine = om.old_flow or om.state_machine   # the one that applies this flow
        assert machine.layout_version == 0
        assert progress.features[-2:] == ["LEADER_EXECUTION(4): not finalized",
                                          f"MERGED_ENTRIES({SLV}): not finalized"]
        done = om.run(build.finalize_upgrade("ops"), user=ADMIN).finalize_upgrade
        assert (done.status, done.metadata_layout_version) == (om_pb2.FINALIZATION_DONE, SLV)
        assert any("MULTIPART_UPLOAD" in m for m in done.messages)
        assert any("FILESYSTEM_SNAPSHOT" in m for m in done.messages)
        assert any("LEADER_EXECUTION" in m for m in done.messages)
        assert any("MERGED_ENTRIES" in m for m in done.messages)
        assert machine.layout_version == SLV, "apply keeps the layout it wrote"
        again = om.run(build.finalize_upgrade(), user=ADMIN).finalize_upgrade
        assert again.status == om_pb2.ALREADY_FINALIZED
        view = om.old_flow.view if om.old_flow is not None else om.store
        assert upgrade.metadata_layout_version(view) == SLV

    def test_init_layout_leaves_a_store_in_use_alone(self, om: Harness) -> None:
        om.run(build.create_volume("vol"), user=ADMIN)
        if om.old_flow is not None:
            om.old_flow.quiesce()
        init_layout(om.store, 0)
        assert om.store.get(om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY) is None

    @pytest.mark.parametrize(("mlv", "fso", "mpu", "snap"), [
        (0, "refused", "refused", "refused"), (1, None, "refused", "refused"),
        (2, None, None, "refused"), (3, None, None, None)])
    def test_features_above_the_layout_are_refused(self, store: Store, mlv: int,
                                                   fso: str | None, mpu: str | None,
                                                   snap: str | None) -> None:
        h = Harness(store)
        try:
            set_layout(h, mlv)
            fso_bucket = build.create_bucket("v", "b")
            fso_bucket.create_bucket.layout = "FILE_SYSTEM_OPTIMIZED"
            initiate = build.initiate_multipart_upload("v", "b", "k", 1)
            obs_bucket = build.create_bucket("v", "b")
            refusals = {name: upgrade.layout_refusal(request, store) for name, request in
                        (("fso", fso_bucket), ("mpu", initiate), ("obs", obs_bucket),
                         ("snap", build.create_snapshot("v", "b", "s1")))}
            got = {name: None if r is None else "refused" for name, r in refusals.items()}
            assert got == {"fso": fso, "mpu": mpu, "obs": None, "snap": snap}
            for refusal in refusals.values():
                if refusal is not None:
                    assert refusal.status == om_pb2.NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION
                    assert "finalizeupgrade" in refusal.message
        finally:
            h.close()


# ----------------------------------------------------- the gate, in-process ---

@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LeaderUnderTest]:
    acl = AclPolicy(acl_enabled=True, admins=frozenset({ADMIN, "alice"}))
    under_test = LeaderUnderTest(tmp_path / "db", config(acl=acl, lock_timeout_s=5.0))
    await under_test.start()
    await under_test.ok(build.create_volume("vol"))
    await under_test.ok(build.create_bucket("vol", "bkt"))
    yield under_test
    await under_test.close()


async def _wait_until(condition: object, timeout_s: float = 5.0) -> None:
    assert callable(condition)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


async def test_prepared_refuses_writes_and_writes_nothing_reads_go_on(
        leader: LeaderUnderTest) -> None:
    await leader.ok(build.prepare())
    assert leader.service.prepare_gate_closed()
    applied = leader.state_machine.applied_index
    for request in (build.create_key("vol", "bkt", "k", 10), build.create_volume("vol2"),
                    build.finalize_upgrade()):
        answer = await leader.call(request)
        assert answer.status == 74, answer
        assert status_name(answer) == "NOT_SUPPORTED_OPERATION_WHEN_PREPARED"
    assert leader.state_machine.applied_index == applied, "a refusal wrote nothing"
    assert leader.store.get(om_pb2.VOLUME, tables.volume_key("vol2")) is None
    assert (await leader.ok(build.info_bucket("vol", "bkt"))).info_bucket.bucket_info.bucket_name \
        == "bkt"
    assert leader.service.flow.sweep_expired() == 0, "the leader's own writes pause too"
    assert leader.service.flow.purger.ready_term() is None
    await leader.ok(build.cancel_prepare())
    await leader.ok(build.create_volume("vol2"))
    assert leader.service.flow.purger.ready_term() == 1


async def test_prepared_survives_a_restart(tmp_path: Path) -> None:
    first = LeaderUnderTest(tmp_path / "db", config())
    await first.start()
    index = (await first.ok(build.prepare())).prepare.prepare_index
    await first.close()
    second = LeaderUnderTest(tmp_path / "db", config())
    await second.start()
    try:
        answer = await second.call(build.create_volume("after"))
        assert status_name(answer) == "NOT_SUPPORTED_OPERATION_WHEN_PREPARED"
        status = (await second.ok(build.prepare_status())).prepare_status
        assert (status.status, status.prepare_index) == (om_pb2.PREPARE_COMPLETED, index)
    finally:
        await second.close()


async def test_prepare_waits_for_the_writes_in_flight(leader: LeaderUnderTest) -> None:
    leader.replicator.gate.clear()   # writes stay in flight until the gate opens
    in_flight = asyncio.create_task(leader.call(build.create_volume("early")))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    preparing = asyncio.create_task(leader.call(build.prepare()))
    await _wait_until(lambda: leader.service.in_flight == 2)
    late = await leader.call(build.create_volume("late"))
    assert status_name(late) == "NOT_SUPPORTED_OPERATION_WHEN_PREPARED", "the gate is closed"
    local = build.prepare_status()
    local.local_read = True   # a linearizable read's round would wait behind the held write
    status = (await leader.ok(local)).prepare_status
    assert status.status == om_pb2.PREPARE_GATE_ENABLED
    assert leader.replicator.waiting == 1, "the Prepare is not replicated before the drain"
    leader.replicator.gate.set()
    assert status_name(await in_flight) == "OK"
    prepared = await preparing
    assert status_name(prepared) == "OK"
    assert leader.store.get(om_pb2.VOLUME, tables.volume_key("early")) is not None
    marked = upgrade.prepared(leader.store)
    assert marked is not None
    assert marked.prepare_index == prepared.prepare.prepare_index
    leader.assert_idle()


async def test_prepare_gives_up_when_the_writes_do_not_drain(leader: LeaderUnderTest) -> None:
    leader.replicator.gate.clear()
    in_flight = asyncio.create_task(leader.call(build.create_volume("slow")))
    await _wait_until(lambda: leader.replicator.waiting == 1)
    failed = await leader.call(build.prepare(drain_timeout_s=1))
    assert failed.status == 73, failed
    assert status_name(failed) == "PREPARE_FAILED"
    assert not leader.service.prepare_gate_closed(), "the gate opens again"
    leader.replicator.gate.set()
    assert status_name(await in_flight) == "OK"
    assert upgrade.prepared(leader.store) is None
    await leader.ok(build.create_volume("after"))
    leader.assert_idle()


async def test_only_administrators_prepare_cancel_and_finalize(
        leader: LeaderUnderTest) -> None:
    for request in (build.prepare(), build.cancel_prepare(), build.finalize_upgrade()):
        answer = await leader.call(request, user="mallory")
        assert status_name(answer) == "PERMISSION_DENIED", answer
    assert upgrade.prepared(leader.store) is None
    for request in (build.prepare_status(), build.finalize_upgrade_progress()):
        assert status_name(await leader.call(request, user="mallory")) == "OK"


async def test_a_feature_above_the_layout_is_refused_until_finalized(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    init_layout(store, 1)
    store.close()
    under_test = LeaderUnderTest(tmp_path / "db", dataclasses.replace(config()))
    await under_test.start()
    try:
        await under_test.ok(build.create_volume("vol"))
        await under_test.ok(build.create_bucket("vol", "bkt"))
        applied = under_test.state_machine.applied_index
        refused = await under_test.call(build.initiate_multipart_upload("vol", "bkt", "k", 1))
        assert refused.status == 75, refused
        assert status_name(refused) == "NOT_SUPPORTED_OPERATION_PRIOR_FINALIZATION"
        assert under_test.state_machine.applied_index == applied, "nothing written"
        done = (await under_test.ok(build.finalize_upgrade())).finalize_upgrade
        assert done.status == om_pb2.FINALIZATION_DONE
        await under_test.ok(build.initiate_multipart_upload("vol", "bkt", "k", 1))
    finally:
        await under_test.close()


async def test_batches_travel_as_b_entries_until_merged_entries_is_finalized(
        tmp_path: Path) -> None:
    """Below MERGED_ENTRIES a node of the previous release may follow, and it decodes
    B only: every batch is B, byte for byte the tag and the sealed batch. The
    FinalizeUpgrade's own batch is B too (sealed before it applied); the next batch is
    M, and after a restart the first one is."""
    store = Store(tmp_path / "db")
    init_layout(store, upgrade.MERGED_ENTRIES.version - 1)
    store.close()
    first = LeaderUnderTest(tmp_path / "db", config())
    await first.start()
    try:
        await first.ok(build.create_volume("vol"))
        await first.ok(build.create_bucket("vol", "bkt"))
        sealed_b = list(first.replicator.sent)
        await first.ok(build.finalize_upgrade())
        await first.ok(build.create_key("vol", "bkt", "k", 0))
        finalize, after = list(first.replicator.sent)[-2:]
    finally:
        await first.close()
    assert [entry[:1] for entry in sealed_b] == [b"B", b"B"]
    (volume,) = [op for op in _batch_of_b(sealed_b[0]).ops if op.table == om_pb2.VOLUME]
    assert volume.key == tables.volume_key("vol")
    assert _batch_of_b(finalize).ops[0].key == tables.LAYOUT_VERSION_KEY
    assert after[:1] == b"M"
    (after_batch,) = log_entry.decode_batches(after)
    assert any(op.table == om_pb2.OPEN_KEY for op in after_batch.ops)
    second = LeaderUnderTest(tmp_path / "db", config())
    await second.start()
    try:
        assert second.state_machine.layout_version == SLV
        await second.ok(build.create_volume("vol2"))
        assert [entry[:1] for entry in second.replicator.sent] == [b"M"]
    finally:
        await second.close()


def _batch_of_b(entry: bytes) -> om_pb2.PersistDbBatch:
    """A B entry's batch, as a release before M decodes it (the tag, then the batch)."""
    assert entry[:1] == log_entry.PERSIST_DB
    batch = log_entry.decode(entry)
    assert isinstance(batch, om_pb2.PersistDbBatch)
    return batch


async def test_a_fresh_store_seals_merged_entries_at_once(leader: LeaderUnderTest) -> None:
    """A new cluster runs at the software's layout: M from its first batch."""
    assert leader.state_machine.layout_version == SLV
    assert [entry[:1] for entry in leader.replicator.sent] == [b"M", b"M"]
