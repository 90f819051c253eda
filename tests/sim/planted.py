"""Planted bugs for the simulator's red cases: each a context manager that breaks
production code for the duration of a test (never in production)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from om.executor.batcher import PendingWrite
from om.flows.leader_flow import LeaderFlow
from om.protocol import om_pb2
from om.statemachine.apply import StateMachine


@contextmanager
def apply_forgets_position_after_restart() -> Iterator[None]:
    """A restarted node forgets its applied position: replayed entries apply again."""
    original = StateMachine.reload

    def reload(self: StateMachine) -> None:
        original(self)
        self.applied_index = 0

    StateMachine.reload = reload  # type: ignore[method-assign]
    try:
        yield
    finally:
        StateMachine.reload = original  # type: ignore[method-assign]


@contextmanager
def reply_outside_the_batch() -> Iterator[None]:
    """The retry-cache entry is not replicated with its data: only the leader's memory
    holds it."""
    original = PendingWrite.of.__func__  # type: ignore[attr-defined]

    def of(cls: type[PendingWrite], managed_index: int, recorder: Any,
           reply: om_pb2.ReplyRow | None = None, expiry_ops: Any = None,
           sharded: bool = False) -> PendingWrite:
        return original(cls, managed_index, recorder, None, expiry_ops,  # type: ignore[no-any-return]
                        sharded)

    PendingWrite.of = classmethod(of)  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        PendingWrite.of = classmethod(original)  # type: ignore[method-assign, assignment]


@contextmanager
def locks_released_before_apply() -> Iterator[None]:
    """A write's locks are released as soon as it is queued, before its batch applies."""
    original = LeaderFlow._execute

    def execute(self: LeaderFlow, write: Any, owner: Any, planned: Any = None) -> None:
        original(self, write, owner, planned)
        self.locks.release(owner)

    LeaderFlow._execute = execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        LeaderFlow._execute = original  # type: ignore[method-assign]


PLANTED: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "apply_forgets_position_after_restart": apply_forgets_position_after_restart,
    "reply_outside_the_batch": reply_outside_the_batch,
    "locks_released_before_apply": locks_released_before_apply,
}
