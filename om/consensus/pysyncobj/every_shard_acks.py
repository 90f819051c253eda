"""The answer to a write every shard applies waits for every shard (docs/SHARDS.md).

A slice numbered ``merged_entry.EVERY_SHARD`` (a bucket, a volume, a token, a
certificate, an upgrade row: rows every shard reads) is applied by every shard
process of a node, each in its own time. Answered as soon as its submitter applied
it, a client could act on it at once on another shard that has not applied it yet:
create a bucket, then find its shard answer BUCKET_NOT_FOUND; revoke a certificate,
then see another shard accept it. So the Raft process holds the result of such an
append on the leader until every channel said it applied the position ("applied",
after an "ack" request sent right behind the entry), and only then answers the
submitter: once a client hears of the write, every shard of this node has it.

A shard that does not answer within ``wait_s`` (its process stalled, its store being
installed) does not hold the answer longer: the result goes out with a warning, and
that shard may answer from before the write for as long as it lags (the old
guarantee). Entries applied elsewhere (a follower's) answer no one here and wait for
nothing. At most ``held_max`` results wait at once (every shard write of this kind is
rare: bucket and volume changes, tokens, revocations); past it the oldest goes out.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from om.protocol.channel import Message

logger = logging.getLogger(__name__)

WAIT_S = 2.0
HELD_MAX = 1024


@dataclass
class _Held:
    """One position's acknowledgements still missing and its result messages."""

    missing: set[int]
    since_s: float
    results: dict[int, Message] = field(default_factory=dict)
    committed: bool = False     # its result came (else only the acks are awaited)


class EveryShardAcks:
    """The positions awaiting every channel's "applied", and their held results."""

    def __init__(self, channels: int, wait_s: float = WAIT_S, held_max: int = HELD_MAX) -> None:
        assert channels > 1, "one shard applies alone: nothing to wait for"
        assert wait_s > 0
        assert held_max >= 1
        self._channels = channels
        self._wait_s = wait_s
        self._held_max = held_max
        self._held: OrderedDict[int, _Held] = OrderedDict()

    def expect(self, position: int, now_s: float) -> list[dict[int, Message]]:
        """Starts waiting for every channel to apply ``position`` (its "ack" requests
        sent); returns results released to stay within ``held_max``."""
        assert position not in self._held
        self._held[position] = _Held(set(range(self._channels)), now_s)
        released = []
        while len(self._held) > self._held_max:
            oldest, held = self._held.popitem(last=False)
            logger.warning("every-shard entry %d answered before shards %s applied it: "
                           "too many waiting", oldest, sorted(held.missing))
            released.append(held.results)
        return released

    def result(self, position: int, results: dict[int, Message]) -> dict[int, Message] | None:
        """The result messages of ``position``: returned to send now, or None: held
        until every channel applied it."""
        held = self._held.get(position)
        if held is None:
            return results
        held.results, held.committed = results, True
        return self._release_if_done(position, held)

    def applied(self, channel: int, position: int) -> dict[int, Message] | None:
        """Channel ``channel`` applied ``position``: the results to send now, if any."""
        held = self._held.get(position)
        if held is None:
            return None        # released at its timeout, or never awaited
        held.missing.discard(channel)
        return self._release_if_done(position, held)

    def due(self, now_s: float) -> list[dict[int, Message]]:
        """The results of positions some shard has not applied within ``wait_s``."""
        released = []
        for position, held in list(self._held.items()):
            if now_s - held.since_s < self._wait_s:
                break          # in order: the rest are younger
            del self._held[position]
            logger.warning("every-shard entry %d answered before shards %s applied it "
                           "(not within %.1f s)", position, sorted(held.missing), self._wait_s)
            released.append(held.results)
        return released

    def _release_if_done(self, position: int, held: _Held) -> dict[int, Message] | None:
        if held.missing or not held.committed:
            return None
        del self._held[position]
        return held.results
