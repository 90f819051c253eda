"""A latency histogram as plain counts: cheap to update, picklable to send.

The Raft process times its journal syncs here and sends ``snapshot()`` to the
server, which exports it at /prom (``om.observe.metrics.HistogramState``): the
child process needs no metrics library and no registry of its own.
"""

from __future__ import annotations

import bisect

LATENCY_BUCKETS_S = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                     0.5, 1.0, 2.0, 5.0)
Snapshot = tuple[tuple[int, ...], float]   # per-bucket counts (last: +Inf), sum of seconds


class CountingHistogram:
    """Observations counted per bucket (not cumulative), with their sum."""

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        assert list(bounds) == sorted(bounds)
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        """Counts one observation into the first bucket whose bound is >= it."""
        self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self._sum += seconds

    def snapshot(self) -> Snapshot:
        """The counts and the sum, as plain values."""
        return tuple(self._counts), self._sum
