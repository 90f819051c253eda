"""Waiting for locks of the sans-IO ``LockTable`` on the event loop.

Acquisition follows the plan's order (the global order). A wait is bounded:
past ``timeout_s`` the locks taken so far are released and the request ends
with TIMEOUT. Cancellation (a client gone, a shutdown) also releases them.
Every lock granted is released exactly once, on every path.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from om.executor.errors import OMError
from om.gatekeeper.lock_plan import LockRequest
from om.gatekeeper.lock_table import LockTable
from om.protocol import om_pb2


@dataclass(eq=False)
class LockOwner:
    """One request's identity in the lock table; holds its wake-up future."""

    held: list[LockRequest] = field(default_factory=list)
    wakeup: asyncio.Future[None] | None = None


class AsyncLocks:
    """Acquires lock plans with bounded waits; releases them in reverse."""

    def __init__(self, timeout_s: float) -> None:
        assert timeout_s > 0
        self.table: LockTable[LockOwner] = LockTable()
        self._timeout_s = timeout_s

    async def acquire(self, plan: tuple[LockRequest, ...]) -> LockOwner:
        """Takes every lock of ``plan`` in order; TIMEOUT when a wait is too long."""
        owner = LockOwner()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_s
        try:
            for lock in plan:
                if not self.table.acquire_nowait(owner, lock.resource, lock.mode):
                    await self._wait(owner, lock, deadline - loop.time())
                owner.held.append(lock)
        except BaseException:
            self.release(owner)
            raise
        assert len(owner.held) == len(plan)
        return owner

    async def _wait(self, owner: LockOwner, lock: LockRequest, remaining: float) -> None:
        owner.wakeup = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(owner.wakeup, max(remaining, 0.0))
        except BaseException as error:
            if self.table.holds(owner, lock.resource):
                owner.held.append(lock)  # granted as the wait ended: release() frees it
            else:
                self._wake(self.table.cancel(owner, lock.resource))
            if isinstance(error, TimeoutError):
                raise OMError(om_pb2.TIMEOUT,
                              f"timed out waiting for the {lock.level.name.lower()} lock on "
                              f"{lock.name}") from None
            raise
        finally:
            owner.wakeup = None

    def release(self, owner: LockOwner) -> None:
        """Releases every lock ``owner`` holds, in reverse order of acquisition."""
        while owner.held:
            lock = owner.held.pop()
            self._wake(self.table.release(owner, lock.resource))
        assert not owner.held

    @staticmethod
    def _wake(granted: list[LockOwner]) -> None:
        for waiter in granted:
            if waiter.wakeup is not None and not waiter.wakeup.done():
                waiter.wakeup.set_result(None)
