"""Adding and removing Raft voters, with etcd's strict reconfiguration checks.

pysyncobj (``dynamicMembershipChange``) changes the configuration one node at
a time: ``addNodeToCluster`` / ``removeNodeFromCluster`` append a membership
entry that every node acts on when it *appends* it (Raft's single-server
change), and the callback fires once the entry is committed. pysyncobj itself
refuses (REQUEST_DENIED) a change before the leader's no-op of its term is
applied (the fix for the single-server change bug of raft-dev, July 2015) or
while the previous change is not committed. It checks nothing else, so
``MembershipChanges`` adds, on the leader's tick thread, etcd's
``StrictReconfigCheck``:

* an addition needs the new configuration's quorum among the nodes the
  leader is connected to now (the new node, not yet running as a voter,
  counts as down);
* a removal needs the remaining voters' quorum among the connected ones, and
  never removes the leader itself (transfer leadership away first), so at
  least one voter always stays.

A refused change changes nothing. Learners (non-voting catch-up) are
pysyncobj's read-only nodes (``RaftLog`` built without an address): they
connect to the voters, receive the log and snapshots, never vote and are never
counted; promoting one is an addition of its address (``om admin om add``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pysyncobj import FAIL_REASON

Reply = Callable[[str, str], None]   # (code, message): OK, REFUSED, NOT_LEADER, FAILED,
#                                       IN_EFFECT (a refusal: the ring is already as asked)
IN_EFFECT = "already"   # the end of a problem that says the change is in effect already
ADD = "add"
REMOVE = "remove"


def quorum(voters: int) -> int:
    """The majority of ``voters``."""
    assert voters >= 1
    return voters // 2 + 1


class MembershipChanges:
    """The leader's requested membership change (at most one waiting for a tick).

    ``raft`` is the RaftLog; ``request`` may be called from any thread, every
    other method runs on its tick thread."""

    def __init__(self, raft: Any) -> None:
        self._raft = raft
        self._requested: tuple[str, str, Reply] | None = None

    def request(self, op: str, address: str, reply: Reply) -> None:
        """Asks to add or remove the voter at the Raft ``address``; ``reply`` runs on
        the tick thread once the change is committed or refused."""
        assert op in (ADD, REMOVE)
        if self._requested is not None:
            reply("REFUSED", "another membership change is waiting to start")
            return
        self._requested = (op, address, reply)

    def tick(self) -> None:
        """Starts the requested change, if any."""
        if self._requested is None:
            return
        op, address, reply = self._requested
        self._requested = None
        problem = self.problem(op, address)
        if problem:
            reply("NOT_LEADER" if problem == "not the leader"
                  else "IN_EFFECT" if problem.endswith(IN_EFFECT) else "REFUSED", problem)
            return

        def done(_result: Any, reason: int) -> None:
            if reason == FAIL_REASON.SUCCESS:
                reply("OK", "committed")
            elif reason == FAIL_REASON.REQUEST_DENIED:
                reply("REFUSED", "Raft refused it: the leader's first entry of its term or "
                                 "the previous membership change is not committed yet")
            else:
                reply("FAILED", f"the membership entry failed (pysyncobj reason {reason}); "
                                "ask the leader for the membership before trying again")

        if op == ADD:
            self._raft.addNodeToCluster(address, callback=done)
        else:
            self._raft.removeNodeFromCluster(address, callback=done)

    def problem(self, op: str, address: str) -> str:
        """Why the change is unsafe now ("" when it is not)."""
        raft = self._raft
        if not raft._isLeader():
            return "not the leader"
        others = {str(n.id): n for n in raft.otherNodes}
        connected = 1 + sum(1 for n in others.values() if raft.isNodeConnected(n))
        if op == ADD:
            if address == raft.selfNode.id or address in others:
                return f"{address} is a voter {IN_EFFECT}"
            needed = quorum(len(others) + 2)
            if connected < needed:
                return (f"{len(others) + 2} voters need {needed} up, and the leader is "
                        f"connected to {connected} (the new node counts as down until it runs "
                        "as a voter)")
            return ""
        if address == raft.selfNode.id:
            return "the leader cannot remove itself: transfer leadership away first"
        if address not in others:
            return f"{address} is not a voter {IN_EFFECT}"
        remaining = len(others)   # the leader and the others but the removed one
        up = connected - (1 if raft.isNodeConnected(others[address]) else 0)
        if up < quorum(remaining):
            return (f"the {remaining} voters left need {quorum(remaining)} up, and only {up} "
                    "are connected to the leader")
        return ""

    def members(self) -> list[str]:
        """The voters' Raft addresses, this node's first."""
        raft = self._raft
        own = [] if raft.selfNode is None else [str(raft.selfNode.id)]
        return own + sorted(str(n.id) for n in raft.otherNodes)
