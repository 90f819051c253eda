"""The Raft process's merge: what reached it since its last append, in as few entries
as the byte cap allows.

Every submitted entry the Raft process (``child.py``) read in one pass over its
channel is planned here before it appends any: a run of one-slice merged entries
(``om.protocol.merged_entry``: one shard's sealed sub-batch each) becomes one
entry, and the run continues into a next entry past ``bytes_max`` bytes or
``SLICES_MAX`` slices; every other entry (a barrier ``B``, a verify ``V``, an old-flow
``R``, an entry of several slices, or a slice every shard applies, whose bytes every
other shard's channel receives) is appended alone and ends the run. So:

* the log keeps the submission order (a merged entry's slices are in arrival
  order, and no entry overtakes another);
* one entry is one log position for every slice in it;
* an entry is at most ``bytes_max`` (the batches' cap, ``[batch] bytes_max``),
  except one slice that is larger alone (a lone large request travels alone, as
  in ``om.executor.batcher``); what does not fit starts the next entry, appended
  right after this one;
* each request id is in exactly one append, at the slot of its slice, so its
  caller is answered once, with its own slice's outcome (``process.py``).

With one shard and one batch in flight (``[batch] inflight_batches_max = 1``, the
default) a run is one slice and the entry is appended as it came, not copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from om.protocol import merged_entry

SLICES_MAX = 256     # slices in one merged entry
RequestId = TypeVar("RequestId")   # how a submitter names an entry (the Raft process:
                                   # its channel and that channel's request id)


@dataclass(frozen=True)
class Append(Generic[RequestId]):
    """One entry to append and the ids its submitters gave, one per slice, in order."""

    entry: bytes
    request_ids: tuple[RequestId, ...]


def plan_appends(submitted: Sequence[tuple[RequestId, bytes]],
                 bytes_max: int) -> list[Append[RequestId]]:
    """The entries to append for ``submitted`` ((request id, entry) in arrival order)."""
    assert bytes_max > 0
    appends: list[Append[RequestId]] = []
    run: list[tuple[RequestId, bytes]] = []
    run_bytes = 1                       # the tag
    for request_id, entry in submitted:
        if not merged_entry.is_single_slice(entry) or merged_entry.is_every_shards(entry):
            appends.extend(_merged(run))
            run, run_bytes = [], 1
            appends.append(Append(entry, (request_id,)))
            continue
        slice_bytes = len(entry) - 1
        if run and (run_bytes + slice_bytes > bytes_max or len(run) >= SLICES_MAX):
            appends.extend(_merged(run))
            run, run_bytes = [], 1
        run.append((request_id, entry))
        run_bytes += slice_bytes
    appends.extend(_merged(run))
    assert sum(len(a.request_ids) for a in appends) == len(submitted), "each id once"
    return appends


def _merged(run: list[tuple[RequestId, bytes]]) -> list[Append[RequestId]]:
    if not run:
        return []
    entry = merged_entry.merge([entry for _, entry in run])
    assert len(run) == 1 or not merged_entry.is_single_slice(entry)
    return [Append(entry, tuple(request_id for request_id, _ in run))]
