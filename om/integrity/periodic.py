"""The periodic auditor: ``om admin audit``'s store checks, now and then, on a follower.

In the spirit of BookKeeper's metadata scrutiny (BP-34), which "must run
regularly" and only makes a noise: every ``interval_s`` (drawn anew each time
from ``interval_s * (1 +- jitter_fraction)``) a follower audits its own store
exactly as an on-demand audit does (``IntegrityService.audit_store``: a
checkpoint, the scan in a process of its own at ``rows_per_s``, each candidate
confirmed on the live store), logs each violation in full and updates the
audit metrics. It never fixes anything.

* **Followers only.** A run starts only while this node follows a known
  leader (not leading, not campaigning): the leader executes every write, the
  followers only apply them, so a follower pays for the scan where it costs the
  clients least. A follower that becomes leader mid-run stops it (its scan
  process killed; counted as ``stopped``, nothing reported), and no run starts
  while it leads (counted as ``not_follower`` when one is due).
* **One at a time.** The schedule does not wait for a run: a run due while an
  audit (this schedule's or an on-demand one) is still going is skipped and
  counted as ``skipped``.
* **Jitter.** The first run comes at a uniformly random point of the first
  interval (or, after a restart, an interval after the last run persisted
  here, plus up to ``jitter_fraction`` of one), then every interval, each
  stretched or shrunk by up to ``jitter_fraction``: followers started together
  do not scan together for long.
* **Visible.** The last run's result (when it ended, how long it took, rows
  and violations by category) is kept in memory for the metrics
  (``om_audit_periodic_*``, read by ``om admin audit --last``) and persisted in
  ``<node dir>/audit-periodic.json`` (temporary file, fsync, rename), so a
  restart keeps it and schedules from it.

The cluster checks of ``om admin audit`` (positions, membership, last
verification) need every node's facts and stay with the command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from om.disk.durable_files import write_synced
from om.integrity import auditor
from om.integrity.service import (
    DEFAULT_AUDIT_ROWS_PER_S,
    AuditFailed,
    AuditRun,
    AuditStopped,
    IntegrityService,
)

logger = logging.getLogger(__name__)

RESULT_FILE = "audit-periodic.json"
ROLE_POLL_S = 0.2        # how often a run checks that its node still follows
CLOSE_WAIT_S = 5.0       # a run asked to stop at close: its threads finish with the store
LABEL = "periodic audit"


@dataclass(frozen=True)
class Schedule:
    """When and how fast the periodic audit runs; ``interval_s`` 0: never."""

    interval_s: float = 0.0
    jitter_fraction: float = 0.1
    rows_per_s: int = DEFAULT_AUDIT_ROWS_PER_S

    def __post_init__(self) -> None:
        assert self.interval_s >= 0
        assert 0 <= self.jitter_fraction < 1
        assert self.rows_per_s > 0

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def next_interval(self, rng: random.Random) -> float:
        """One interval, stretched or shrunk by up to the jitter."""
        return self.interval_s * rng.uniform(1 - self.jitter_fraction, 1 + self.jitter_fraction)

    def first_delay(self, rng: random.Random, since_last_s: float | None) -> float:
        """Seconds until the first run: anywhere in the first interval with no run before;
        else an interval after the last run (at once if overdue), plus up to the jitter."""
        if since_last_s is None:
            return rng.uniform(0, self.interval_s)
        spread = rng.uniform(0, self.jitter_fraction * self.interval_s)
        return max(0.0, self.interval_s - since_last_s) + spread


@dataclass(frozen=True)
class PeriodicResult:
    """What the last periodic run found."""

    finished_at_s: float            # Unix time
    duration_s: float
    rows_checked: int
    candidates: int
    cleared: int
    unsettled: int
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, run: AuditRun) -> PeriodicResult:
        report = run.report
        return cls(run.finished_at_s, run.duration_s, report.rows_checked, report.candidates,
                   report.cleared, report.unsettled, report.counts())

    @property
    def violations(self) -> int:
        return sum(self.counts.values())


def load_result(node_dir: Path) -> PeriodicResult | None:
    """The last periodic run persisted in ``node_dir``; None without one (or unreadable)."""
    path = node_dir / RESULT_FILE
    try:
        raw: Any = json.loads(path.read_text())
        counts = {str(k): int(v) for k, v in raw.pop("counts").items()}
        return PeriodicResult(counts=counts, **raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        logger.warning("ignoring %s: %s", path, error)
        return None


def save_result(node_dir: Path, result: PeriodicResult) -> None:
    """Persists the last periodic run (atomically, synced)."""
    write_synced(node_dir / RESULT_FILE, json.dumps(asdict(result), sort_keys=True).encode())


class PeriodicAuditor:
    """Runs this node's periodic audits while it follows (``start``/``close``)."""

    def __init__(self, service: IntegrityService, schedule: Schedule, node_dir: Path,
                 follows: Callable[[], bool], leads: Callable[[], bool],
                 rng: random.Random | None = None, role_poll_s: float = ROLE_POLL_S) -> None:
        self._service = service
        self.schedule = schedule
        self._node_dir = node_dir
        self._follows = follows      # may start a run: follows a known leader
        self._leads = leads          # must stop a run
        self._rng = rng or random.Random()
        self._role_poll_s = role_poll_s
        self.last: PeriodicResult | None = load_result(node_dir)
        self.runs = 0                # runs that ended and reported
        self.skipped = 0             # due while an audit was still going
        self.not_follower = 0        # due while this node led or had no leader
        self.stopped = 0             # stopped half-way: this node became leader
        self.failed = 0              # could not run (the scan failed): logged
        self._loop: asyncio.Task[None] | None = None
        self._run: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()     # the run going: stop it

    @property
    def running(self) -> bool:
        """Whether a periodic run is going now."""
        return self._run is not None and not self._run.done()

    def start(self) -> None:
        """Starts the schedule (nothing when it is off)."""
        if not self.schedule.enabled:
            logger.info("periodic audit: off ([auditor] periodic_interval_s = 0)")
            return
        since = None if self.last is None else max(0.0, time.time() - self.last.finished_at_s)
        delay = self.schedule.first_delay(self._rng, since)
        logger.info("periodic audit: every %.0f s (+-%.0f %%) on a follower at %d rows/s; "
                    "the first due in %.1f s", self.schedule.interval_s,
                    self.schedule.jitter_fraction * 100, self.schedule.rows_per_s, delay)
        self._loop = asyncio.get_running_loop().create_task(self._schedule_forever(delay))

    async def close(self) -> None:
        """Stops the schedule, and a run going (its scan process killed): waits for it,
        so that no thread of it still reads the store the node closes next."""
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._run is not None:
            self._stop.set()
            await asyncio.wait({self._run}, timeout=CLOSE_WAIT_S)
            self._run.cancel()
            await asyncio.gather(self._run, return_exceptions=True)

    async def _schedule_forever(self, delay: float) -> None:
        due = time.monotonic() + delay
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.due()
            due = max(due, time.monotonic()) + self.schedule.next_interval(self._rng)

    def due(self) -> None:
        """A run is due: starts it, or counts why not."""
        if self.running or self._service.auditing:
            self.skipped += 1
            logger.warning("periodic audit due while an audit is still running: skipped "
                           "(%d so far)", self.skipped)
            return
        if not self._follows():
            self.not_follower += 1
            logger.info("periodic audit due, but this node is not a follower: not started")
            return
        self._run = asyncio.get_running_loop().create_task(self._audit())

    async def _audit(self) -> None:
        stop = self._stop = asyncio.Event()
        watch = asyncio.get_running_loop().create_task(self._stop_when_leading(stop))
        try:
            run = await self._service.audit_store(self.schedule.rows_per_s, stop, LABEL)
        except AuditStopped:
            self.stopped += 1
            if self._leads():
                logger.warning("periodic audit stopped half-way: this node leads now (no "
                               "run starts until it follows again)")
            return
        except AuditFailed as error:
            self.failed += 1
            logger.error("periodic audit failed: %s", error)
            return
        except Exception:
            self.failed += 1
            logger.exception("periodic audit failed")
            return
        finally:
            watch.cancel()
        self.runs += 1
        result = PeriodicResult.of(run)
        self.last = result
        try:
            await asyncio.to_thread(save_result, self._node_dir, result)
        except OSError as error:
            logger.error("cannot persist the periodic audit's result: %s", error)

    async def _stop_when_leading(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(self._role_poll_s)
            if self._leads():
                stop.set()

    def state(self) -> dict[str, float]:
        """Gauges by ``StateGauge.key`` (``om.node.integrity.INTEGRITY_GAUGES``)."""
        values: dict[str, float] = {
            "audit_periodic_interval": self.schedule.interval_s,
            "audit_periodic_running": float(self.running),
            "audit_periodic_runs": self.runs, "audit_periodic_skipped": self.skipped,
            "audit_periodic_not_follower": self.not_follower,
            "audit_periodic_stopped": self.stopped, "audit_periodic_failed": self.failed}
        last = self.last
        if last is not None:
            values.update(audit_periodic_last_run_timestamp=last.finished_at_s,
                          audit_periodic_last_duration=last.duration_s,
                          audit_periodic_last_rows_checked=last.rows_checked)
            values.update({f"audit_periodic_{c}": last.counts.get(c, 0)
                           for c in auditor.STORE_CATEGORIES})
        return values
