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
  lost, what it receives arrives);
* the membership nemesis, through the same commands an operator runs
  (``om admin om ...``, ``om/cli/admin/membership.py``): ``member_transfer``
  (leadership to a random follower), ``member_maintenance`` (a node, the
  leader every other time, into maintenance for the hold, then back) and
  ``member_add_remove`` (a new node added through its learner phase, then
  decommissioned after the hold). A refused change is recorded with its reason,
  not a violation; what the checkers judge is the data;
* ``flow_switch`` (a cluster of ``execution = "switchable"`` OMs,
  docs/FLOW_SWITCH.md): SetFlows, as ``om admin om flow set`` sends it, moves a random
  set of the workloads' write types to the leader flow and the rest back to the old
  flow, under the load; every third switch moves all of them or none. Each switch is
  followed by a SetBucketProperty that changes nothing of each exactly-once bucket
  but rewrites its row, which the add workload's commits charge; the other switches
  put the two types in different flows: a rewrite executed over a commit of the
  other flow not yet applied would put the bucket's usage back, and the usage
  checker would see it. Nothing to heal: the next switch
  replaces it. A refused switch is recorded with its reason;
* disk stalls, through each journal's stall file (``[raft]
  unsafe_journal_stall``, test-only: the runner turns it on when they are
  chosen): ``disk_stall_leader`` / ``disk_stall_follower`` hang that node's
  journal syncs for the hold, as a disk stuck behind writeback would.

With ``calm_s`` (a soak), the run alternates a calm phase of ``calm_s``, where
faults that restart processes (``RESTARTS``) are skipped so a node lives long
enough for its memory growth to be judged, with a storm of ``storm_s`` where
every chosen fault runs.

