"""How long writes are unavailable after the leader is killed (``kill -9``).

Under a light, steady load (``WRITERS`` clients, each writing a new volume,
then pausing ``PAUSE_S``), each trial kills the leader's processes with
SIGKILL and measures the time from the kill to the acknowledgement of the
first write *issued after* it (a conservative reading: it includes that
write's own round trip; a write already in flight at the kill is retried by
the client with the same call id, as any client does). The victim is then
restarted as a follower and the cluster given time to settle before the next
trial. Reported: every trial's seconds, their median and their maximum.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from om.client import AsyncOMClient, OMClientError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster

WRITERS = 4
PAUSE_S = 0.02
STEADY_S = 0.5
SETTLE_S = 1.0
TRIAL_TIMEOUT_S = 30.0
POLICY = RetryPolicy(deadline_s=TRIAL_TIMEOUT_S, attempt_timeout_s=2.0)


@dataclass
class FailoverResult:
    """The write unavailability of each trial, in seconds."""

    unavailable_s: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Trials, median and maximum (None when there was no trial)."""
        found = self.unavailable_s
        return {"trials": len(found),
                "median_s": statistics.median(found) if found else None,
                "max_s": max(found) if found else None,
                "unavailable_s": found}


@dataclass
class _Writes:
    """When each acknowledged write was issued and acknowledged (monotonic seconds)."""

    acknowledged: list[tuple[float, float]] = field(default_factory=list)

    def first_issued_after(self, moment: float) -> float | None:
        done = [acked for issued, acked in self.acknowledged if issued >= moment]
        return min(done) if done else None


async def _write_forever(client: AsyncOMClient, writer: int, writes: _Writes,
                         stop: asyncio.Event) -> None:
    for number in itertools.count():
        if stop.is_set():
            return
        issued = time.monotonic()
        try:
            await client.call(build.create_volume(f"failover-{writer}-{number}"))
        except OMClientError:
            continue
        writes.acknowledged.append((issued, time.monotonic()))
        await asyncio.sleep(PAUSE_S)


async def measure(cluster: om_cluster.Cluster, trials: int) -> FailoverResult:
    """Runs ``trials`` kill -9 trials against ``cluster``; restarts each victim."""
    assert trials > 0
    result = FailoverResult()
    tls = cluster.client_tls()   # with TLS the user is the certificate's
    client = AsyncOMClient(cluster.addresses, user=None if tls else "bench", policy=POLICY,
                           tls=tls)
    writes = _Writes()
    stop = asyncio.Event()
    workers = [asyncio.create_task(_write_forever(client, n, writes, stop))
               for n in range(WRITERS)]
    try:
        for _ in range(trials):
            result.unavailable_s.append(await _trial(cluster, writes))
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
        await client.close()
    return result


async def _trial(cluster: om_cluster.Cluster, writes: _Writes) -> float:
    victim = (await asyncio.to_thread(cluster.wait_for_leader)).node_id
    await asyncio.sleep(STEADY_S)
    await asyncio.to_thread(cluster.kill_node, victim)
    killed = time.monotonic()
    while (recovered := writes.first_issued_after(killed)) is None:
        if time.monotonic() - killed > TRIAL_TIMEOUT_S:
            raise TimeoutError(f"no write was acknowledged {TRIAL_TIMEOUT_S} s after the kill")
        await asyncio.sleep(0.005)
    cluster.start_node(victim)
    await asyncio.to_thread(_wait_following, cluster, victim)
    await asyncio.sleep(SETTLE_S)
    return recovered - killed


def _wait_following(cluster: om_cluster.Cluster, node_id: str) -> None:
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    while time.monotonic() < deadline:
        roles = {i.node_id: i.role for i in cluster.node_infos()}
        if roles.get(node_id) == "FOLLOWER" and "LEADER" in roles.values():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{node_id} did not rejoin as a follower in {TRIAL_TIMEOUT_S} s")
