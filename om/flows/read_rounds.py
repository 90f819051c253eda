"""Read rounds for a flow whose writes do not travel in shared batches (the old flow).

A linearizable read is answered once the node has confirmed, after the read
arrived, that it still leads (a quorum committed an entry it proposed) and has
applied that entry. ``ReadRounds`` shares one such entry among every read
waiting when it is proposed: a read that arrives while a round is in flight
waits for the next one, since the entry of the current round may have been
proposed before it arrived. At most one round is in flight; a read registers
a callback, and one task runs the rounds while reads wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from om.consensus.port import ReplicateResult, ReplicateStatus

ReadRound = Callable[[ReplicateResult], None]


class ReadRounds:
    """Coalesces read confirmations into rounds of one replicated entry each."""

    def __init__(self, round_trip: Callable[[], Awaitable[ReplicateResult]]) -> None:
        self._round_trip = round_trip
        self._waiting: list[ReadRound] = []
        self._running: asyncio.Task[None] | None = None
        self.rounds = 0

    def add(self, done: ReadRound) -> None:
        """Calls ``done`` (COMMITTED) once a round that began after this call has been
        applied here, or with the reason it failed."""
        self._waiting.append(done)
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._waiting:
            waiting, self._waiting = self._waiting, []
            result = ReplicateResult(ReplicateStatus.LEADER_CHANGED)
            try:
                result = await self._round_trip()
            finally:
                self.rounds += 1
                for done in waiting:
                    done(result)

    async def close(self) -> None:
        """Fails the reads still waiting (shutdown)."""
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)
        waiting, self._waiting = self._waiting, []
        for done in waiting:
            done(ReplicateResult(ReplicateStatus.NOT_LEADER))
