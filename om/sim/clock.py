"""One virtual clock, one seeded random source, and the event loop that runs on them.

The whole simulated cluster is one asyncio loop (``VirtualLoop``) whose ``time()``
is the virtual clock and whose selector never waits: when nothing is ready it
moves the clock to the next timer. Every event (a Raft tick, a message, a disk
completion, a client's next step) is a timer on that loop, and asyncio runs
ready callbacks in FIFO order, so one seed gives one order of everything.

``seam(clock, rng)`` takes the process's clocks and global randomness over for
a run, for the libraries the nodes run (pysyncobj reads the clock and draws its
election timeouts from ``random``): ``time.time``/``monotonic``/``perf_counter``
(and their ``_ns``) answer the virtual clock, the global ``random`` functions
draw from the run's seeded generator, and the unseeded sources (``os.urandom``,
hence ``secrets`` and ``random.SystemRandom``; ``uuid.uuid4``; ``time.sleep``)
raise ``UnseededRead``: a run that reaches one fails loudly instead of silently
depending on the machine. The nodes' own core reads neither: it reads the
``Seam`` (``om/schema/seam.py``) each node is built with (``om/sim/world.py``),
so a run that passes also shows the core asked the machine for no random id.
Everything is put back when the run ends.
"""

from __future__ import annotations

import asyncio
import os
import random
import selectors
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EPOCH_S = 1_800_000_000.0    # the wall clock's reading at virtual time 0 (2027)
_TIME_NAMES = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
               "perf_counter_ns")
_RANDOM_NAMES = ("random", "uniform", "randint", "randrange", "choice", "choices",
                 "shuffle", "sample", "getrandbits", "gauss", "randbytes")


class UnseededRead(AssertionError):
    """Something read the machine's clock or entropy during a simulated run."""


class VirtualClock:
    """Seconds since the run started; only the loop moves it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0      # how often the taken-over time functions were read

    def advance_to(self, when: float) -> None:
        assert when >= self.now, "virtual time never goes back"
        self.now = when


class _VirtualSelector(selectors.BaseSelector):
    """A selector that never blocks: waiting ``timeout`` moves the clock by it."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("the simulation has nothing left to do (a deadlock)")
        if timeout > 0:
            self._clock.advance_to(self._clock.now + timeout)
        return []

    def close(self) -> None:
        self._keys.clear()

    def get_map(self) -> Any:
        return self._keys


class VirtualLoop(asyncio.SelectorEventLoop):
    """asyncio on the virtual clock."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(selector=_VirtualSelector(clock))
        self.clock = clock

    def time(self) -> float:
        return self.clock.now


def _refuse(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise UnseededRead(f"{name} read during a simulated run: use the run's clock or "
                           "seeded random source")
    return refused


@contextmanager
def seam(clock: VirtualClock, rng: random.Random) -> Iterator[None]:
    """The process's time and randomness are the run's while the block runs."""
    saved_time = {name: getattr(time, name) for name in (*_TIME_NAMES, "sleep")}
    saved_random = {name: getattr(random, name) for name in _RANDOM_NAMES}
    saved_urandom = os.urandom
    saved_uuid4 = uuid.uuid4

    def seconds() -> float:
        clock.reads += 1
        return clock.now

    def wall() -> float:
        clock.reads += 1
        return EPOCH_S + clock.now

    replacements: dict[str, Any] = {
        "time": wall, "time_ns": lambda: int(wall() * 1e9),
        "monotonic": seconds, "monotonic_ns": lambda: int(seconds() * 1e9),
        "perf_counter": seconds, "perf_counter_ns": lambda: int(seconds() * 1e9),
        "sleep": _refuse("time.sleep")}
    owner = threading.get_ident()

    def ours(replacement: Any, original: Any) -> Any:
        """The run's function on the thread that runs it; the process's own elsewhere
        (a library's daemon thread in the same process must not read the run's clock)."""
        return lambda *args, **kwargs: (replacement if threading.get_ident() == owner
                                        else original)(*args, **kwargs)

    try:
        for name, value in replacements.items():
            setattr(time, name, ours(value, saved_time[name]))
        for name in _RANDOM_NAMES:
            setattr(random, name, ours(getattr(rng, name), saved_random[name]))
        os.urandom = ours(_refuse("os.urandom"), saved_urandom)
        uuid.uuid4 = ours(_refuse("uuid.uuid4"), saved_uuid4)
        yield
    finally:
        for name, value in saved_time.items():
            setattr(time, name, value)
        for name, value in saved_random.items():
            setattr(random, name, value)
        os.urandom = saved_urandom
        uuid.uuid4 = saved_uuid4
