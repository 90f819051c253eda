"""Aimed leadership transfer: refuse what cannot work, hold new entries, hand over.

pysyncobj's ``transferLeadership(node)`` (0.3.17) sends Raft's ``TimeoutNow``
to ``node`` (or, without one, to the connected follower with the highest match
index) only if that follower's match index equals the leader's last log index,
and otherwise refuses (REQUEST_DENIED). It does not wait for the target to catch
up, and it keeps appending new entries meanwhile, so under a write load the
target is almost never caught up at the instant it is asked.

``Transfers`` adds, on the tick thread of the leader:

* refusals with a reason: not leader, unknown target, the leader itself, a
  target still not connected after ``CATCH_UP_S`` (just after an election the
  leader's link to a follower may not be up yet: that is waited for, with
  writes flowing), or one still behind after another ``CATCH_UP_S``;
* a pause: from the moment the leader is connected to the target, entries
  submitted to Raft are held (not appended), so the target's match index can
  reach the leader's last index; the TimeoutNow goes, through pysyncobj, only
  to the chosen node;
* after the hand-over, held entries fail with NOT_LEADER once this node has
  stepped down (they never entered the log: nothing acknowledged is lost and
  nothing is applied twice; clients retry at the new leader), or are appended
  after all if this node still leads ``HANDOVER_S`` later (the target lost its
  election).

Invariant: entries are held only while ``pending.holding`` is set, and every held entry
is either appended or failed when it is cleared (``_lock``: in-process, entries
are submitted from the event loop's thread while the tick thread clears).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pysyncobj import FAIL_REASON
from pysyncobj.monotonic import monotonic as monotonic_time

CATCH_UP_S = 2.0    # how long the target may take to reach the leader's last index
HANDOVER_S = 3.0    # how long the old leader holds entries after TimeoutNow
Reply = Callable[[str, str, str], None]  # (code, target raft address, message)
Callback = Callable[[Any, int], None]


@dataclass
class _Pending:
    target: Any
    reply: Reply
    deadline: float
    holding: bool = False
    sent: bool = False
    held: list[tuple[bytes, Callback]] = field(default_factory=list)


class Transfers:
    """The leader's transfer in progress (at most one) and the entries it holds.

    ``raft`` is the RaftLog (pysyncobj's private state is read through it); every
    method but ``request`` runs on its tick thread."""

    def __init__(self, raft: Any, submit: Callable[[bytes, Callback], None]) -> None:
        self._raft = raft
        self._submit = submit
        self._requested: tuple[str | None, Reply] | None = None
        self._lock = threading.Lock()
        self.pending: _Pending | None = None

    def request(self, target: str | None, reply: Reply) -> None:
        """Asks for a transfer to the Raft address ``target`` (None: a random caught-up
        follower); ``reply`` runs on the tick thread with the outcome."""
        self._requested = (target, reply)

    def hold(self, entry: bytes, callback: Callback) -> bool:
        """True when a transfer holds ``entry`` instead of Raft appending it."""
        with self._lock:
            if self.pending is None or not self.pending.holding:
                return False
            self.pending.held.append((entry, callback))
            return True

    def match_indexes(self) -> dict[str, int]:
        """Each follower's match index as this leader sees it ({} on a follower)."""
        if not self._raft._isLeader():
            return {}
        match: dict[Any, int] = self._raft._SyncObj__raftMatchIndex
        return {str(n.id): int(i) for n, i in list(match.items())}

    def tick(self) -> None:
        """Starts a requested transfer, or moves the pending one on."""
        if self._requested is not None:
            target, reply = self._requested
            self._requested = None
            self._start(target, reply)
        pending = self.pending
        if pending is None:
            return
        if not self._raft._isLeader():
            self._finish(fail=True)
        elif not pending.holding:
            self._try_hold(pending)
        elif not pending.sent:
            self._try_send(pending)
        elif monotonic_time() > pending.deadline:
            self._finish(fail=False)

    def _start(self, target: str | None, reply: Reply) -> None:
        raft = self._raft
        if not raft._isLeader():
            reply("NOT_LEADER", target or "", "this node is not the leader")
            return
        if self.pending is not None:
            reply("REFUSED", target or "", "a leadership transfer is already in progress")
            return
        if target is None:
            connected = [n for n in raft.otherNodes if raft.isNodeConnected(n)]
            node = self._random_target(connected)
            if node is None:
                reply("REFUSED", "", "no follower is connected")
                return
        else:
            problem, node = self._named_target(target)
            if problem:
                reply("REFUSED", target, problem)
                return
        self.pending = _Pending(node, reply, monotonic_time() + CATCH_UP_S)

    def _random_target(self, connected: list[Any]) -> Any:
        """A random connected follower among the most caught up."""
        if not connected:
            return None
        match = self._raft._SyncObj__raftMatchIndex
        best = max(match.get(n, 0) for n in connected)
        return random.choice([n for n in connected if match.get(n, 0) == best])

    def _named_target(self, target: str) -> tuple[str, Any]:
        raft = self._raft
        if target == raft.selfNode.id:
            return "the target is the leader itself", None
        found = [n for n in raft.otherNodes if n.id == target]
        if not found:
            return "the target is not a member of the ring", None
        return "", found[0]

    def _try_hold(self, pending: _Pending) -> None:
        """Starts holding entries once the leader is connected to the target; refuses
        when it still is not at the deadline."""
        if self._raft.isNodeConnected(pending.target):
            with self._lock:
                pending.holding = True
            pending.deadline = monotonic_time() + CATCH_UP_S
        elif monotonic_time() > pending.deadline:
            pending.reply("REFUSED", str(pending.target.id),
                          f"the leader is not connected to the target (waited {CATCH_UP_S} s)")
            self._finish(fail=False)

    def _try_send(self, pending: _Pending) -> None:
        """TimeoutNow once the target holds every entry the leader has or will append:
        its match index is the last log index and pysyncobj's command queue (entries
        submitted before the hold, appended a tick's time budget at a time) is empty.
        Otherwise an entry appended after TimeoutNow makes the leader's (and maybe
        another follower's) log longer than the target's, and its election fails."""
        raft = self._raft
        match = int(raft._SyncObj__raftMatchIndex.get(pending.target, 0))
        last = int(raft._SyncObj__getCurrentLogIndex())
        queued = len(raft._SyncObj__commandsQueue._FastQueue__queue)
        if match == last and not queued:
            outcome: list[int] = []
            raft.transferLeadership(pending.target, lambda _r, reason: outcome.append(reason))
            if outcome == [FAIL_REASON.SUCCESS]:
                pending.sent = True
                pending.deadline = monotonic_time() + HANDOVER_S
                pending.reply("OK", str(pending.target.id), "TimeoutNow sent")
                return
            pending.reply("REFUSED", str(pending.target.id),
                          f"pysyncobj refused the transfer (reason {outcome})")
            self._finish(fail=False)
        elif monotonic_time() > pending.deadline:
            pending.reply("NOT_UP_TO_DATE", str(pending.target.id),
                          f"the target's match index {match} did not reach the leader's last "
                          f"log index {last} within {CATCH_UP_S} s ({queued} entries queued)")
            self._finish(fail=False)

    def _finish(self, fail: bool) -> None:
        """Clears the transfer: held entries fail (this node stepped down) or are appended."""
        with self._lock:
            pending = self.pending
            assert pending is not None
            self.pending = None
        if not pending.sent and fail:
            pending.reply("NOT_LEADER", str(pending.target.id), "this node lost leadership")
        for entry, callback in pending.held:
            if fail:
                callback(None, FAIL_REASON.NOT_LEADER)
            else:
                self._submit(entry, callback)
