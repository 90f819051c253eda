"""Builders for chaos-checker tests: hand-written histories and simulated ones.

`simulate` runs a sequential register model at randomly chosen linearization
points inside randomly chosen intervals, so every history it returns is
linearizable by construction, and its final state is the model's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from om.chaos.history import F, History, Op, Outcome


@dataclass
class Builder:
    """Hand-written ops; each op gets its own process unless one is given."""

    ops: list[Op] = field(default_factory=list)

    def op(
        self,
        f: str,
        key: str,
        value: int | None,
        start: int,
        end: int | None,
        outcome: str = "ok",
        *,
        process: int | None = None,
        retries: int = 0,
    ) -> Op:
        op_id = len(self.ops)
        made = Op(
            process=op_id if process is None else process,
            op_id=op_id,
            f=F(f),
            key=key,
            value=value,
            invoke_ns=start,
            complete_ns=end,
            outcome=Outcome(outcome),
            retries=retries,
        )
        self.ops.append(made)
        return made

    def history(self) -> History:
        return History(tuple(self.ops))


@dataclass(frozen=True)
class Simulated:
    history: History
    final_state: dict[str, int | None]


@dataclass
class _Plan:
    process: int
    f: F
    key: str
    invoke: int
    complete: int
    effect_at: int | None
    outcome: Outcome
    value: int | None = None


def simulate(
    rng: random.Random,
    *,
    processes: int,
    ops_per_process: int,
    keys: int,
    p_info: float = 0.05,
    p_fail: float = 0.05,
) -> Simulated:
    """A linearizable history of `processes` sequential clients over `keys` registers."""
    plans = [
        plan
        for process in range(processes)
        for plan in _plan_process(rng, process, ops_per_process, keys, p_info, p_fail)
    ]
    final_state = _run_model(rng, plans, keys)
    ops = [_to_op(op_id, plan, rng) for op_id, plan in enumerate(plans)]
    rng.shuffle(ops)
    return Simulated(History(tuple(ops)), final_state)


def _plan_process(
    rng: random.Random, process: int, count: int, keys: int, p_info: float, p_fail: float
) -> list[_Plan]:
    plans: list[_Plan] = []
    now = rng.randint(0, 20)
    for _ in range(count):
        f = rng.choice([F.PUT, F.PUT, F.GET, F.GET, F.GET, F.DELETE])
        roll = rng.random()
        outcome = (
            Outcome.INFO
            if roll < p_info
            else Outcome.FAIL
            if roll < p_info + p_fail
            else Outcome.OK
        )
        complete = now + rng.randint(0, 60)
        effect_at: int | None = rng.randint(now, complete)
        if outcome is Outcome.FAIL or (outcome is Outcome.INFO and rng.random() < 0.4):
            effect_at = None
        elif outcome is Outcome.INFO:
            effect_at = now + rng.randint(0, 400)
        key = f"k{rng.randrange(keys)}"
        plans.append(_Plan(process, f, key, now, complete, effect_at, outcome))
        now = complete + rng.randint(0, 10)
    return plans


def _run_model(rng: random.Random, plans: list[_Plan], keys: int) -> dict[str, int | None]:
    state: dict[str, int | None] = {f"k{i}": None for i in range(keys)}
    next_value = 0
    for plan in plans:
        if plan.f is F.PUT:
            plan.value = next_value
            next_value += 1
    timed = [(p.effect_at, rng.random(), i) for i, p in enumerate(plans) if p.effect_at is not None]
    for _, _, i in sorted(timed):
        plan = plans[i]
        if plan.f is F.PUT:
            state[plan.key] = plan.value
        elif plan.f is F.GET:
            plan.value = state[plan.key] if plan.outcome is Outcome.OK else None
        elif state[plan.key] is None:
            plan.outcome = Outcome.FAIL if plan.outcome is Outcome.OK else plan.outcome
        else:
            state[plan.key] = None
    return state


def _to_op(op_id: int, plan: _Plan, rng: random.Random) -> Op:
    unfinished = plan.outcome is Outcome.INFO and rng.random() < 0.5
    return Op(
        process=plan.process,
        op_id=op_id,
        f=plan.f,
        key=plan.key,
        value=plan.value,
        invoke_ns=plan.invoke,
        complete_ns=None if unfinished else plan.complete,
        outcome=plan.outcome,
        node=f"om{rng.randrange(3)}",
        retries=rng.choice([0, 0, 0, 1, 2]),
    )
