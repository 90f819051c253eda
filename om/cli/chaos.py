"""``om chaos``: a Jepsen-style run against a local 3-node cluster.

Profiles: ``quick`` (60 s, every fault but disk stalls; CI runs it; with
``--execution switchable`` the ``flow_switch`` nemesis too), ``long``
(10 minutes) and ``soak`` (30 minutes of every fault, disk stalls included, in
cycles of a calm phase without restarts, so each node's memory growth can be
judged, and a storm: ``om/chaos/nemesis.py``, ``om/chaos/resources.py``) and
``soak2h`` (two hours of the same, in longer cycles). ``--calm``/``--storm`` set
a soak's cycle lengths; by default a run of an hour or more has calm phases of
``LONG_CALM_S``, so each node lives 21 minutes between restarts, long enough to
tell a slow leak from a cache filling to its bound. Each profile's length is a whole
number of cycles (two hours: 5 of 21 + 3 minutes), so a run ends at a storm's end:
no calm-phase lifetime is cut short by the run's end and judged half-filled.

A long run paces its workers (``--op-pause``, default ``LONG_OP_PAUSE_S`` from
an hour on): the recorder keeps every operation in memory and the checkers read
them all (the linearizability search per key, with a step budget), so the rate,
not the clock, must bound the history: at most 100 ops/s over two hours is ~0.7 M
ops, about a 20-minute unpaced soak's (467k ops), which the checkers handled.

Exits 0 when no checker found a violation, 1 when one did, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from om.chaos.nemesis import ALL_FAULTS, FLOW_SWITCH, KNOWN_FAULTS
from om.chaos.runner import ChaosConfig, run
from om.chaos.workload import WorkloadConfig
from om.cluster.lifecycle import ClusterError
from om.config import EXECUTIONS

PROFILES = {"quick": 60.0, "long": 600.0, "soak": 1800.0, "soak2h": 7200.0}
SOAKS = frozenset({"soak", "soak2h"})
SOAK_CALM_S = 480.0
SOAK_STORM_S = 120.0
LONG_RUN_S = 3600.0        # from this duration on: long calm phases, paced workers
LONG_CALM_S = 1260.0
LONG_STORM_S = 180.0
LONG_OP_PAUSE_S = 0.1      # per worker between operations: 10 workers, <= 100 ops/s
WORKLOADS = {"register": 4, "add": 2, "fso": 2, "mpu": 1, "snap": 1}   # -> its threads


def register(commands: Any) -> None:
    """Adds the ``chaos`` subcommand."""
    p = commands.add_parser("chaos", help="fault-injection correctness run (Jepsen-style)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="quick",
                   help="quick: 60 s of faults; long: 10 minutes; soak: 30 minutes of every "
                   "fault in calm/storm cycles, with memory and descriptor bounds; soak2h: "
                   "two hours of the same")
    p.add_argument("--duration", type=float, help="seconds of load and faults (overrides)")
    p.add_argument("--calm", type=float, help=f"a soak's calm phase, seconds (default "
                   f"{SOAK_CALM_S:.0f}; {LONG_CALM_S:.0f} from {LONG_RUN_S:.0f} s on)")
    p.add_argument("--storm", type=float, help=f"a soak's storm phase, seconds (default "
                   f"{SOAK_STORM_S:.0f}; {LONG_STORM_S:.0f} from {LONG_RUN_S:.0f} s on)")
    p.add_argument("--op-pause", type=float, help="each worker's pause between operations, "
                   f"seconds (default 0; {LONG_OP_PAUSE_S} from {LONG_RUN_S:.0f} s on)")
    p.add_argument("--out", type=Path, help="output directory (default chaos-out/<time>)")
    p.add_argument("--execution", choices=EXECUTIONS, default="leader")
    p.add_argument("--faults", help=f"comma-separated faults, from {', '.join(KNOWN_FAULTS)}; "
                   "'none' for none (default: all but disk stalls; soak: all)")
    p.add_argument("--fault-interval", type=float, default=4.0)
    p.add_argument("--duplicate-send", type=float, default=0.05,
                   help="share of acknowledged adds re-sent with the same call id")
    p.add_argument("--workload", default=",".join(WORKLOADS),
                   help=f"comma-separated workloads, from {', '.join(WORKLOADS)} (fso: mkdir, "
                   "create, rename and rm -r on a file-system bucket; mpu: multipart uploads "
                   "completed or aborted; snap: OM snapshots of the register bucket, read "
                   "through)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--unsafe-disable-retry-cache", action="store_true",
                   help="red test: the exactly-once checker must then report violations")
    p.set_defaults(run=run_chaos)


def ops_budget(duration_s: float) -> int:
    """Operations one worker may run: far above what it can do in ``duration_s``
    (about 200/s here), so the stop event, not the budget, ends the load."""
    return max(20_000, int(duration_s * 2_000))


def cycles(duration_s: float, calm_s: float | None, storm_s: float | None
           ) -> tuple[float, float]:
    """A soak's (calm, storm) lengths: as given, else by the run's length."""
    long_run = duration_s >= LONG_RUN_S
    calm = calm_s if calm_s is not None else (LONG_CALM_S if long_run else SOAK_CALM_S)
    storm = storm_s if storm_s is not None else (LONG_STORM_S if long_run else SOAK_STORM_S)
    if calm <= 0 or storm <= 0:
        raise ValueError(f"calm and storm phases must be positive, got {calm}, {storm}")
    return calm, storm


def op_pause(duration_s: float, pause_s: float | None) -> float:
    """Each worker's pause between operations: as given, else paced from an hour on."""
    pause = pause_s if pause_s is not None else (LONG_OP_PAUSE_S if duration_s >= LONG_RUN_S
                                                 else 0.0)
    if not 0 <= pause <= 10:
        raise ValueError(f"--op-pause must be within [0, 10] seconds, got {pause}")
    return pause


