"""The simulated cluster: nodes, network, disks and faults on one loop, one seed.

Every decision is drawn from the run's random sources, derived from the seed
(``World.stream``), and every event is a timer on the virtual loop
(``om.sim.clock``). What happens is written to the trace digest: each message
delivered (its bytes), each disk sync, each fault, each client answer; the
short trace printed keeps the faults and leadership changes.

**The network** (``Network``) behaves as TCP does to pysyncobj: between two
live nodes a connection is up or down; on an up connection messages arrive in
order after a seeded delay (with rare long spikes); a reset drops what was in
flight and both ends see the connection close, then reconnect. A cut link
(partition, symmetric or one way) loses messages silently, and the ends notice
only when pysyncobj's connection timeout passes without data. Reordering
happens between connections, never within one; duplicated requests come from
clients that retry a call (same call id) after a lost answer.

**The disks** (``SimDisk`` in the consensus package): syncs complete in order
after a seeded latency, or after a stall ends.

**A crash** stops a node at once: its ticks, its tasks, its in-flight disk
work; its journal keeps what was synced (maybe a torn piece of the rest, which
the journal's decoder drops); its store keeps every batch apply wrote (RocksDB
writes each batch whole). A restart builds the node again from both.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import pickle
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from om.config import Limits, NodeAddress, Raft
from om.consensus.pysyncobj.simulated import SimDisk, SimRaftReplicator, address_id
from om.flows.leader_flow import LeaderFlow, leader_service
from om.flows.settings import LeaderConfig
from om.flows.template import RequestService
from om.observe.tracing import NullTracer
from om.protocol import om_pb2
from om.schema.seam import Seam
from om.sim.clock import EPOCH_S, VirtualClock, VirtualLoop
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.digests import Digests, derive_key
from om.statemachine.store import Store, StoreMemory

NODE: contextvars.ContextVar[str] = contextvars.ContextVar("om_sim_node", default="")
TICK_S = 0.01              # a node's periodic tick (pysyncobj's timers run in ticks)
KICK_S = 0.0002            # a tick soon after a message, a sync or a submit
CONNECT_S = (0.05, 0.5)    # a reconnection's delay (pysyncobj retries every 0.5 s)
CONNECTION_TIMEOUT_S = 3.5  # pysyncobj's: no data for this long closes a connection
# A node's RocksDB budget, as a node composes it (om/node/parts.py). With 8 MiB of
# memtables the write buffer manager flushed every table's few rows about 1,200
# times a seed and compacted 250 times (seed 1): a fifth of its CPU, invisible to
# what is simulated (every batch is in the store either way).
LIMITS = Limits()
RAFT = Raft(election_timeout_min_s=0.4, election_timeout_max_s=0.8,
            leader_fallback_timeout_s=2.0, compaction_min_entries=10**9,
            compaction_min_time_s=10.0**9, separate_process=False, fsync=True)


@dataclass(frozen=True)
class Faults:
    """How often each fault happens (per second of virtual time) and how hard."""

    crash_rate: float = 0.3
    pause_rate: float = 0.15
    clock_jump_rate: float = 0.1
    partition_rate: float = 0.2
    reset_rate: float = 0.3
    stall_rate: float = 0.2
    transfer_rate: float = 0.15
    spike_chance: float = 0.01     # a message delayed 5-50 ms (a retransmission)


class _NoSnapshots:
    """The simulator runs without Raft snapshots (docs/RELIABILITY.md)."""

    def serialize(self, tmp_file: str, raft_data: object) -> None:
        raise AssertionError("no snapshots in the simulator")

    def deserialize(self, file_name: str) -> object:
        raise AssertionError("no snapshots in the simulator")


class World:
    """The loop, the clock, the random streams, the trace."""

    def __init__(self, seed: int, base: Path, trace_limit: int = 200) -> None:
        self.seed = seed
        self.base = base
        self.clock = VirtualClock()
        self.loop = VirtualLoop(self.clock)
        self.digest = hashlib.sha256()
        self.trace: list[str] = []
        self.trace_limit = trace_limit
        self.events = 0
        self.tasks: dict[str, list[asyncio.Task[Any]]] = {}
        self.paused_until: dict[str, float] = {}    # node name -> end of its pause
        self.skew: dict[str, float] = {}            # node name -> its clock's jumps
        self._held = 0
        # the process's global random functions draw from it during a run (om.sim.clock
        # ``seam``), and so does every node's ``Seam``: one order of draws per seed
        self.global_random = self.stream("global-random")
        self.loop.set_task_factory(self._task)

    def stream(self, name: str) -> random.Random:
        """A random source of its own for one concern, derived from the seed."""
        digest = hashlib.sha256(f"{self.seed}/{name}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def _task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        owner = NODE.get()
        if owner:
            owned = self.tasks.setdefault(owner, [])
            owned[:] = [t for t in owned if not t.done()]
            owned.append(task)
        return task

    def at(self, delay: float, owner: str, callback: Callable[[], None]) -> None:
        """Runs ``callback`` after ``delay`` virtual seconds, as ``owner`` (its tasks are
        that node's, cancelled when it crashes)."""
        context = contextvars.copy_context()
        context.run(NODE.set, owner)
        self.loop.call_at(self.clock.now + delay, self._run_as, owner, callback,
                          context=context)

    def _run_as(self, owner: str, callback: Callable[[], None]) -> None:
        """Runs an event of ``owner``, or, while that node is paused, holds it (in order)
        until the pause ends: its ticks, messages, disk completions and requests."""
        until = self.paused_until.get(owner, 0.0)
        if until > self.clock.now:
            self._held += 1
            self.loop.call_at(until + self._held * 1e-12, self._run_as, owner, callback,
                              context=contextvars.copy_context())
            return
        callback()

    def as_node(self, owner: str, work: Callable[[], None]) -> None:
        """Runs ``work`` now as ``owner``: a call into a node's Raft code from an event
        of no node (a reconnection, the end of a partition) must read that node's
        clock."""
        context = contextvars.copy_context()
        context.run(NODE.set, owner)
        context.run(work)

    def raft_time(self) -> float:
        """pysyncobj's clock for the node whose event runs: the virtual clock plus the
        forward jumps that node's clock took."""
        return self.clock.now + self.skew.get(NODE.get(), 0.0)

    def record(self, text: str, shown: bool = False) -> None:
        """Adds an event to the digest (and to the printed trace when ``shown``)."""
        self.events += 1
        self.digest.update(f"{self.clock.now:.9f} {text}\n".encode())
        if shown and len(self.trace) < self.trace_limit:
            self.trace.append(f"{self.clock.now:9.4f}s {text}")

    def cancel_tasks(self, owner: str) -> None:
        for task in self.tasks.pop(owner, []):
            task.cancel()


class Network:
    """Connections between nodes, as pysyncobj's TCP would present them."""

    def __init__(self, world: World, faults: Faults) -> None:
        self.world = world
        self.faults = faults
        self.rng = world.stream("network")
        self.nodes: dict[str, SimNode] = {}
        self.up: set[frozenset[str]] = set()
        self.epoch: dict[frozenset[str], int] = {}
        self.cut: set[tuple[str, str]] = set()      # (from, to) links losing messages
        self.last_arrival: dict[tuple[str, str], float] = {}
        self.delivered = 0
        self.dropped = 0
        self.disks = _Disks(world, self)

    def _pair(self, a: str, b: str) -> frozenset[str]:
        return frozenset((a, b))

    def delay(self) -> float:
        if self.rng.random() < self.faults.spike_chance:
            return self.rng.uniform(0.005, 0.05)
        return self.rng.uniform(0.0001, 0.0015)

    def send(self, source: str, target: str, message: Any) -> None:
        pair = self._pair(source, target)
        if pair not in self.up:
            return
        data = pickle.dumps(message, protocol=5)   # a copy, as the real wire makes one
        if (source, target) in self.cut:
            self.dropped += 1
            return
        epoch = self.epoch[pair]
        now = self.world.clock.now
        arrival = max(now + self.delay(), self.last_arrival.get((source, target), 0.0) + 1e-7)
        self.last_arrival[(source, target)] = arrival

        def arrive() -> None:
            node = self.nodes[target]
            if self.epoch.get(pair) != epoch or pair not in self.up or not node.alive:
                return
            self.delivered += 1
            self.world.record(f"msg {source}>{target} {hashlib.sha256(data).hexdigest()[:16]}")
            node.raft.raft.transport.deliver(source, pickle.loads(data))
            node.kick()

        self.world.at(arrival - now, self.nodes[target].name, arrive)

    def connect(self, a: str, b: str) -> None:
        """Brings the connection a-b up (both alive, the link not cut)."""
        pair = self._pair(a, b)
        na, nb = self.nodes[a], self.nodes[b]
        if pair in self.up or not (na.alive and nb.alive) or (a, b) in self.cut \
                or (b, a) in self.cut:
            return
        self.up.add(pair)
        self.epoch[pair] = self.epoch.get(pair, 0) + 1
        self.last_arrival.pop((a, b), None)
        self.last_arrival.pop((b, a), None)
        self.world.record(f"connect {a}-{b}")
        self.world.as_node(na.name, lambda: na.raft.raft.transport.connected(b))
        self.world.as_node(nb.name, lambda: nb.raft.raft.transport.connected(a))

    def disconnect(self, a: str, b: str, reconnect: bool = True) -> None:
        """Closes the connection a-b: both ends told, what was in flight lost."""
        pair = self._pair(a, b)
        if pair not in self.up:
            return
        self.up.discard(pair)
        self.epoch[pair] += 1
        self.world.record(f"disconnect {a}-{b}")
        for here, there in ((a, b), (b, a)):
            node = self.nodes[here]
            if node.alive:
                self.world.as_node(node.name, partial(_disconnected, node, there))
        if reconnect:
            self.reconnect_later(a, b)

    def reconnect_later(self, a: str, b: str) -> None:
        def retry() -> None:
            if self._pair(a, b) in self.up:
                return
            if (a, b) in self.cut or (b, a) in self.cut:
                self.world.at(0.5, "", retry)    # pysyncobj keeps dialling
                return
            self.connect(a, b)
        self.world.at(self.rng.uniform(*CONNECT_S), "", retry)

    def cut_links(self, links: set[tuple[str, str]]) -> None:
        self.cut |= links
        for a, b in links:
            pair = self._pair(a, b)
            epoch = self.epoch.get(pair, 0)

            def time_out(a: str = a, b: str = b, pair: frozenset[str] = pair,
                         epoch: int = epoch) -> None:
                if self.epoch.get(pair) == epoch and ((a, b) in self.cut or (b, a) in self.cut):
                    self.disconnect(a, b)
            self.world.at(CONNECTION_TIMEOUT_S, "", time_out)

    def heal(self, links: set[tuple[str, str]]) -> None:
        self.cut -= links


def _disconnected(node: SimNode, peer: str) -> None:
    node.raft.raft.transport.disconnected(peer)
    node.kick()


class SimNode:
    """One OM node: store, state machine, Raft and the leader service, as composed by
    ``om/node/node.py`` for the leader flow (no integrity service, snapshots, audit,
    metrics endpoint or checkpoint transfer)."""

    def __init__(self, world: World, network: Network, address: NodeAddress,
                 addresses: tuple[NodeAddress, ...], rng: random.Random) -> None:
        self.world = world
        self.network = network
        self.address = address
        self.addresses = addresses
        self.id = address_id(address.raft_address)
        self.name = address.id
        self.disk = SimDisk(self.id, network.disks)
        self.dir = world.base / address.id
        self.alive = False
        self.life = 0
        self._kicked = False
        self._role_seen: tuple[bool, int] = (False, 0)
        self._rng = rng
        self.store: Store | None = None
        self.machine: StateMachine | None = None
        self.raft: SimRaftReplicator = None  # type: ignore[assignment]
        self.leader: RequestService[LeaderFlow] = None    # type: ignore[assignment]

    async def start(self) -> None:
        """Opens the store and builds the node's parts (inside the node's context); a
        node already running is left alone (a restart the nemesis scheduled may come
        after the end of the run restarted it)."""
        if self.alive:
            return
        self.life += 1
        self.world.paused_until.pop(self.name, None)
        self.store = Store(self.dir / "db", memory=StoreMemory(
            LIMITS.store_memtable_bytes, LIMITS.store_block_cache_bytes))
        Digests.attach(self.store, derive_key("sim"), 8, 4)
        self.machine = StateMachine(self.store)
        self.raft = SimRaftReplicator(self.address, self.addresses, self.dir, RAFT,
                                      self.apply_entry, _NoSnapshots(), self.barrier_entry,
                                      1 << 20, self.network, self.disk)
        self.leader = leader_service(self.name, self.store, self.machine, self.raft,
                                     LeaderConfig(), NullTracer(), self.seam())
        self.raft.on_leadership_lost(self.leader.leadership_lost)
        self.alive = True
        await self.leader.start()
        await self.raft.start()
        self.world.record(f"start {self.name} life {self.life}", shown=self.life > 1)
        self._schedule_tick(self.life)

    def clock_ms(self) -> int:
        return int((EPOCH_S + self.world.clock.now) * 1000)

    def seam(self) -> Seam:
        """The node's clocks and randomness: the virtual clock (its wall clock ticks in
        milliseconds, the stamps' unit) and the run's seeded random source."""
        world = self.world
        return Seam(wall_ns=lambda: self.clock_ms() * 1_000_000,
                    elapsed_ns=lambda: int(world.clock.now * 1e9),
                    randomness=lambda n: world.global_random.getrandbits(8 * n).to_bytes(n, "big"))

    def barrier_entry(self, term: int) -> bytes:
        return log_entry.encode_batch(om_pb2.PersistDbBatch(
            term=term, leader_id=self.name, timestamp_ms=self.clock_ms()))

    def apply_entry(self, position: int, entry: bytes) -> ApplyResult:
        assert self.machine is not None
        result = self.machine.apply_entry(position, entry)
        self.world.record(f"apply {self.name} {position} {result.applied}")
        return result

    def _schedule_tick(self, life: int) -> None:
        def tick() -> None:
            if self.alive and self.life == life:
                self.tick()
                self._schedule_tick(life)
        self.world.at(TICK_S * self._rng.uniform(0.9, 1.1), self.name, tick)

    def tick(self) -> None:
        self._kicked = False
        self.raft.tick()
        # the two fields the trace needs, not ``role()``'s whole view (the leader's
        # address and connection, the barrier): 3.6 % of a seed's time at every tick
        raft = self.raft.raft
        seen = (raft.om_is_leader(), int(raft.raftCurrentTerm))
        if seen != self._role_seen:
            self._role_seen = seen
            if seen[0]:
                self.world.record(f"{self.name} leads term {seen[1]}", shown=True)

    def kick(self) -> None:
        """A tick soon (a poll woken by a message, a sync, a submitted entry)."""
        if self._kicked or not self.alive:
            return
        self._kicked = True
        life = self.life

        def tick() -> None:
            if self.alive and self.life == life and self._kicked:
                self.tick()
        self.world.at(KICK_S, self.name, tick)

    def submit(self, request: om_pb2.OMRequest) -> asyncio.Future[om_pb2.OMResponse]:
        answer = self.leader.submit(request, "sim")
        self.kick()
        return answer

    def crash(self, rng: random.Random) -> str:
        """Stops the node at once: what was not synced may be lost."""
        self.alive = False
        self.world.cancel_tasks(self.name)
        for other in self.network.nodes.values():
            if other is not self:
                self.network.disconnect(self.id, other.id, reconnect=False)
        kept = self.disk.crash(rng)
        assert self.store is not None
        self.store.close()
        self.store = None
        return kept

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
        shutil.rmtree(self.dir, ignore_errors=True)


class _Disks:
    """Completes each node's disk work in order, after a seeded latency or a stall."""

    def __init__(self, world: World, network: Network) -> None:
        self.world = world
        self.network = network
        self.rng = world.stream("disk")
        self.last: dict[str, float] = {}
        self.stalled_until: dict[str, float] = {}

    def disk_done(self, node: str, work: Callable[[], None]) -> None:
        now = self.world.clock.now
        done = max(now + self.rng.uniform(0.0002, 0.002), self.last.get(node, 0.0) + 1e-7,
                   self.stalled_until.get(node, 0.0))
        self.last[node] = done
        owner = self.network.nodes[node]

        def complete() -> None:
            work()
            self.world.record(f"sync {owner.name}")
            if owner.alive:
                owner.kick()
        self.world.at(done - now, owner.name, complete)

