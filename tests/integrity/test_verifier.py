"""The node side of verify on a real store: a checkpoint at the entry, trees behind it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.config import NodeAddress, ServerConfig
from om.consensus.port import ReplicateResult, ReplicateStatus, Role
from om.integrity import marker, scan
from om.integrity.merkle import KeyRange
from om.integrity.verifier import Verifier, VerifyUnavailable
from om.node.integrity import GuardedReplicator, NodeIntegrity
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult
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
                              lambda: harness.state_machine.applied_index,
                              lambda: stops.append("stopped"))
    yield harness, integrity, stops
    integrity.verifier.close()
    store.close()


def _verify(harness: Harness, integrity: NodeIntegrity, halt: str = "",
            term: int = TERM) -> tuple[int, ApplyResult]:
    """Applies a verify entry as every replica does: apply, then the node's hook."""
    harness.position += 1
    batch = om_pb2.PersistDbBatch(term=term, leader_id="om1", timestamp_ms=harness.clock.now_ms,
                                  verify=om_pb2.VerifyMarker(verify_id=b"id-%d" % harness.position,
                                                             rows_per_s=0, halt_node_id=halt))
    entry = log_entry.encode_verify(batch)
    result = harness.state_machine.apply_entry(harness.position, entry)
    integrity.after_apply(harness.position, entry, result)
    return harness.position, result


def _done(verifier: Verifier, position: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (found := verifier.get(position)) is None or found.state == om_pb2.VERIFY_COMPUTING:
        assert time.monotonic() < deadline, "the trees were never computed"
        time.sleep(0.05)
    assert found.state == om_pb2.VERIFY_DONE, found.detail


def test_the_trees_describe_the_entrys_position_not_what_came_after(
        node: tuple[Harness, NodeIntegrity, list[str]]) -> None:
    harness, integrity, _ = node
    position, result = _verify(harness, integrity)
    assert result.applied
    harness.put_key(VOLUME, BUCKETS[0], "after-the-verify", data_size=5)   # not in the trees
    _done(integrity.verifier, position)
    found = integrity.verifier.get(position)
    assert found is not None
    assert found.forest is not None
    assert found.forest.applied_index == position
    live = scan.compute_trees(harness.store, found.spec.params)
    assert live.applied_index == position + 2
    assert found.forest.roots()["keyTable"] != live.roots()["keyTable"]
    assert found.forest.roots()["bucketTable"] != live.roots()["bucketTable"]
    keys = KeyRange("keyTable", b"", None)
    page, more = integrity.verifier.read_range(position, keys, None, 5)
    assert more
    rest, more = integrity.verifier.read_range(position, keys, page[-1][0], 1000)
    assert not more
    later = tables.key_key(VOLUME, BUCKETS[0], "after-the-verify")
    assert page + rest == [row for row in scan.read_range(harness.store, keys) if row[0] != later]


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
        integrity.verifier.read_range(stale_position, KeyRange("keyTable", b"", None), None, 9)


def test_a_restart_keeps_finished_trees_and_recomputes_the_rest(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    harness = populate(store, keys=6)
    config = ServerConfig(node_id="om1", data_dir=tmp_path, nodes=(NodeAddress("om1"),))
    integrity = NodeIntegrity(config, store, harness.state_machine.quiesce, lambda: 0,
                              lambda: None)
    positions = [_verify(harness, integrity)[0] for _ in range(4)]
    _done(integrity.verifier, positions[-1])
    assert integrity.verifier.get(positions[0]) is None, "retired"
    integrity.verifier.close()
    kept = sorted(p.name for p in (tmp_path / "verify").iterdir())
    assert [int(name) for name in kept] == positions[-3:], "the newest three are kept"
    (tmp_path / "verify" / kept[-1] / "trees.db").unlink()                 # a crash mid-compute
    again = Verifier(tmp_path, store, harness.state_machine.quiesce)
    try:
        first = again.get(positions[-3])
        assert first is not None
        assert first.state == om_pb2.VERIFY_DONE
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
