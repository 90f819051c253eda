"""The node side of verify on a real store: a checkpoint at the entry, its digests read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from om.config import NodeAddress, ServerConfig
from om.consensus.port import ReplicateResult, ReplicateStatus, Role
from om.integrity import compare, marker, repair
from om.integrity.verifier import Verifier, VerifyUnavailable
from om.node.integrity import GuardedReplicator, NodeIntegrity
from om.node.parts import MACHINE_SEAM
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.digests import Digests
from om.statemachine.store import Store
from tests.handler_harness import TERM, Harness
from tests.integrity.populate import BUCKETS, VOLUME, populate


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Harness, NodeIntegrity, list[str]]]:
    config = ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(NodeAddress("om1"),))
    store = Store(tmp_path / "db")
    harness = populate(store, keys=20)
    stops: list[str] = []
    integrity = NodeIntegrity(config, store, harness.state_machine.quiesce,
                              harness.state_machine.applying,
                              lambda: harness.state_machine.applied_index,
                              lambda: stops.append("stopped"), MACHINE_SEAM)
    yield harness, integrity, stops
    integrity.verifier.close()
    store.close()


def _verify(harness: Harness, integrity: NodeIntegrity, halt: str = "",
            term: int = TERM) -> tuple[int, ApplyResult]:
    """Applies a verify entry as every replica does: apply, then the node's hook."""
    harness.position += 1
    batch = om_pb2.PersistDbBatch(term=term, leader_id="om1", timestamp_ms=harness.clock.now_ms,
                                  verify=om_pb2.VerifyMarker(verify_id=b"id-%d" % harness.position,
                                                             halt_node_id=halt))
    entry = log_entry.encode_verify(batch)
    result = harness.state_machine.apply_entry(harness.position, entry)
    integrity.after_apply(harness.position, entry, result)
    return harness.position, result


def _done(verifier: Verifier, position: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (found := verifier.get(position)) is None or found.state == om_pb2.VERIFY_COMPUTING:
        assert time.monotonic() < deadline, "the digests were never read"
        time.sleep(0.05)
    assert found.state == om_pb2.VERIFY_DONE, found.detail


def test_the_digests_describe_the_entrys_position_not_what_came_after(
        node: tuple[Harness, NodeIntegrity, list[str]]) -> None:
    harness, integrity, _ = node
    position, result = _verify(harness, integrity)
    assert result.applied
    at_entry = compare.root_bytes(repair.local_roots(harness.store))
    harness.put_key(VOLUME, BUCKETS[0], "after-the-verify", data_size=5)   # not in them
    _done(integrity.verifier, position)
    found = integrity.verifier.get(position)
    assert found is not None
    assert compare.root_bytes(found.roots) == at_entry
    live = compare.root_bytes(repair.local_roots(harness.store))
    assert live["keyTable"] != at_entry["keyTable"]
    hasher = Digests.attach(harness.store).hasher
    later = tables.key_key(VOLUME, BUCKETS[0], "after-the-verify")
    earlier = tables.key_key(VOLUME, BUCKETS[0], "key002")
    leaves = sorted({hasher.leaf(later), hasher.leaf(earlier)})
    rows, more = integrity.verifier.leaf_rows(position, "keyTable", leaves, True, None, 1000)
    assert not more
    keys = {row.key: row for row in rows}
    assert later not in keys
    assert keys[earlier].value == harness.store.get(om_pb2.KEY, earlier)
    assert int.from_bytes(keys[earlier].digest, "big") == hasher.digest(
        earlier, keys[earlier].value)
    first, more = integrity.verifier.leaf_rows(position, "keyTable", list(range(1 << 16)),
                                               False, None, 3)
    assert more
    assert len(first) == 3
    assert not first[0].value


def test_replays_and_deposed_leaders_entries_take_no_checkpoint(
        node: tuple[Harness, NodeIntegrity, list[str]]) -> None:
    harness, integrity, _ = node
    position, _ = _verify(harness, integrity)
    batch = om_pb2.PersistDbBatch(term=TERM, verify=om_pb2.VerifyMarker(verify_id=b"x"))
    entry = log_entry.encode_verify(batch)
    replay = harness.state_machine.apply_entry(position, entry)       # a restart's replay
    assert not replay.applied
    integrity.after_apply(position + 5, entry, replay)
    stale_position, stale = _verify(harness, integrity, term=TERM - 1)
    assert not stale.applied
    assert integrity.verifier.get(position + 5) is None
    assert integrity.verifier.get(stale_position) is None
    with pytest.raises(VerifyUnavailable, match="no verification"):
        integrity.verifier.leaf_rows(stale_position, "keyTable", [0], False, None, 9)


def test_a_restart_reads_the_kept_verifications_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    harness = populate(store, keys=6)
    config = ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(NodeAddress("om1"),))
    integrity = NodeIntegrity(config, store, harness.state_machine.quiesce,
                              harness.state_machine.applying, lambda: 0, lambda: None,
                              MACHINE_SEAM)
    positions = [_verify(harness, integrity)[0] for _ in range(4)]
    _done(integrity.verifier, positions[-1])
    assert integrity.verifier.get(positions[0]) is None, "retired"
    integrity.verifier.close()
    kept = sorted(p.name for p in (tmp_path / "verify").iterdir())
    assert [int(name) for name in kept] == positions[-3:], "the newest three are kept"
    again = Verifier(tmp_path, store, harness.state_machine.quiesce, 3)
    try:
        _done(again, positions[-3])
        _done(again, positions[-1])
    finally:
        again.close()
        store.close()


