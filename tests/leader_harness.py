"""An in-process leader on a real store, with a replicator tests can hold back."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from om.consensus.local import LocalReplicator
from om.consensus.port import ReplicateResult, ReplicateStatus, Role
from om.flows.leader_flow import leader_service
from om.flows.settings import LeaderConfig
from om.node.parts import MACHINE_SEAM
from om.observe.tracing import NullTracer
from om.protocol import om_pb2
from om.schema import tables
from om.schema.seam import Seam
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store

SENT_KEPT = 64   # entries a GatedReplicator keeps


def seam_at(clock_ms: Callable[[], int] | None) -> Seam:
    """The machine's seam, its wall clock replaced by a test's ``clock_ms`` when given."""
    if clock_ms is None:
        return MACHINE_SEAM
    return dataclasses.replace(MACHINE_SEAM, wall_ns=lambda: clock_ms() * 1_000_000)


@dataclass
class GatedReplicator:
    """Wraps LocalReplicator: entries wait for ``gate``; ``fail_with`` refuses them."""

    inner: LocalReplicator
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    fail_with: ReplicateStatus | None = None
    waiting: int = 0
    entries: int = 0
    # the newest entries sent, as sent (tests read their format)
    sent: deque[bytes] = field(default_factory=lambda: deque(maxlen=SENT_KEPT))
    term: int | None = None   # a term this node leads in instead of the inner's (an election)

    def __post_init__(self) -> None:
        self.gate.set()

    async def replicate(self, entry: bytes) -> ReplicateResult:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        if self.fail_with is not None:
            return ReplicateResult(self.fail_with)
        self.entries += 1
        self.sent.append(entry)
        return await self.inner.replicate(entry)

    def role(self) -> Role:
        role = self.inner.role()
        return role if self.term is None else dataclasses.replace(role, term=self.term)


class LeaderUnderTest:
    """The leader flow's request service with its store and replicator; ``call`` fills
    in ids."""

    def __init__(self, path: Path, config: LeaderConfig,
                 clock_ms: Callable[[], int] | None = None, shard: int = 0) -> None:
        """``clock_ms``: the service's clock (a test's, to move time; the machine's
        wall clock by default); ``shard``: the shard whose store this is."""
        self.path = path
        self.store = Store(path)
        self.state_machine = StateMachine(self.store, shard)
        inner = LocalReplicator("om1", "127.0.0.1:9862", self.state_machine.applied_index,
                                self.state_machine.apply_entry)
        self.replicator = GatedReplicator(inner)
        self.service = leader_service("om1", self.store, self.state_machine, self.replicator,
                                      config, NullTracer(), seam_at(clock_ms))
        self._call_ids = itertools.count(1)
        self.client_id = str(uuid.uuid4())

    async def start(self) -> None:
        await self.service.start()

    async def close(self) -> None:
        await self.service.close()
        self.store.close()

    def stamp(self, request: om_pb2.OMRequest, client_id: str = "",
              user: str = "alice") -> om_pb2.OMRequest:
        """Gives the request ids, as a client would (one client id per instance)."""
        request.client_id = client_id or self.client_id
        request.user = user
        if not request.call_id:
            request.call_id = next(self._call_ids)
        return request

    async def call(self, request: om_pb2.OMRequest, **ids: Any) -> om_pb2.OMResponse:
        return await self.service.handle(self.stamp(request, **ids))

    async def ok(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        response = await self.call(request)
        assert response.status == om_pb2.OK, (om_pb2.Status.Name(response.status),
                                              response.message)
        return response

    def bucket(self, volume: str, bucket: str) -> om_pb2.BucketInfo:
        raw = self.store.get(om_pb2.BUCKET, tables.bucket_key(volume, bucket))
        assert raw is not None
        return om_pb2.BucketInfo.FromString(raw)

    def assert_idle(self) -> None:
        """Nothing is held: locks, reservations, in-flight marks."""
        stats = self.service.flow.locks.table.statistics()
        assert (stats.resources, stats.holders, stats.waiters) == (0, 0, 0)
        assert len(self.service.flow.reservations) == 0
        assert self.service.in_flight == 0
        assert self.service.flow.retry_cache.statistics()["in_flight"] == 0


def config(**changes: Any) -> LeaderConfig:
    """LeaderConfig with top-level fields replaced."""
    return dataclasses.replace(LeaderConfig(), **changes)
