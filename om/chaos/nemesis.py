"""The nemesis: real faults injected into a local cluster, each healed after a hold.

Faults (round robin, so a short run still sees every kind):

* ``kill_leader`` / ``kill_follower``: kill -9, restarted after the hold;
* ``pause_leader``: SIGSTOP of the leader long enough for an election, then SIGCONT;
* ``pause_followers``: SIGSTOP of every follower (the leader loses its quorum), then SIGCONT;
* ``restart_all``: kill -9 of every node, then all restarted;
* partitions, through the Raft link proxies (``om/chaos/links.py``), healed after
  the hold: ``partition_leader`` (the leader cut off from both followers, both
  ways: a minority leader), ``partition_follower`` (one follower cut off),
  ``bridge`` (the leader and one follower cut from each other; the other
  follower still reaches both) and ``oneway_leader`` (what the leader sends is
  lost, what it receives arrives).

Every injection is recorded (``docs/TRACES.md`` ``fault`` records) and healed
before the next one, and ``heal`` undoes anything left over, so a run always
ends with every node running.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from om.chaos.links import LinkProxies
from om.cluster import Cluster

PARTITIONS = ("partition_leader", "partition_follower", "bridge", "oneway_leader")
FAULTS = ("kill_leader", "pause_leader", "kill_follower", "pause_followers", "restart_all",
          *PARTITIONS)


@dataclass
class Nemesis:
    """Injects faults into ``cluster`` every ``interval_s`` until stopped."""

    cluster: Cluster
    faults: Sequence[str] = FAULTS
    interval_s: float = 4.0
    hold_s: float = 2.0
    links: LinkProxies | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    _paused: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        assert all(f in FAULTS for f in self.faults), self.faults
        assert self.links is not None or not set(self.faults) & set(PARTITIONS), \
            "partitions need the link proxies"
        assert self.interval_s > 0
        assert self.hold_s > 0

    def run(self, stop: threading.Event, faults_max: int = 1000) -> None:
        """Injects faults until ``stop`` is set or ``faults_max`` were injected."""
        if not self.faults:
            return
        for count in range(faults_max):
            if stop.wait(self.interval_s):
                return
            self.inject(self.faults[count % len(self.faults)], stop)

    def inject(self, action: str, stop: threading.Event) -> None:
        """Injects one fault, holds it, heals it."""
        handlers: dict[str, Callable[[threading.Event], None]] = {
            "kill_leader": lambda s: self._kill(action, self._leader(), s),
            "kill_follower": lambda s: self._kill(action, self._follower(), s),
            "pause_leader": lambda s: self._pause(action, [self._leader()], s),
            "pause_followers": lambda s: self._pause(action, self._followers(), s),
            "restart_all": self._restart_all,
            "partition_leader": lambda s: self._partition(action, s, "leader", both_ways=True),
            "partition_follower": lambda s: self._partition(action, s, "follower",
                                                            both_ways=True),
            "bridge": lambda s: self._bridge(s),
            "oneway_leader": lambda s: self._partition(action, s, "leader", both_ways=False),
        }
        handlers[action](stop)

    def heal(self) -> None:
        """Heals partitions, resumes paused nodes and starts stopped ones."""
        if self.links is not None:
            self.links.heal()
        for node_id in list(self._paused):
            self.cluster.signal_node(node_id, signal.SIGCONT)
        self._paused.clear()
        for node in self.cluster.nodes:
            if self.cluster.pid(node.id) is None:
                self.cluster.start_node(node.id)

    def _record(self, action: str, node: str) -> None:
        self.events.append({"t_ns": time.time_ns(), "action": action, "node": node})

    def _leader(self) -> str:
        leaders = [i.node_id for i in self.cluster.node_infos(timeout_s=0.5)
                   if i.role.startswith("LEADER")]
        return leaders[0] if leaders else self.cluster.nodes[0].id

    def _followers(self) -> list[str]:
        leader = self._leader()
        return [n.id for n in self.cluster.nodes if n.id != leader]

    def _follower(self) -> str:
        return self._followers()[0]

    def _kill(self, action: str, node_id: str, stop: threading.Event) -> None:
        self._record(action, node_id)
        self.cluster.kill_node(node_id)
        stop.wait(self.hold_s)
        self.cluster.start_node(node_id)

    def _pause(self, action: str, node_ids: list[str], stop: threading.Event) -> None:
        self._record(action, node_ids[0] if len(node_ids) == 1 else "")
        for node_id in node_ids:
            self.cluster.signal_node(node_id, signal.SIGSTOP)
            self._paused.add(node_id)
        stop.wait(self.hold_s)
        for node_id in node_ids:
            self.cluster.signal_node(node_id, signal.SIGCONT)
            self._paused.discard(node_id)

    def _partition(self, action: str, stop: threading.Event, whom: str,
                   both_ways: bool) -> None:
        """Cuts ``whom`` (the leader or a follower) off from the other nodes."""
        assert self.links is not None
        node_id = self._leader() if whom == "leader" else self._follower()
        self._record(action, node_id)
        for other in (n.id for n in self.cluster.nodes if n.id != node_id):
            self.links.cut(node_id, other)
            if both_ways:
                self.links.cut(other, node_id)
        stop.wait(self.hold_s)
        self.links.heal()

    def _bridge(self, stop: threading.Event) -> None:
        """The leader and one follower cannot reach each other; the other reaches both."""
        assert self.links is not None
        leader, follower = self._leader(), self._follower()
        self._record("bridge", "")
        self.links.cut_both_ways(leader, follower)
        stop.wait(self.hold_s)
        self.links.heal()

    def _restart_all(self, stop: threading.Event) -> None:
        self._record("restart_all", "")
        for node in self.cluster.nodes:
            self.cluster.kill_node(node.id)
        stop.wait(min(self.hold_s, 1.0))
        for node in self.cluster.nodes:
            self.cluster.start_node(node.id)
