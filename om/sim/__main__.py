"""``python -m om.sim --seed S [--steps N]``: one seed's trace, digest and verdict;
``--seeds N [--first F] [--jobs J] [--budget-s T]``: a sweep in parallel processes.

A run depends on nothing but its seed, once Python's string hashing is fixed
too (set iteration order inside pysyncobj follows it): the command re-executes
itself with ``PYTHONHASHSEED=0`` when it is not set, and the sweep's workers
inherit it. A failing seed prints the one line that reproduces it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from om.sim.run import Result, run_seed


def _line(result: Result) -> str:
    verdict = "ok" if result.ok else f"FAIL ({len(result.violations)} violations)"
    faults = ", ".join(f"{k} {v}" for k, v in sorted(result.faults.items())) or "none"
    return (f"seed {result.seed}: {verdict}; {result.ops} ops, {result.requests} requests, "
            f"{result.virtual_s:.1f} s virtual; faults: {faults}; digest {result.digest[:16]}")


def _one(seed: int, steps: int) -> Result:
    return run_seed(seed, requests=steps)


def run_one(seed: int, steps: int) -> int:
    started = time.perf_counter()
    result = run_seed(seed, requests=steps)
    took = time.perf_counter() - started
    for line in result.trace:
        print(line)
    print(f"digest {result.digest}")
    for violation in result.violations:
        print(f"VIOLATION {violation.checker}/{violation.kind} {violation.key or ''}: "
              f"{violation.detail}")
    print(_line(result) + f"; {took:.1f} s wall ({result.virtual_s / took:.1f}x real time)")
    return 0 if result.ok else 1


def sweep(first: int, count: int, steps: int, jobs: int, budget_s: float) -> int:
    """Runs seeds first..first+count-1 in ``jobs`` processes, for at most ``budget_s``."""
    started = time.perf_counter()
    failed: list[int] = []
    done = 0
    seeds = iter(range(first, first + count))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        running: set[Future[Result]] = set()
        for seed in seeds:
            running.add(pool.submit(_one, seed, steps))
            if len(running) >= jobs:
                break
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                result = future.result()
                done += 1
                if not result.ok:
                    failed.append(result.seed)
                    print(_line(result), flush=True)
                    for v in result.violations[:5]:
                        print(f"  {v.checker}/{v.kind} {v.key or ''}: {v.detail}", flush=True)
                    print(f"  reproduce: python -m om.sim --seed {result.seed} --steps {steps}",
                          flush=True)
            if time.perf_counter() - started < budget_s:
                for seed in seeds:
                    running.add(pool.submit(_one, seed, steps))
                    if len(running) >= jobs:
                        break
    took = time.perf_counter() - started
    print(f"swept {done} seeds from {first} in {took:.0f} s ({jobs} processes): "
          f"{len(failed)} failed {failed[:20]}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m om.sim", description=__doc__)
    parser.add_argument("--seed", type=int, help="run this one seed and print its trace")
    parser.add_argument("--steps", type=int, default=2000, help="client requests a seed")
    parser.add_argument("--seeds", type=int, help="sweep this many seeds")
    parser.add_argument("--first", type=int, default=1, help="the sweep's first seed")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--budget-s", type=float, default=3600.0,
                        help="start no seed after this many seconds")
    args = parser.parse_args(argv)
    if args.seed is None and args.seeds is None:
        parser.error("give --seed S or --seeds N")
    if args.seed is not None:
        return run_one(args.seed, args.steps)
    return sweep(args.first, args.seeds, args.steps, args.jobs, args.budget_s)


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, "-m", "om.sim", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    sys.exit(main())
