"""The freon engine: ``threads`` operations in flight, until ``count`` or ``duration_s``.

Modelled on Ozone's ``BaseFreonGenerator``: operation indices are handed out in
order to ``threads`` concurrent workers (coroutines sharing one caller, so with
``AsyncOMClient`` they pipeline on one connection per node). A run stops
starting operations once ``count`` were started or ``duration_s`` passed,
whichever comes first, and waits for those in flight; every call is bounded
by the client's retry deadline, so a run is bounded in count and time.

Every operation is timed, failed or not, as freon's timer does; the result
also holds per-request status counts and the latencies of successful write
requests (the headline of ``om bench``). ``format_report`` prints freon's
report.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.generators import (
    BucketGenerator,
    DirectoryMixGenerator,
    FileGenerator,
    Generator,
    KeyGenerator,
    ReadWriteListGenerator,
    bucket_names,
    random_prefix,
)
from bench.progress import ProgressBar
from bench.session import RequestCaller, RequestFailed, Session
from bench.stats import LatencyRecorder
from bench.traces import ClientTrace

UNBOUNDED_COUNT = 10**12
TICK_S = 0.25


@dataclass(frozen=True)
class FreonConfig:
    """One freon run; ``prefix`` empty means a random one, ``key_range`` 0 means ``count``."""

    generator: str = "omkg"
    count: int = 1000
    threads: int = 10
    duration_s: float | None = None
    volume: str = "vol1"
    bucket: str = "bucket1"
    prefix: str = ""
    size: int = 0
    percentage_read: int = 0
    percentage_list: int = 0
    key_range: int = 0
    max_list: int = 10
    flow: str = "freon"
    trace_path: Path | None = None
    label: str = ""
    rate: float | None = None
    dirs: int = 64               # omfc, omdr: directories the operations are spread over
    buckets: int = 1             # omkg: buckets the keys are spread over (bucket_names)
    percentage_rename: int = 25  # omdr: renames; the rest create directories

    def __post_init__(self) -> None:
        assert self.count >= 0
        assert self.dirs > 0
        assert self.buckets > 0
        assert 0 <= self.percentage_rename <= 100
        assert self.threads > 0
        assert self.rate is None or self.rate > 0
        assert self.duration_s is None or self.duration_s > 0
        assert 0 <= self.percentage_read + self.percentage_list <= 100


@dataclass
class FreonResult:
    """What a run did. Latencies are nanoseconds; times are wall clock (ns) and seconds."""

    generator: str
    timer: str
    flow: str
    prefix: str
    threads: int
    operations: int = 0
    failures: int = 0
    start_ns: int = 0
    end_ns: int = 0
    duration_s: float = 0.0
    latency: LatencyRecorder = field(default_factory=LatencyRecorder)
    write_latency: LatencyRecorder = field(default_factory=LatencyRecorder)
    failure_statuses: Counter[str] = field(default_factory=Counter)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    op_latency: dict[str, LatencyRecorder] = field(default_factory=dict)
    target_rate: float | None = None

    @property
    def successes(self) -> int:
        """Operations whose every request was OK."""
        return self.operations - self.failures

    @property
    def rate(self) -> float:
        """Operations per second over the run."""
        return self.operations / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def ok_writes(self) -> int:
        """Write requests answered OK (CreateKey and CommitKey count separately)."""
        return self.write_latency.count

    @property
    def write_requests_per_s(self) -> float:
        """Successful write requests per second over the run."""
        return self.ok_writes / self.duration_s if self.duration_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (no raw latencies)."""
        return {
            "generator": self.generator, "timer": self.timer, "flow": self.flow,
            "prefix": self.prefix, "threads": self.threads,
            "operations": self.operations, "successes": self.successes,
            "failures": self.failures, "failure_statuses": dict(self.failure_statuses),
            "start_ns": self.start_ns, "end_ns": self.end_ns, "duration_s": self.duration_s,
            "operations_per_s": self.rate, "write_requests_per_s": self.write_requests_per_s,
            "latency_ms": self.latency.summary().as_dict(),
            "write_latency_ms": self.write_latency.summary().as_dict(),
            "op_latency_ms": {op: recorder.summary().as_dict()
                              for op, recorder in sorted(self.op_latency.items())},
            "target_rate": self.target_rate,
            "requests": {f"{op} {status}": n for (op, status), n in sorted(self.requests.items())},
        }


def make_generator(config: FreonConfig, prefix: str) -> Generator:
    """The generator ``config.generator`` names; ValueError for ``buckets`` > 1 with
    another generator than ``omkg`` (only it spreads over buckets)."""
    if config.generator == "omkg":
        return KeyGenerator(config.volume, bucket_names(config.bucket, config.buckets),
                            prefix, config.size)
    if config.buckets != 1:
        raise ValueError(f"{config.generator} writes into one bucket, not {config.buckets}")
    if config.generator == "ombg":
        return BucketGenerator(config.volume, prefix)
    if config.generator == "ockrw":
        key_range = config.key_range or max(config.count, 1)
        return ReadWriteListGenerator(config.volume, config.bucket, prefix, config.size,
                                      config.percentage_read, config.percentage_list,
                                      min(key_range, UNBOUNDED_COUNT), config.max_list)
    if config.generator == "omfc":
        return FileGenerator(config.volume, config.bucket, prefix, config.size, config.dirs)
    if config.generator == "omdr":
        return DirectoryMixGenerator(config.volume, config.bucket, prefix,
                                     config.percentage_rename, config.dirs)
    raise ValueError(f"unknown generator {config.generator!r}")


