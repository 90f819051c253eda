"""A scrub or audit asked for at a crawl is refused, not run for hours.

A ScrubReplica or AuditReplica waits for its whole pass, so a pace of a few rows
a second would hold the request (and its client) for as long as the store is
rows divided by that pace. The service refuses a pace below
``SCAN_PACE_MIN_ROWS_PER_S`` with INVALID_REQUEST before it starts anything, and
runs one at that pace (or the default, 0) to its end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from om.integrity.auditor import AuditConfig
from om.integrity.scrub import Scrubber
from om.integrity.service import SCAN_PACE_MIN_ROWS_PER_S, IntegrityService, Positions
from om.integrity.verifier import Verifier
from om.protocol import om_pb2
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store
from tests.test_digests import batch_of


def _service(tmp_path: Path) -> tuple[IntegrityService, Store]:
    store = Store(tmp_path / "db")
    machine = StateMachine(store)
    machine.apply(1, batch_of(1, [(0, 0, 1), (0, 1, 2), (0, 2, 3)]))
    scrubber = Scrubber(tmp_path, store, machine.applying, 20_000, lambda drifted: None)
    verifier = Verifier(tmp_path, store, lambda: None, 2)
    service = IntegrityService("om1", tmp_path, store, verifier, scrubber,
                               lambda: Positions(1, 1, ("om1",)), lambda found: None,
                               AuditConfig())
    return service, store


def _scrub(rows_per_s: int) -> om_pb2.OMRequest:
    return om_pb2.OMRequest(cmd_type=om_pb2.ScrubReplica, client_id="c", user="root",
                            scrub_replica=om_pb2.ScrubReplicaRequest(rows_per_s=rows_per_s))


def _audit(rows_per_s: int) -> om_pb2.OMRequest:
    return om_pb2.OMRequest(cmd_type=om_pb2.AuditReplica, client_id="c", user="root",
                            audit_replica=om_pb2.AuditReplicaRequest(rows_per_s=rows_per_s))


@pytest.mark.parametrize("make", [_scrub, _audit], ids=["scrub", "audit"])
@pytest.mark.parametrize("pace", [1, 7, SCAN_PACE_MIN_ROWS_PER_S - 1])
async def test_a_crawling_pace_is_refused_before_anything_runs(
        tmp_path: Path, make: object, pace: int) -> None:
    service, store = _service(tmp_path)
    assert callable(make)
    answer = await service.handle(make(pace))
    assert answer.status == om_pb2.INVALID_REQUEST
    assert str(SCAN_PACE_MIN_ROWS_PER_S) in answer.message
    assert service._scrubber.passes == 0
    assert service.audits == 0
    store.close()


@pytest.mark.parametrize("pace", [0, SCAN_PACE_MIN_ROWS_PER_S])
async def test_the_slowest_pace_allowed_and_the_default_run_a_whole_scrub(
        tmp_path: Path, pace: int) -> None:
    service, store = _service(tmp_path)
    answer = await service.handle(_scrub(pace))
    assert answer.status == om_pb2.OK, answer.message
    assert answer.scrub_replica.rows >= 3
    assert not answer.scrub_replica.drift
    assert service._scrubber.passes == 1
    store.close()
