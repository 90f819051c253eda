"""Latency statistics: exact percentiles over bounded memory.

``percentile`` uses linear interpolation between the two closest ranks (the
p-quantile of n sorted values sits at position p * (n - 1)), the same rule as
the Spark analysis, so numbers printed here and there agree.

``LatencyRecorder`` keeps count, sum, sum of squares, min and max exactly, and
the samples themselves exactly up to ``capacity``; past that it keeps a
uniform reservoir sample of ``capacity`` values (Vitter's algorithm R), so
memory stays bounded however long a run lasts while percentiles stay unbiased.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

NS_PER_MS = 1_000_000.0
DEFAULT_CAPACITY = 2_000_000

# (name, fraction) of the percentiles every summary reports, as freon prints them.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.50), ("p75", 0.75), ("p95", 0.95), ("p98", 0.98), ("p99", 0.99),
    ("p999", 0.999),
)


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``ordered`` (sorted ascending, not empty)."""
    assert ordered, "no values"
    assert 0.0 <= fraction <= 1.0
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    weight = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * weight


@dataclass(frozen=True)
class LatencySummary:
    """Latencies in milliseconds; every field is 0.0 when ``count`` is 0."""

    count: int
    mean: float
    stddev: float
    min: float
    max: float
    p50: float
    p75: float
    p95: float
    p98: float
    p99: float
    p999: float

    def as_dict(self) -> dict[str, float]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


class LatencyRecorder:
    """Latencies in nanoseconds, in bounded memory (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, seed: int = 0) -> None:
        assert capacity > 0
        self.capacity = capacity
        self._samples: array[int] = array("q")
        self._random = random.Random(seed)
        self.count = 0
        self.total_ns = 0
        self._square_total = 0
        self.min_ns = 0
        self.max_ns = 0

    def add(self, latency_ns: int) -> None:
        """Records one latency."""
        assert latency_ns >= 0
        self.count += 1
        self.total_ns += latency_ns
        self._square_total += latency_ns * latency_ns
        self.min_ns = latency_ns if self.count == 1 else min(self.min_ns, latency_ns)
        self.max_ns = max(self.max_ns, latency_ns)
        if len(self._samples) < self.capacity:
            self._samples.append(latency_ns)
            return
        slot = self._random.randrange(self.count)
        if slot < self.capacity:
            self._samples[slot] = latency_ns

    def extend(self, latencies_ns: Iterable[int]) -> None:
        """Records many latencies."""
        for latency in latencies_ns:
            self.add(latency)

    @property
    def exact(self) -> bool:
        """True while every latency recorded is still held (no sampling yet)."""
        return self.count == len(self._samples)

    def sorted_samples(self) -> list[int]:
        """The samples held, ascending."""
        return sorted(self._samples)

    def summary(self) -> LatencySummary:
        """Mean, stddev, min and max (exact) and the percentiles, in milliseconds."""
        if self.count == 0:
            return LatencySummary(0, *([0.0] * (4 + len(PERCENTILES))))
        mean = self.total_ns / self.count
        variance = max(self._square_total / self.count - mean * mean, 0.0)
        ordered = self.sorted_samples()
        points = [percentile(ordered, fraction) / NS_PER_MS for _, fraction in PERCENTILES]
        return LatencySummary(self.count, mean / NS_PER_MS, math.sqrt(variance) / NS_PER_MS,
                              self.min_ns / NS_PER_MS, self.max_ns / NS_PER_MS, *points)