async def run(config: FreonConfig, connect: Callable[[], RequestCaller],
              progress: ProgressBar | None = None) -> FreonResult:
    """Prepares, runs the operations, and returns what happened; closes the caller."""
    prefix = config.prefix or random_prefix()
    generator = make_generator(config, prefix)
    trace = (ClientTrace.open(config.trace_path, config.flow) if config.trace_path
             else ClientTrace.off())
    caller = connect()
    try:
        await generator.prepare(caller)
        result = FreonResult(config.generator, generator.timer, config.flow, prefix,
                             config.threads, target_rate=config.rate)
        session = Session(caller, trace, result.write_latency)
        await _drive(config, generator, session, result, progress)
        result.requests = session.statuses
        result.op_latency = session.op_latency
        return result
    finally:
        trace.close()
        await caller.close()


async def _drive(config: FreonConfig, generator: Generator, session: Session,
                 result: FreonResult, progress: ProgressBar | None) -> None:
    deadline = time.monotonic() + config.duration_s if config.duration_s else math.inf
    indices = itertools.count()

    async def worker() -> None:
        for index in indices:
            if index >= config.count or time.monotonic() >= deadline:
                return
            started = time.perf_counter_ns()
            if config.rate is not None:
                due_ns = run_started + int(index * 1e9 / config.rate)
                if time.monotonic() + (due_ns - time.perf_counter_ns()) / 1e9 >= deadline:
                    return  # due after the end of the run
                started = await _due(due_ns)
            try:
                await generator.operation(session, index)
            except RequestFailed as failure:
                result.failures += 1
                result.failure_statuses[failure.status] += 1
            result.operations += 1
            result.latency.add(time.perf_counter_ns() - started)

    result.start_ns = time.time_ns()
    started = run_started = time.perf_counter_ns()
    ticker = asyncio.get_running_loop().create_task(_tick(progress, result))
    try:
        async with asyncio.TaskGroup() as workers:
            for _ in range(config.threads):
                workers.create_task(worker())
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        result.duration_s = (time.perf_counter_ns() - started) / 1e9
        result.end_ns = time.time_ns()
        if progress is not None:
            progress.close(result.operations, result.failures)


async def _due(due_ns: int) -> int:
    """Sleeps until ``due_ns`` (perf_counter) and returns it: with ``--rate`` an
    operation's latency counts from when it was due, so a server that stalls the
    schedule shows in the percentiles instead of being hidden (no coordinated
    omission). The loop's timers may wake up to a millisecond early: an
    operation that starts early counts from its real start."""
    wait_ns = due_ns - time.perf_counter_ns()
    if wait_ns > 0:
        await asyncio.sleep(wait_ns / 1e9)
    return min(due_ns, time.perf_counter_ns())


async def _tick(progress: ProgressBar | None, result: FreonResult) -> None:
    if progress is None or not progress.enabled:
        return
    while True:
        progress.update(result.operations, result.failures)
        await asyncio.sleep(TICK_S)


def format_report(result: FreonResult) -> str:
    """Freon's report: the timer's count, rate and latencies, then the totals."""
    summary = result.latency.summary()
    ms = "milliseconds"
    rows = [
        ("count =", f"{result.operations}"),
        ("mean rate =", f"{result.rate:.2f} calls/second"),
        ("min =", f"{summary.min:.2f} {ms}"), ("max =", f"{summary.max:.2f} {ms}"),
        ("mean =", f"{summary.mean:.2f} {ms}"), ("stddev =", f"{summary.stddev:.2f} {ms}"),
        ("median =", f"{summary.p50:.2f} {ms}"), ("75% <=", f"{summary.p75:.2f} {ms}"),
        ("95% <=", f"{summary.p95:.2f} {ms}"), ("98% <=", f"{summary.p98:.2f} {ms}"),
        ("99% <=", f"{summary.p99:.2f} {ms}"), ("99.9% <=", f"{summary.p999:.2f} {ms}"),
    ]
    lines = ["-- Timers " + "-" * 70, result.timer]
    if result.target_rate is not None:
        lines.append(f"{'target rate =':>20} {result.target_rate:.2f} calls/second")
    lines += [f"{name:>20} {value}" for name, value in rows]
    lines.append("")
    for op, recorder in sorted(result.op_latency.items()):
        op_summary = recorder.summary()
        lines.append(f"{op} latency: median {op_summary.p50:.2f}, 99% <= {op_summary.p99:.2f},"
                     f" max {op_summary.max:.2f} {ms}")
    lines += [f"{op} {status}: {n}" for (op, status), n in sorted(result.requests.items())]
    lines += [
        f"Total execution time (sec): {result.duration_s:.3f}",
        f"Failures: {result.failures}",
        f"Successful executions: {result.successes}",
    ]
    return "\n".join(lines)