def _faults(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    faults = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in faults if f not in KNOWN_FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; choose from {list(KNOWN_FAULTS)}")
    return faults


def workers(text: str) -> dict[str, int]:
    """The worker threads of each workload named in ``text`` (0 for the others)."""
    chosen = {w.strip() for w in text.split(",") if w.strip()}
    unknown = sorted(chosen - set(WORKLOADS))
    if unknown or not chosen:
        raise ValueError(f"unknown workloads {unknown}; choose from {list(WORKLOADS)}")
    return {name: count if name in chosen else 0 for name, count in WORKLOADS.items()}


def run_chaos(args: argparse.Namespace) -> int:
    """Runs the experiment, prints the result, returns the exit status."""
    soak = args.profile in SOAKS
    duration_s = args.duration or PROFILES[args.profile]
    default = tuple(f for f in (KNOWN_FAULTS if soak else ALL_FAULTS) if f != FLOW_SWITCH)
    if args.execution == "switchable":
        default = (*default, FLOW_SWITCH)
    try:
        faults = _faults(args.faults) if args.faults else default
        threads = workers(args.workload)
        if FLOW_SWITCH in faults and args.execution != "switchable":
            raise ValueError("the flow_switch nemesis needs --execution switchable")
        calm_s, storm_s = cycles(duration_s, args.calm, args.storm) if soak else (0.0, 0.0)
        pause_s = op_pause(duration_s, args.op_pause)
    except ValueError as error:
        print(f"om chaos: {error}", file=sys.stderr)
        return 2
    out = args.out or Path("chaos-out") / time.strftime("%Y%m%d-%H%M%S")
    config = ChaosConfig(
        out=out, duration_s=duration_s, execution=args.execution,
        faults=faults, fault_interval_s=args.fault_interval,
        workload=WorkloadConfig(duplicate_send=args.duplicate_send, seed=args.seed,
                                ops_per_worker_max=ops_budget(duration_s),
                                register_workers=threads["register"],
                                add_workers=threads["add"], fs_workers=threads["fso"],
                                mpu_workers=threads["mpu"], snap_workers=threads["snap"],
                                op_pause_s=pause_s),
        unsafe_disable_retry_cache=args.unsafe_disable_retry_cache,
        calm_s=calm_s, storm_s=storm_s)
    phases = f" in cycles of {calm_s:.0f} s calm, {storm_s:.0f} s storm" if soak else ""
    paced = f", {pause_s} s between each worker's operations" if pause_s else ""
    print(f"om chaos: {config.duration_s:.0f} s against a 3-node {config.execution} cluster, "
          f"faults: {', '.join(faults) or 'none'}{phases}; workloads: {args.workload}{paced}; "
          f"writing {out}", file=sys.stderr)
    try:
        result = run(config)
    except ClusterError as error:
        print(f"om chaos: {error}", file=sys.stderr)
        return 2
    summary = {k: v for k, v in result.items() if k != "violations"}
    print(json.dumps(summary, indent=2))
    for violation in result["violations"][:20]:
        print(f"VIOLATION {violation['checker']}/{violation['kind']}: {violation['detail']}")
    print(f"{len(result['violations'])} violations; details in {out / 'result.json'}")
    return 1 if result["violations"] else 0