Every injection is recorded (``docs/TRACES.md`` ``fault`` records) and healed
before the next one, and ``heal`` undoes anything left over, so a run always
ends with every node running.
"""

from __future__ import annotations

import contextlib
import io
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from om.chaos.links import LinkProxies
from om.chaos.workload import ADD_BUCKETS, VOLUME
from om.client import OMClient, OMClientError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.cluster import membership
from om.cluster.lifecycle import Cluster
from om.cluster.membership import Refused
from om.config import NodeAddress
from om.protocol import om_pb2

PARTITIONS = ("partition_leader", "partition_follower", "bridge", "oneway_leader")
FAULTS = ("kill_leader", "pause_leader", "kill_follower", "pause_followers", "restart_all",
          *PARTITIONS)
MEMBERSHIP = ("member_transfer", "member_maintenance", "member_add_remove")
ALL_FAULTS = (*FAULTS, *MEMBERSHIP)
DISK_STALLS = ("disk_stall_leader", "disk_stall_follower")
FLOW_SWITCH = "flow_switch"
KNOWN_FAULTS = (*ALL_FAULTS, *DISK_STALLS, FLOW_SWITCH)
# The write types the chaos workloads send (workload.py, fs_workload.py) and the
# leader's own purge steps: what the flow switch moves back and forth.
SWITCHED_TYPES = (om_pb2.CreateVolume, om_pb2.CreateBucket, om_pb2.CreateKey, om_pb2.CommitKey,
                  om_pb2.DeleteKey, om_pb2.RenameKey, om_pb2.CreateDirectory,
                  om_pb2.CreateFile, om_pb2.PurgeDirectories, om_pb2.PurgeKeys,
                  om_pb2.DeleteOpenKeys, om_pb2.SetBucketProperty)
SWITCH_ANSWER_S = 30.0
# Every fault that ends a node process: a kill, a learner added then decommissioned, and
# maintenance (the node is stopped for the hold and started again:
# om/cluster/membership.py); a calm phase skips them all.
RESTARTS = frozenset({"kill_leader", "kill_follower", "restart_all", "member_add_remove",
                      "member_maintenance"})
MEMBER_TIMEOUT_S = 60.0


@dataclass
class Nemesis:
    """Injects faults into ``cluster`` every ``interval_s`` until stopped."""

    cluster: Cluster
    faults: Sequence[str] = FAULTS
    interval_s: float = 4.0
    hold_s: float = 2.0
    links: LinkProxies | None = None
    calm_s: float = 0.0
    storm_s: float = 0.0
    events: list[dict[str, Any]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)   # faults that raised (run's docstring)
    seed: int = 0
    _paused: set[str] = field(default_factory=set)
    _stalled: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        assert all(f in KNOWN_FAULTS for f in self.faults), self.faults
        assert self.calm_s >= 0
        assert self.storm_s >= 0
        assert not self.calm_s or self.storm_s > 0, "a soak's cycle has a storm"
        assert self.links is not None or not set(self.faults) & set(PARTITIONS), \
            "partitions need the link proxies"
        assert self.interval_s > 0
        assert self.hold_s > 0

    def run(self, stop: threading.Event, faults_max: int = 1000) -> None:
        """Injects faults until ``stop`` is set or ``faults_max`` were injected. A fault
        that raises (a bug of the nemesis, not of the cluster) is recorded in ``failed``,
        healed, and the run goes on; the runner reports it as a violation, so a run
        never passes with fewer faults than it claims."""
        if not self.faults:
            return
        started = time.monotonic()
        turn = 0
        for _ in range(faults_max):
            if stop.wait(self.interval_s):
                return
            calm = self.calm(time.monotonic() - started)
            for _ in range(len(self.faults)):   # the next fault the phase allows
                action = self.faults[turn % len(self.faults)]
                turn += 1
                if not (calm and action in RESTARTS):
                    self._inject_or_record(action, stop)
                    break

    def _inject_or_record(self, action: str, stop: threading.Event) -> None:
        try:
            self.inject(action, stop)
        except Exception as error:
            self.failed.append(f"{action}: {type(error).__name__}: {error}")
            self._record(action, "", error=f"{type(error).__name__}: {error}")
            self.heal()

    def calm(self, elapsed_s: float) -> bool:
        """Whether a soak is in a calm phase ``elapsed_s`` into the run."""
        if not self.calm_s:
            return False
        return elapsed_s % (self.calm_s + self.storm_s) < self.calm_s

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
            "member_transfer": lambda s: self._member_transfer(),
            "member_maintenance": self._member_maintenance,
            "member_add_remove": self._member_add_remove,
            "disk_stall_leader": lambda s: self._stall(action, self._leader(), s),
            "disk_stall_follower": lambda s: self._stall(action, self._follower(), s),
            FLOW_SWITCH: lambda s: self._flow_switch(),
        }
        handlers[action](stop)

    def heal(self) -> None:
        """Heals partitions, resumes paused nodes and starts stopped ones."""
        if self.links is not None:
            self.links.heal()
        for node_id in list(self._paused):
            self.cluster.signal_node(node_id, signal.SIGCONT)
        self._paused.clear()
        for node_id in list(self._stalled):
            self.cluster.journal_stall_file(node_id).unlink(missing_ok=True)
        self._stalled.clear()
        for node in self.cluster.nodes:
            if self.cluster.pid(node.id) is None:
                self.cluster.start_node(node.id)

    def _record(self, action: str, node: str, **outcome: str) -> None:
        self.events.append({"t_ns": time.time_ns(), "action": action, "node": node,
                            **outcome})

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

    def _stall(self, action: str, node_id: str, stop: threading.Event) -> None:
        """Hangs ``node_id``'s journal syncs for the hold (its stall file exists)."""
        self._record(action, node_id)
        self.cluster.journal_stall_file(node_id).touch()
        self._stalled.add(node_id)
        stop.wait(self.hold_s)
        self.cluster.journal_stall_file(node_id).unlink(missing_ok=True)
        self._stalled.discard(node_id)

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
        leader = self._leader()   # read once: leadership may move between two reads
        follower = next(n.id for n in self.cluster.nodes if n.id != leader)
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

    def _flow_switch(self) -> None:
        """SetFlows with a random set of ``SWITCHED_TYPES`` (every third: all or none),
        through the client as ``om admin om flow set`` sends it, then the rewrite of
        each exactly-once bucket; records what it named, whether it was done, and the
        rewrites' statuses."""
        switches = sum(1 for e in self.events if e["action"] == FLOW_SWITCH)
        rng = random.Random(self.seed * 1_000 + switches)
        if switches % 3 == 2:
            types = list(SWITCHED_TYPES) if switches % 2 else []
        else:   # the bucket rewrite and the commits it races always in different flows
            pair = (om_pb2.SetBucketProperty, om_pb2.CommitKey)
            others = [t for t in SWITCHED_TYPES if t not in pair]
            types = [*rng.sample(others, rng.randrange(len(others))), pair[switches % 2]]
        names = ",".join(sorted(om_pb2.Type.Name(t) for t in types)) or "none"
        policy = RetryPolicy(deadline_s=SWITCH_ANSWER_S, attempt_timeout_s=5.0)
        touched: list[str] = []
        try:
            with OMClient(self.cluster.addresses, policy=policy,
                          tls=self.cluster.client_tls()) as client:
                response = client.call_raw(build.set_flows(types))
                if response.status == om_pb2.OK:
                    touched = [om_pb2.Status.Name(client.call_raw(
                        build.set_bucket_property(VOLUME, bucket)).status)
                        for bucket in ADD_BUCKETS]
        except OMClientError as error:
            self._record(FLOW_SWITCH, "", outcome="refused", types=names,
                         detail=f"no answer: {error}")
            return
        if response.status != om_pb2.OK:
            self._record(FLOW_SWITCH, "", outcome="refused", types=names,
                         detail=f"{om_pb2.Status.Name(response.status)} {response.message}")
            return
        self._record(FLOW_SWITCH, "", outcome="done", types=names, touched=",".join(touched))

    # -- membership ----------------------------------------------------------------------

    def _member(self, action: str, subject: str, change: Callable[[], None]) -> bool:
        """Runs one membership change as ``om admin om`` would; records its outcome."""
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                change()
        except Refused as refusal:
            self._record(action, subject, outcome="refused", detail=str(refusal))
            return False
        self._record(action, subject, outcome="done")
        return True

    def _member_transfer(self) -> None:
        follower = self._follower()
        self._member("member_transfer", follower,
                     lambda: membership.transfer_to(self.cluster, follower))

    def _member_maintenance(self, stop: threading.Event) -> None:
        node_id = self._leader() if len(self.events) % 2 else self._follower()
        if self._member("member_maintenance", node_id,
                        lambda: membership.maintenance_start(self.cluster, node_id, 0.0)):
            stop.wait(self.hold_s)
            self._member("member_maintenance_end", node_id, lambda: membership.maintenance_end(
                self.cluster, node_id, MEMBER_TIMEOUT_S))

    def _member_add_remove(self, stop: threading.Event) -> None:
        config = self.cluster.config
        node_id = f"om{len(config.nodes) + len(config.decommissioned) + 1}"
        base = om_cluster.free_port_base(1)
        node = NodeAddress(node_id, "127.0.0.1", base, base + om_cluster.RAFT_PORT_OFFSET, 0)
        if not self._member("member_add", node_id,
                            lambda: membership.add(self.cluster, node, MEMBER_TIMEOUT_S)):
            return
        stop.wait(self.hold_s)
        for _ in range(3):   # the ring goes back to its size (the link proxies know three)
            if self._member("member_decommission", node_id,
                            lambda: membership.decommission(self.cluster, node_id)):
                return
            time.sleep(self.hold_s)
