"""The SyncObj: pysyncobj's Raft node with one replicated method, and two repairs.

``RaftLog.persist(entry)`` applies one committed entry at its log position
(inside apply, pysyncobj's ``raftLastApplied + 1`` is the entry's index).

Subclass overrides, each tested in ``tests/consensus/``:

* **Pipelining (``nextIndex``).** On every successful append response
  pysyncobj sets the follower's ``nextIndex`` to "acknowledged + 1", even when
  later entries are already on their way, so every entry still in flight is
  sent again and the follower truncates and re-journals it (pysyncobj logs
  CRITICAL "truncating already-applied log entries"). Here a plain success
  never moves ``nextIndex`` backwards; a reset (the follower's log differs)
  still does, so a follower that lost entries is still repaired.
* **One pickle, protocol 5.** The ``@replicated`` wrapper pickles its
  arguments with protocol 2, which inflates ``bytes`` ~1.5x in the journal
  and on the wire. ``submit`` builds the same command (method id, arguments)
  with protocol 5 and queues it through pysyncobj's ``_applyCommand``, which
  is what the wrapper calls; apply unpickles either protocol.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated

from om.consensus.port import Applied, ApplyEntry

_REGULAR_COMMAND = 0  # pysyncobj's _COMMAND_TYPE.REGULAR
Callback = Callable[[Any, int], None]


class RaftLog(SyncObj):  # type: ignore[misc]
    """pysyncobj's SyncObj with the overrides above.

    ``om_sync_journal`` and ``om_compress`` are read by
    ``GroupCommitTransport`` while ``SyncObj.__init__`` builds it."""

    def __init__(self, self_address: str, other_addresses: list[str], conf: SyncObjConf,
                 apply_entry: ApplyEntry, sync_journal: Callable[[], None], compress: bool,
                 transport_class: type) -> None:
        self._apply_entry = apply_entry
        self.om_sync_journal = sync_journal
        self.om_compress = compress
        super().__init__(self_address, other_addresses, conf, transportClass=transport_class)
        self._persist_id = self._methodToID[self._getFuncName("persist")]

    @replicated  # type: ignore[untyped-decorator]
    def persist(self, entry: bytes) -> tuple[Applied, int]:
        """Applies ``entry`` at its position; returns the result and the apply time."""
        started = time.perf_counter_ns()
        result = self._apply_entry(self.raftLastApplied + 1, entry)
        return result, time.perf_counter_ns() - started

    def submit(self, entry: bytes, callback: Callback) -> None:
        """Queues ``entry`` for replication; ``callback(result, reason)`` runs on the
        tick thread once it is applied here or failed."""
        command = pickle.dumps((self._persist_id, (entry,)), protocol=5)
        self._applyCommand(command, callback, _REGULAR_COMMAND)

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        """pysyncobj's handler, except that a plain success never rewinds nextIndex."""
        if not (isinstance(message, dict) and message.get("type") == "next_node_idx"
                and message.get("success") and not message.get("reset")):
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            return
        next_index: dict[Any, int] = self._SyncObj__raftNextIndex
        before = next_index.get(node)
        SyncObj._SyncObj__onMessageReceived(self, node, message)
        if before is not None and next_index.get(node, before) < before:
            next_index[node] = before
