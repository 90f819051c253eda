"""Leadership as the flows see it, for both Raft adapters (``replicator.py`` in a
thread, ``process.py`` over a Raft child process): one barrier, one loss.

Invariants (each adapter only says what Raft reports: leader or not, and the term):

* **Ready only after the barrier.** A leader is ready to execute only once an empty
  entry of its own term (built by the node, ``BarrierEntry``) has been applied
  here. Raft commits it only after every earlier entry, so by then every write
  committed by earlier leaders is applied here. ``barrier_term`` is that term, -1
  while there is none; ``ready(is_leader, term)`` is the whole rule.
* **One barrier task at a time**, retried (every ``RETRY_S``) while this node leads
  the term it started in; a new term starts a new one once the old one ended.
* **A lost leadership fails what waits.** When this node stops leading, the
  adapter's pending entries fail with LEADER_CHANGED at once (``fail_pending``),
  then every ``on_lost`` callback runs (the flows fail their queued writes): a
  deposed leader never answers success for an entry it did not see commit.

Everything here runs on the event loop; the adapters call ``changed()`` whenever
Raft reports a role change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from om.consensus.port import BarrierEntry, ReplicateResult, ReplicateStatus

logger = logging.getLogger(__name__)
RETRY_S = 0.01   # between attempts at a barrier that did not commit


class LeadershipBarrier:
    """Follows one node's leadership: commits each term's barrier, reports a loss."""

    def __init__(self, node_id: str, is_leader: Callable[[], bool], term: Callable[[], int],
                 replicate: Callable[[bytes], Awaitable[ReplicateResult]],
                 barrier: BarrierEntry, fail_pending: Callable[[], None],
                 on_change: Callable[[], None] = lambda: None) -> None:
        """``on_change``: runs whenever ``barrier_term`` changes (the Raft process
        caches its role and rebuilds it then)."""
        self._node_id = node_id
        self._is_leader = is_leader
        self._term = term
        self._replicate = replicate
        self._barrier = barrier
        self._fail_pending = fail_pending
        self._on_change = on_change
        self.barrier_term = -1
        self._was_leader = False
        self._task: asyncio.Task[None] | None = None
        self._on_lost: list[Callable[[], None]] = []

    def ready(self, is_leader: bool, term: int) -> bool:
        """Whether a node that leads (or not) in ``term`` may execute."""
        return is_leader and self.barrier_term == term

    def on_leadership_lost(self, callback: Callable[[], None]) -> None:
        """Registers a callback run on the loop when this node stops being leader."""
        self._on_lost.append(callback)

    def changed(self) -> None:
        """Raft reported a role change: report a loss, or start this term's barrier."""
        is_leader = self._is_leader()
        if self._was_leader and not is_leader:
            self._lost()
        self._was_leader = is_leader
        if is_leader and self.barrier_term != self._term() and (
                self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._commit())

    async def _commit(self) -> None:
        """Commits a barrier in the current term, retrying while this node leads it."""
        term = self._term()
        while self._is_leader() and self._term() == term:
            result = await self._replicate(self._barrier(term))
            if result.status is ReplicateStatus.COMMITTED and self._term() == term:
                self.barrier_term = term
                self._on_change()
                logger.warning("node %s leads term %d from position %d", self._node_id, term,
                               result.position)
                return
            await asyncio.sleep(RETRY_S)

    def _lost(self) -> None:
        logger.warning("node %s lost leadership", self._node_id)
        self.barrier_term = -1
        self._on_change()
        self._fail_pending()
        for callback in self._on_lost:
            callback()

    async def close(self) -> None:
        """Stops a barrier still being committed."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
