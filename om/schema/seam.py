"""The ``Seam`` port: the time and randomness the core reads from outside the program.

The core (flows, executor, gatekeeper, state machine, schema) never reads the
machine's clock or entropy itself; it reads the ``Seam`` it was given, which the
node picks once (``om/node/parts.py`` ``MACHINE_SEAM``: the wall's clock and the
OS's entropy) and a simulator fills with its virtual clock and seeded randomness
(``om/sim/world.py``). ``tests/test_seam_reads.py`` reads the core's syntax trees
and fails on a read that bypasses it.

Invariants: ``wall_ns`` is the time replicated data is stamped with (a batch's
``timestamp_ms``, a reply row's expiry, a purge's cutoff) and trace records are
dated with; ``elapsed_ns`` only ever measures a duration or a deadline (it never
goes back; its zero means nothing); ``randomness(n)`` returns ``n`` bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Randomness = Callable[[int], bytes]   # n random bytes


@dataclass(frozen=True)
class Seam:
    """The clocks and the randomness one node's core reads."""

    wall_ns: Callable[[], int]      # nanoseconds since the epoch
    elapsed_ns: Callable[[], int]   # a monotonic clock, in nanoseconds
    randomness: Randomness

    def clock_ms(self) -> int:
        """Milliseconds since the epoch: the leader fixes it for each write."""
        return self.wall_ns() // 1_000_000
