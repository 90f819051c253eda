"""Continuous verification: every node checks itself at every verify position.

The leader proposes a verify entry every ``[verify] interval_s`` (the node's
wiring, ``om.node.integrity``); ``om admin verify`` proposes one now. Every node,
once it has read its own digests at such a position (``Verifier``'s ``on_done``),
asks each peer for its roots there (waiting up to ``wait_s`` for a peer still
reading), votes per table over the configured members (``compare``), and when the
majority disagrees with *it*, descends to the differing leaves against a majority
holder, names the rows, logs an alert line per row (``replica divergence``) and
marks itself diverged, as ``om admin verify`` marks a node (the marker file; the
node refuses clients and hands leadership away). A node never marks another:
each looks after itself, so the check needs no coordinator and a minority node
is found by itself within one interval. A table where no root has a majority is
logged as an alert and marks nobody. When no more than half the members answered
(a restart of every node, a partition), nothing can be judged: the check is
``incomplete``, a warning, never an alert (a soak's storm raised "no majority"
alerts over every table when two of three nodes were down). Leaves whose digest
drifted from their own rows (``compare.Drift``) are logged and left to the scrub.

What it reads costs little: a clean check is one request a peer; the checkpoint
and the roots are the verifier's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from om.integrity import compare, marker, remote
from om.integrity.compare import Comparison, Replica, ReplicaError
from om.integrity.verifier import LocalReplica, Verification, Verifier
from om.protocol import om_pb2

logger = logging.getLogger(__name__)

POLL_S = 0.2


@dataclass(frozen=True)
class CheckResult:
    """The last self-check: where, what it found, when."""

    position: int
    result: str                  # clean, diverged, minority_elsewhere, no_majority, incomplete
    differences: int
    drift: int
    finished_at_s: float


class SelfCheck:
    """Compares this node's digests with its peers' at each verification it finishes."""

    def __init__(self, node_id: str, verifier: Verifier | None, peers: Mapping[str, remote.Call],
                 cluster_size: int, mark: Callable[[marker.Marker], None],
                 wait_s: float) -> None:
        assert cluster_size >= 1
        assert wait_s > 0
        self.node_id = node_id
        self.verifier = verifier
        self._peers = peers
        self._cluster_size = cluster_size
        self._mark = mark
        self._wait_s = wait_s
        self.checks = 0
        self.divergences = 0
        self.last: CheckResult | None = None

    def check(self, mine: Verification) -> CheckResult:
        """Votes with the peers at ``mine``'s position; marks this node if outvoted."""
        position = mine.spec.position
        assert self.verifier is not None
        answers = self._peer_answers(position)
        self.checks += 1
        if 2 * (1 + len(answers)) <= self._cluster_size:
            logger.warning("verify at %d: %d of %d members answered, too few to vote: "
                           "nothing judged", position, 1 + len(answers), self._cluster_size)
            self.last = CheckResult(position, "incomplete", 0, 0, time.time())
            return self.last
        replicas: dict[str, Replica] = {self.node_id: LocalReplica(self.node_id,
                                                                   self.verifier, mine)}
        roots = {self.node_id: compare.root_bytes(mine.roots)}
        for node_id, answer, call in answers:
            replicas[node_id] = remote.RemoteReplica(node_id, call, answer)
            roots[node_id] = remote.roots_of(answer)
        found = compare.compare(position, roots, replicas, self._cluster_size)
        result = self._judge(found, len(roots))
        self.last = CheckResult(position, result, len(found.differences), len(found.drift),
                                time.time())
        return self.last

    def _peer_answers(self, position: int
                      ) -> list[tuple[str, om_pb2.GetVerifyTreesResponse, remote.Call]]:
        """Each peer's finished verification at ``position`` (peers that answer in time)."""
        found = []
        deadline = time.monotonic() + self._wait_s
        for node_id, call in sorted(self._peers.items()):
            while True:
                try:
                    answer = remote.ask_verification(call, position)
                except ReplicaError as error:
                    logger.warning("verify at %d: %s did not answer: %s", position, node_id,
                                   error)
                    break
                if answer.state == om_pb2.VERIFY_DONE:
                    found.append((node_id, answer, call))
                    break
                if answer.state == om_pb2.VERIFY_FAILED or time.monotonic() > deadline:
                    logger.warning("verify at %d: %s has no digests there: %s", position,
                                   node_id, answer.detail or "not yet")
                    break
                time.sleep(POLL_S)
        return found

    def _judge(self, found: Comparison, answered: int) -> str:
        position = found.position
        for drift in found.drift:
            logger.error("verify at %d: digest drift on %s: %s leaf %d (its rows are the "
                         "majority's; the scrub recomputes it)", position, drift.node_id,
                         drift.table, drift.leaf)
        if found.verdict.no_majority:
            logger.error("ALERT replica verification at position %d: no majority in %s among "
                         "%d of %d members: nobody marked", position,
                         ", ".join(found.verdict.no_majority), answered, self._cluster_size)
            return "no_majority"
        if self.node_id not in found.diverged:
            if found.diverged:
                return "minority_elsewhere"
            return "clean" if answered == self._cluster_size or found.clean else "incomplete"
        self.divergences += 1
        tables = sorted(t for t, v in found.verdict.tables.items() if self.node_id in v.minority)
        for difference in found.differences:
            row = difference.row
            logger.critical("ALERT replica divergence at position %d: %s %s %s is %s here "
                            "(compared with %s)", position, self.node_id, row.table,
                            row.key.decode(errors="backslashreplace"), row.kind,
                            difference.reference)
        for problem in found.problems:
            logger.critical("ALERT replica divergence at position %d: %s", position, problem)
        self._mark(marker.Marker(marker.DIVERGED, position, tuple(tables), position))
        return "diverged"