def test_a_halt_stops_only_a_diverged_node_at_its_position(
        node: tuple[Harness, NodeIntegrity, list[str]], tmp_path: Path) -> None:
    harness, integrity, stops = node
    _verify(harness, integrity, halt="om1")
    assert not stops, "a healthy node ignores a halt"
    marker.save(tmp_path, marker.Marker(marker.DIVERGED, 3, ("keyTable",), 3))
    _verify(harness, integrity, halt="om2")
    assert not stops, "a halt aimed at another node"
    position, _ = _verify(harness, integrity, halt="om1")
    assert stops == ["stopped"]
    found = marker.load(tmp_path)
    assert found is not None
    assert (found.state, found.position, found.detected_at) == (marker.HALTED, position, 3)
    assert harness.store.transaction_info().applied_index == position
    config = ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(NodeAddress("om1"),))
    with pytest.raises(marker.ReplicaHalted, match="stopped for repair"):
        NodeIntegrity.check_startable(config)


class FixedRole:
    def __init__(self, role: Role) -> None:
        self._role = role

    async def replicate(self, entry: bytes) -> ReplicateResult:
        return ReplicateResult(ReplicateStatus.COMMITTED, 1)

    def role(self) -> Role:
        return self._role


def test_a_diverged_node_is_never_ready_to_lead() -> None:
    diverged = [False]
    ready = Role(is_leader=True, ready=True, leader_id="om1", leader_address="a", term=2,
                 commit_index=5)
    guarded = GuardedReplicator(FixedRole(ready), lambda: diverged[0])
    assert guarded.role() == ready
    diverged[0] = True
    assert guarded.role().is_leader
    assert not guarded.role().ready
    assert asyncio.run(guarded.replicate(b"x")).status is ReplicateStatus.COMMITTED


def test_a_store_from_before_digests_gets_them_and_then_verifies(tmp_path: Path) -> None:
    """Rows written by a release without digests: the node's build covers them, the
    verification fails until it is done, and succeeds after."""
    store = Store(tmp_path / "db")
    batch = store.new_batch()
    for i in range(2500):
        store.batch_put(batch, om_pb2.KEY, tables.key_key(VOLUME, BUCKETS[0], f"old{i}"), b"v")
    store.write(batch)
    machine = StateMachine(store)        # (the handler harness would wipe the store)
    harness = SimpleNamespace(position=0, clock=SimpleNamespace(now_ms=1), state_machine=machine)
    config = ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(NodeAddress("om1"),))
    integrity = NodeIntegrity(config, store, machine.quiesce, machine.applying, lambda: 0,
                              lambda: None, MACHINE_SEAM)
    try:
        assert not Digests.attach(store).complete
        position, _ = _verify(harness, integrity)  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while (found := integrity.verifier.get(position)) is None \
                or found.state == om_pb2.VERIFY_COMPUTING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert found.state == om_pb2.VERIFY_FAILED
        assert "still being built" in found.detail
        integrity._build_digests()
        assert Digests.attach(store).complete
        position, _ = _verify(harness, integrity)  # type: ignore[arg-type]
        _done(integrity.verifier, position)
        done = integrity.verifier.get(position)
        assert done is not None
        assert done.roots["keyTable"][1] == 2500
    finally:
        integrity.verifier.close()
        store.close()


@pytest.mark.parametrize("page", [1, 2, 3, 7])
def test_leaf_rows_page_through_every_row_once_in_order(
        node: tuple[Harness, NodeIntegrity, list[str]], page: int) -> None:
    """Pages of any size, each resumed after the last row of the one before, give the
    rows one large read gives, each once, and say "more" until the last."""
    harness, integrity, _ = node
    position, _ = _verify(harness, integrity)
    _done(integrity.verifier, position)
    leaves = list(range(1 << 16))
    whole, more = integrity.verifier.leaf_rows(position, "keyTable", leaves, True, None, 10_000)
    assert not more
    assert len(whole) >= 10   # populate wrote keys in every bucket
    paged: list[om_pb2.LeafRow] = []
    after: tuple[int, bytes] | None = None
    for _ in range(len(whole) + 2):
        rows, more = integrity.verifier.leaf_rows(position, "keyTable", leaves, True, after,
                                                  page)
        assert len(rows) <= page
        paged += rows
        if not more:
            break
        assert len(rows) == page
        after = (rows[-1].leaf, rows[-1].key)
    assert not more
    assert [(r.leaf, r.key, r.value, r.digest) for r in paged] == \
        [(r.leaf, r.key, r.value, r.digest) for r in whole]
