"""Waiting for locks of the sans-IO ``LockTable`` on the event loop.

Acquisition follows the plan's order (the global order) in two halves:
``begin`` runs synchronously and takes every lock it can until one is taken
by another owner, where it joins that lock's FIFO queue at once; ``finish``
awaits the rest. A request that ``begin`` granted everything never waits, and
one that must wait holds its place in line from the moment it arrived, not
from when a task gets to run: grants stay FIFO in arrival order. A wait is
bounded: past ``timeout_s`` the locks taken so far are released and the
request ends with TIMEOUT. Cancellation (a shutdown) also releases them. Every
lock granted is released exactly once, on every path.
"""

from __future__ import annotations

import asyncio

from om.executor.errors import OMError
from om.gatekeeper.lock_plan import LockRequest
from om.gatekeeper.lock_table import LockTable
from om.protocol import om_pb2


class LockOwner:
    """One request's identity in the lock table: its plan, what it holds, the lock it
    is queued for and, while a task awaits that lock, its wake-up future.

    Invariant: ``held`` is a prefix of ``plan``; ``queued`` is the next lock of the
    plan or None."""

    __slots__ = ("held", "plan", "queued", "wakeup")

    def __init__(self, plan: tuple[LockRequest, ...]) -> None:
        self.plan = plan
        self.held: list[LockRequest] = []
        self.queued: LockRequest | None = None
        self.wakeup: asyncio.Future[None] | None = None

    @property
    def granted(self) -> bool:
        """Whether every lock of the plan is held."""
        return len(self.held) == len(self.plan)


class AsyncLocks:
    """Acquires lock plans with bounded waits; releases them in reverse."""

    def __init__(self, timeout_s: float) -> None:
        assert timeout_s > 0
        self.table: LockTable[LockOwner] = LockTable()
        self._timeout_s = timeout_s

    async def acquire(self, plan: tuple[LockRequest, ...]) -> LockOwner:
        """Takes every lock of ``plan`` in order; TIMEOUT when a wait is too long."""
        owner = self.begin(plan)
        await self.finish(owner)
        return owner

    def begin(self, plan: tuple[LockRequest, ...]) -> LockOwner:
        """Takes the plan's locks in order while they are free and queues for the first
        that is not; ``granted`` tells whether anything is left to ``finish``."""
        owner = LockOwner(plan)
        self._take(owner)
        return owner

    async def finish(self, owner: LockOwner) -> None:
        """Awaits the locks ``begin`` did not grant; on TIMEOUT or cancellation releases
        every lock taken and leaves the queue."""
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        try:
            while owner.queued is not None:
                await self._wait(owner, owner.queued,
                                 deadline - asyncio.get_running_loop().time())
                owner.held.append(owner.queued)
                owner.queued = None
                self._take(owner)
        except BaseException:
            self.release(owner)
            raise
        assert owner.granted

    def _take(self, owner: LockOwner) -> None:
        """Takes the next locks of the plan until one must be waited for (queued)."""
        assert owner.queued is None
        while not owner.granted:
            lock = owner.plan[len(owner.held)]
            if not self.table.acquire_nowait(owner, lock.resource, lock.mode):
                owner.queued = lock
                return
            owner.held.append(lock)

    async def _wait(self, owner: LockOwner, lock: LockRequest, remaining: float) -> None:
        """Returns once ``lock`` is granted to ``owner`` (perhaps before the wait began)."""
        if self.table.holds(owner, lock.resource):
            return
        owner.wakeup = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(owner.wakeup, max(remaining, 0.0))
        except BaseException as error:
            if self.table.holds(owner, lock.resource):
                owner.held.append(lock)  # granted as the wait ended: release() frees it
            else:
                self._wake(self.table.cancel(owner, lock.resource))
            owner.queued = None
            if isinstance(error, TimeoutError):
                raise OMError(om_pb2.TIMEOUT,
                              f"timed out waiting for the {lock.level.name.lower()} lock on "
                              f"{lock.name}") from None
            raise
        finally:
            owner.wakeup = None

    def release(self, owner: LockOwner) -> None:
        """Releases every lock ``owner`` holds, in reverse order of acquisition, and
        leaves the queue it waits in, if any."""
        if owner.queued is not None:
            queued, owner.queued = owner.queued, None
            self._wake(self.table.cancel(owner, queued.resource))
        while owner.held:
            lock = owner.held.pop()
            self._wake(self.table.release(owner, lock.resource))
        assert not owner.held

    @staticmethod
    def _wake(granted: list[LockOwner]) -> None:
        for waiter in granted:
            if waiter.wakeup is not None and not waiter.wakeup.done():
                waiter.wakeup.set_result(None)
