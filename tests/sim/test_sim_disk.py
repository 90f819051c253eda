"""The simulated disk: a sync makes exactly what a reader sees stable, however the file
was written since the last one, and a crash keeps the stable bytes (plus maybe a piece
of an appended tail). SimDisk copies only what changed since the last sync; these
tests hold it to the whole-file model it replaced (``stable = bytes(cache)``)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from om.consensus.pysyncobj.simulated import SimDisk


class _NoScheduler:
    def disk_done(self, node: str, work: Callable[[], None]) -> None:
        raise AssertionError("these tests sync by hand")


def _disk() -> SimDisk:
    return SimDisk("n1", _NoScheduler())


def test_a_rewrite_below_the_synced_length_is_lost_in_a_crash_until_synced() -> None:
    disk = _disk()
    disk.write(0, b"abcdefgh")
    disk.sync()
    disk.truncate(3)
    disk.write(3, b"XY")           # overwrites synced bytes, not yet synced
    assert bytes(disk.cache) == b"abcXY"
    disk.crash(random.Random(1))
    assert bytes(disk.cache) == b"abcdefgh"
    disk.truncate(3)
    disk.write(3, b"XY")
    disk.sync()
    disk.crash(random.Random(1))
    assert bytes(disk.cache) == b"abcXY"


def test_a_write_past_the_end_fills_the_gap_with_zeros() -> None:
    disk = _disk()
    disk.write(0, b"ab")
    disk.sync()
    disk.write(4, b"cd")
    disk.sync()
    assert bytes(disk.stable) == b"ab\0\0cd"


@pytest.mark.parametrize("seed", range(20))
def test_syncs_and_crashes_match_the_whole_file_model(seed: int) -> None:
    rng = random.Random(seed)
    disk = _disk()
    cache, stable = bytearray(), b""        # the model: a sync copies the whole file
    for _ in range(300):
        action = rng.random()
        if action < 0.45:
            offset = rng.randrange(len(cache) + 3)
            data = rng.randbytes(rng.randrange(1, 9))
            disk.write(offset, data)
            cache.extend(b"\0" * max(0, offset + len(data) - len(cache)))
            cache[offset:offset + len(data)] = data
        elif action < 0.6:
            size = rng.randrange(len(cache) + 1)
            disk.truncate(size)
            del cache[size:]
        elif action < 0.65:
            content = rng.randbytes(rng.randrange(12))
            disk.replace(content)
            cache = bytearray(content)
        elif action < 0.95:
            disk.sync()
            stable = bytes(cache)
        else:
            disk.crash(random.Random(rng.random()))
            kept = bytes(disk.cache)
            if cache.startswith(stable):     # maybe a piece of the appended tail too
                assert cache.startswith(kept)
                assert kept.startswith(stable)
            else:
                assert kept == stable
            cache, stable = bytearray(kept), kept
        assert bytes(disk.cache) == bytes(cache)
        assert bytes(disk.stable) == stable
