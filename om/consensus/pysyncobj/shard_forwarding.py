"""What the Raft process hands each of its channels: one per shard (docs/SHARDS.md, step 2).

The Raft process (``child.py``) serves S channels: channel 0 is the node's serving
process (shard 0, which also gets snapshots, membership and the gauges), channel k
(1 <= k < S) shard k's process. A request id is its channel's own, so the process
names a submitted entry by (channel, request id): a ``SubmitId``.

For every committed entry each channel receives exactly one message, in log order
(``forwards``), so each shard's log position moves with every entry:

* a merged entry ``M``: channel k gets its own slices, and only those: ``apply_own``
  with the ids it gave them when the entry was appended here (it keeps their bytes
  and rebuilds its part as ``merged_entry.merge`` of them), else ``apply`` with its
  part's bytes (``merged_entry.split_by_shard``: the slice records as they are);
  a channel with no slice in the entry gets ``position``: the log passed p with
  nothing for it (the shard need not write: its stored position is that of the last
  entry that carried a slice for it, ARCHITECTURE.md, *Parallel executors*);
* any other entry (a barrier ``B``, a verify ``V``, an old-flow ``R``) is for every
  shard: ``apply_own`` to the channel that submitted it, ``apply`` with its bytes to
  every other, so a new leader's barrier reaches each shard's stale-term rule; so is
  a merged entry of one slice every shard applies (``merged_entry.EVERY_SHARD``,
  appended alone), appended here; appended elsewhere, its record is in every part.

With one channel (S = 1) the messages are today's: ``apply_own`` with the ids of an
entry appended here, ``apply`` with the whole entry otherwise, never split.

An append's outcome goes to the channels whose ids it holds, each with its ids in
slot order (``results``): a channel's slot among its own ids is the index of its
slice in the part it applies, so each id is answered from its own slice.
"""

from __future__ import annotations

from collections.abc import Sequence

from om.protocol import merged_entry
from om.protocol.channel import Message

SubmitId = tuple[int, int]     # (channel, the request id that channel gave)


def ids_by_channel(ids: Sequence[SubmitId]) -> dict[int, tuple[int, ...]]:
    """The request ids of ``ids`` by channel, each channel's in the order given."""
    grouped: dict[int, list[int]] = {}
    for channel, request in ids:
        grouped.setdefault(channel, []).append(request)
    return {channel: tuple(requests) for channel, requests in grouped.items()}


def results(ids: Sequence[SubmitId], reason: int, position: int) -> dict[int, Message]:
    """The ``result`` message for each channel with an id in one append."""
    if len(ids) == 1:      # an entry alone: at S = 1 with one batch in flight, every one
        (channel, request), = ids
        return {channel: ("result", (request,), reason, position)}
    return {channel: ("result", requests, reason, position)
            for channel, requests in ids_by_channel(ids).items()}


def forwards(position: int, entry: bytes, own: Sequence[SubmitId] | None,
             channels: int) -> list[Message]:
    """The message for each channel (index = channel) for the entry committed at
    ``position``; ``own``: the ids it was appended with here, None when another node
    appended it (or this process no longer remembers it)."""
    assert position > 0
    if channels == 1:
        if own is None:
            return [("apply", position, entry)]
        return [("apply_own", position, tuple(request for _, request in own))]
    assert channels > 1, "no channel, no forward"
    assert own is None or all(0 <= channel < channels for channel, _ in own)
    if entry[:1] != merged_entry.MERGED or (own is not None
                                            and merged_entry.is_every_shards(entry)):
        return _to_every_channel(position, entry, own, channels)
    if own is not None:
        by_channel = ids_by_channel(own)
        return [("apply_own", position, by_channel[channel]) if channel in by_channel
                else ("position", position) for channel in range(channels)]
    parts = merged_entry.split_by_shard(entry, channels)
    return [("apply", position, parts[channel]) if channel in parts
            else ("position", position) for channel in range(channels)]


def _to_every_channel(position: int, entry: bytes, own: Sequence[SubmitId] | None,
                      channels: int) -> list[Message]:
    """An entry that is not split (B, V, R): its submitter rebuilds it, the rest get it."""
    messages: list[Message] = [("apply", position, entry)] * channels
    if own is not None:
        assert len(own) == 1, "an entry other than M is appended alone"
        channel, request = own[0]
        messages[channel] = ("apply_own", position, (request,))
    return messages
