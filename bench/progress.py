"""A one-line progress bar on stderr, redrawn in place with ``\\r``.

Quiet unless the stream is a terminal (so logs and pipes stay clean), redrawn
at most every ``interval_s``, and always left on a fresh line by ``close``.
Progress is the larger of the done fraction of ``total`` operations and the
elapsed fraction of ``duration_s``, as freon's bar shows whichever ends first.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30


def render(label: str, done: int, failed: int, fraction: float, elapsed_s: float) -> str:
    """The bar's text, e.g. `` leader  42.0% |############      | 4200 ops  1.2 s``."""
    fraction = min(max(fraction, 0.0), 1.0)
    filled = int(fraction * WIDTH)
    bar = "#" * filled + " " * (WIDTH - filled)
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    failures = f"  {failed} failed" if failed else ""
    return (f"{label} {fraction * 100:5.1f}% |{bar}| {done} ops  {rate:,.0f} ops/s  "
            f"{elapsed_s:.1f} s{failures}")


class ProgressBar:
    """Draws progress towards ``total`` operations or ``duration_s`` seconds."""

    def __init__(self, label: str, total: int | None, duration_s: float | None,
                 stream: TextIO | None = None, interval_s: float = 0.25) -> None:
        self.label = label
        self.total = total
        self.duration_s = duration_s
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.interval_s = interval_s
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._width = 0

    def fraction(self, done: int, elapsed_s: float) -> float:
        """How far the run is, 0.0 to 1.0."""
        by_count = done / self.total if self.total else 0.0
        by_time = elapsed_s / self.duration_s if self.duration_s else 0.0
        return min(max(by_count, by_time), 1.0)

    def update(self, done: int, failed: int, force: bool = False) -> None:
        """Redraws the bar if due (or ``force``)."""
        now = time.monotonic()
        if not self.enabled or (not force and now - self._drawn_at < self.interval_s):
            return
        self._drawn_at = now
        elapsed = now - self._started
        text = render(self.label, done, failed, self.fraction(done, elapsed), elapsed)
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def close(self, done: int, failed: int) -> None:
        """Draws the final state and ends the line."""
        if self.enabled:
            self.update(done, failed, force=True)
            self.stream.write("\n")
            self.stream.flush()


class StepLog:
    """Timestamped step lines (always) and progress bars (on a terminal) for a long run."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._started = time.monotonic()

    def step(self, text: str) -> None:
        """Prints ``[  12.3s] text``."""
        self.stream.write(f"[{time.monotonic() - self._started:6.1f}s] {text}\n")
        self.stream.flush()

    def bar(self, label: str, total: int | None, duration_s: float | None) -> ProgressBar:
        """A progress bar on the same stream."""
        return ProgressBar(label, total, duration_s, self.stream)
