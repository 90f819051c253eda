"""``core-cpu``: the leader's core alone, CPU per write, with no sockets, TLS or Raft.

The leader flow's request service (``leader_service``) on a real RocksDB store in
a temporary directory, with the single-node replicator (apply at once, nothing
synced), is fed what ``omkg`` sends, the way the server feeds it: groups of
``--group`` CreateKey requests submitted at once, then the CommitKey of each,
``--writes`` in all after a warm-up. It prints the write rate and the process's CPU per write
(``time.process_time``): the per-write cost of the template, locks, execution,
group commit and apply, which bounds one leader (docs/PERFORMANCE.md, *What limits
one leader*). Alternate it between two checkouts (``PYTHONPATH``) to
compare changes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
import uuid
from pathlib import Path

import uvloop

from bench.figures.figure import Figure, positive_int
from om.client import requests as build
from om.consensus.local import LocalReplicator
from om.flows.leader_flow import leader_service
from om.flows.settings import LeaderConfig
from om.node.parts import MACHINE_SEAM
from om.observe.tracing import NullTracer
from om.protocol import om_pb2
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store

WARMUP_WRITES = 2000


class _Core:
    """A leader service on a fresh store; ``submit`` stamps ids as a client would."""

    def __init__(self, directory: Path) -> None:
        self.store = Store(directory / "db")
        machine = StateMachine(self.store)
        replicator = LocalReplicator("om1", "127.0.0.1:1", machine.applied_index,
                                     machine.apply_entry)
        self.service = leader_service("om1", self.store, machine, replicator, LeaderConfig(),
                                      NullTracer(), MACHINE_SEAM)
        self._client = str(uuid.uuid4())
        self._calls = itertools.count(1)

    def submit(self, request: om_pb2.OMRequest) -> asyncio.Future[om_pb2.OMResponse]:
        request.client_id = self._client
        request.call_id = next(self._calls)
        request.user = "bench"
        return self.service.submit(request)

    async def keys(self, first: int, count: int, group: int) -> None:
        """``count`` keys from ``first``, created and committed ``group`` at a time."""
        for base in range(first, first + count, group):
            names = [f"k{n}" for n in range(base, min(base + group, first + count))]
            created = await asyncio.gather(*(self.submit(build.create_key(
                "vol1", "bucket1", name, 0)) for name in names))
            committed = await asyncio.gather(*(self.submit(build.commit_key(
                "vol1", "bucket1", name, answer.create_key.client_session_id, 0))
                for name, answer in zip(names, created, strict=True)))
            failed = [a for a in (*created, *committed) if a.status != om_pb2.OK]
            assert not failed, f"{om_pb2.Status.Name(failed[0].status)}: {failed[0].message}"


async def measure(writes: int, group: int) -> dict[str, float]:
    """Writes/s and CPU µs per write of ``writes`` writes (half creates, half commits)."""
    with tempfile.TemporaryDirectory(prefix="om-core-cpu-") as directory:
        core = _Core(Path(directory))
        await core.service.start()
        try:
            for request in (build.create_volume("vol1"), build.create_bucket("vol1", "bucket1")):
                answer = await core.submit(request)
                assert answer.status == om_pb2.OK, answer.message
            await core.keys(0, WARMUP_WRITES // 2, group)
            cpu, wall = time.process_time(), time.perf_counter()
            await core.keys(WARMUP_WRITES, writes // 2, group)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        finally:
            await core.service.close()
            core.store.close()
    done = writes // 2 * 2
    return {"writes": done, "writes_per_s": round(done / wall, 1),
            "cpu_us_per_write": round(cpu * 1e6 / done, 1)}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--writes", type=positive_int, default=20_000,
                        help="write requests measured (default 20,000)")
    parser.add_argument("--group", type=positive_int, default=64,
                        help="requests submitted at once, as one read delivers them (64)")


def _run(args: argparse.Namespace) -> int:
    print(json.dumps(uvloop.run(measure(args.writes, args.group))))
    return 0


FIGURE = Figure(
    name="core-cpu",
    summary="the leader's core alone: CPU per write, no sockets, TLS or Raft",
    description=__doc__ or "",
    add_arguments=_add_arguments,
    run=_run,
)
