"""One seed: a three-node cluster, a client workload, faults, and the checkers' verdict.

The workload (``Clients``) is the chaos workload's, on simulated clients: register
puts (CreateKey + CommitKey with a value unique in the run), gets and deletes
of a few keys; adds (a fresh key committed into one of two exactly-once
buckets, the commit sometimes sent twice with the same call id, as after a
lost answer: 10 % of adds, and always the run's first, so that every run
exercises the retry cache); renames of fresh keys. A client retries a call with the same call
id on another node after a timeout or a NOT_LEADER / LEADER_NOT_READY answer.

Faults (``Nemesis``) are drawn from the seed while the workload runs: node
crashes (the unsynced journal tail lost or torn) and restarts, pauses (the
node's events held until it resumes), forward jumps of a node's Raft clock,
partitions (one node cut off, or one direction of one link), connection
resets, disk stalls and leadership transfers. Then everything heals, the cluster settles,
and the checkers of ``om.chaos.checkers`` judge the history (linearizable
registers, no lost acknowledged write, exactly-once adds, increasing unique
object ids, byte-identical replicas), with two more of the simulator's own:
every acknowledged rename took effect, and each bucket's usage equals its keys.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from om.chaos.checkers import Usage, Violation, run_all
from om.chaos.history import F, History, Op, Outcome
from om.client import requests as build
from om.client.retry_policy import RETRYABLE
from om.config import NodeAddress
from om.consensus.pysyncobj.simulated import take_over
from om.protocol import om_pb2
from om.protocol.client_version import CURRENT_VERSION
from om.sim.clock import seam
from om.sim.world import Faults, Network, SimNode, World

VOLUME = "sim"
REGISTER = "reg"
ADD_BUCKETS = ("add0", "add1")
RENAMES = "ren"
REGISTER_KEYS = 6
CLIENTS = 8
ATTEMPT_TIMEOUT_S = 1.0
CALL_DEADLINE_S = 12.0
SETTLE_S = 60.0
AMBIGUOUS = frozenset({om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY, om_pb2.SERVER_BUSY,
                       om_pb2.TIMEOUT, om_pb2.INTERNAL_ERROR})


@dataclass
class Result:
    """What one seed did and what the checkers said."""

    seed: int
    digest: str
    violations: list[Violation]
    trace: list[str]
    ops: int
    requests: int
    virtual_s: float
    faults: dict[str, int] = field(default_factory=dict)
    events: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


class Clients:
    """The workload's clients and the history they record."""

    def __init__(self, world: World, nodes: list[SimNode], network: Network,
                 budget: int) -> None:
        self.world = world
        self.nodes = nodes
        self.network = network
        self.rng = world.stream("clients")
        self.budget = budget
        self.requests = 0
        self.ops: list[Op] = []
        self.renames: list[tuple[str, str, Outcome]] = []
        self._op_ids = 0
        self._values = 0
        self._call_ids = 0
        self._targets = [0] * CLIENTS
        self.duplicates = 0     # commits sent twice on purpose (same call id)

    def _now_ns(self) -> int:
        return int(self.world.clock.now * 1e9)

    async def attempt(self, node: SimNode, request: om_pb2.OMRequest) -> om_pb2.OMResponse | None:
        """One attempt at one node; None when no answer came in time."""
        loop = asyncio.get_running_loop()
        got: asyncio.Future[om_pb2.OMResponse] = loop.create_future()
        data = request.SerializeToString()
        self.requests += 1

        def arrive() -> None:
            if not node.alive:
                return
            life = node.life
            answer = node.submit(om_pb2.OMRequest.FromString(data))

            def answered(done: asyncio.Future[om_pb2.OMResponse]) -> None:
                if done.cancelled() or not node.alive or node.life != life:
                    return
                if self.rng.random() < 0.02:
                    self.world.record(f"answer lost {request.client_id}/{request.call_id}")
                    return    # the client times out and retries (same call id)
                reply = done.result().SerializeToString()

                def deliver() -> None:
                    if not got.done():
                        got.set_result(om_pb2.OMResponse.FromString(reply))
                self.world.at(self.network.delay(), "", deliver)
            answer.add_done_callback(answered)

        self.world.at(self.network.delay(), node.name, arrive)
        try:
            return await asyncio.wait_for(got, ATTEMPT_TIMEOUT_S)
        except TimeoutError:
            return None

    async def call(self, process: int, request: om_pb2.OMRequest,
                   ) -> tuple[om_pb2.OMResponse | None, int]:
        """The final answer (None: gave up) and how many retries it took."""
        if not request.call_id:
            self._call_ids += 1
            request.call_id = self._call_ids
        request.client_id = f"sim-{process}"
        request.client_version = CURRENT_VERSION
        request.user = "sim"
        deadline = self.world.clock.now + CALL_DEADLINE_S
        retries = 0
        while self.world.clock.now < deadline:
            node = self.nodes[self._targets[process]]
            response = await self.attempt(node, request)
            if response is not None and response.status not in RETRYABLE:
                return response, retries
            retries += 1
            hint = response.leader_node_id if response is not None else ""
            names = [n.name for n in self.nodes]
            self._targets[process] = (names.index(hint) if hint in names
                                      else (self._targets[process] + 1) % len(self.nodes))
            await asyncio.sleep(self.rng.uniform(0.01, 0.1))
        return None, retries

    def _record(self, process: int, f: F, key: str, value: int | None, started: int,
                outcome: Outcome, retries: int, object_id: int = 0) -> None:
        self._op_ids += 1
        extra = {"object_id": object_id} if object_id and outcome is Outcome.OK else {}
        self.ops.append(Op(process, self._op_ids, f, key,
                           value if outcome is Outcome.OK or f is not F.GET else None,
                           started, self._now_ns(), outcome, None, retries, extra))
        self.world.record(f"op {f} {key} {value} {outcome} r{retries} id{object_id}")

    async def setup(self) -> None:
        for request in [build.create_volume(VOLUME), build.create_bucket(VOLUME, REGISTER),
                        *(build.create_bucket(VOLUME, b) for b in ADD_BUCKETS),
                        build.create_bucket(VOLUME, RENAMES)]:
            response, _ = await self.call(0, request)
            assert response is not None
            assert response.status in (om_pb2.OK, om_pb2.VOLUME_ALREADY_EXISTS,
                                       om_pb2.BUCKET_ALREADY_EXISTS), response

    async def run(self, process: int) -> None:
        while self.requests < self.budget:
            choice = self.rng.random()
            if choice < 0.3:
                await self.put(process)
            elif choice < 0.5:
                await self.get(process)
            elif choice < 0.6:
                await self.delete(process)
            elif choice < 0.85:
                await self.add(process)
            else:
                await self.rename(process)

    def _register_key(self) -> str:
        return f"k{self.rng.randrange(REGISTER_KEYS)}"

    async def _open_commit(self, process: int, bucket: str, key: str, size: int,
                           twice: bool = False) -> tuple[Outcome, int, int]:
        opened, retries = await self.call(process, build.create_key(VOLUME, bucket, key, size, 1))
        if opened is None or opened.status != om_pb2.OK:
            return (Outcome.INFO if opened is None else _outcome(opened)), retries, 0
        commit = build.commit_key(VOLUME, bucket, key, opened.create_key.client_session_id, size)
        committed, more = await self.call(process, commit)
        retries += more
        if twice and committed is not None:
            self.world.record(f"duplicate send {process}/{commit.call_id}")
            committed, more = await self.call(process, commit)    # same call id
            retries += 1 + more
        outcome = Outcome.INFO if committed is None else _outcome(committed)
        object_id = committed.commit_key.key_info.object_id if committed is not None else 0
        return outcome, retries, object_id

    async def put(self, process: int) -> None:
        key = self._register_key()
        self._values += 1
        value = self._values
        started = self._now_ns()
        outcome, retries, object_id = await self._open_commit(process, REGISTER, key, value)
        self._record(process, F.PUT, key, value, started, outcome, retries, object_id)

    async def get(self, process: int) -> None:
        key = self._register_key()
        started = self._now_ns()
        response, retries = await self.call(process, build.lookup_key(VOLUME, REGISTER, key))
        if response is not None and response.status == om_pb2.OK:
            self._record(process, F.GET, key, response.lookup_key.key_info.data_size, started,
                         Outcome.OK, retries)
        elif response is not None and response.status == om_pb2.KEY_NOT_FOUND:
            self._record(process, F.GET, key, None, started, Outcome.OK, retries)
        else:
            self._record(process, F.GET, key, None, started, Outcome.FAIL, retries)

    async def delete(self, process: int) -> None:
        key = self._register_key()
        started = self._now_ns()
        response, retries = await self.call(process, build.delete_key(VOLUME, REGISTER, key))
        if response is not None and response.status == om_pb2.KEY_NOT_FOUND:
            self._record(process, F.GET, key, None, started, Outcome.OK, retries)
            return
        outcome = Outcome.INFO if response is None else _outcome(response)
        self._record(process, F.DELETE, key, None, started, outcome, retries)

    async def add(self, process: int) -> None:
        bucket = self.rng.choice(ADD_BUCKETS)
        delta = self.rng.randrange(1, 1000)
        self._op_ids += 1
        key = f"p{process}-{self._op_ids}"
        started = self._now_ns()
        twice = self.rng.random() < 0.1 or not self.duplicates   # one at least: evidence
        self.duplicates += twice
        outcome, retries, object_id = await self._open_commit(process, bucket, key, delta, twice)
        self._record(process, F.ADD, bucket, delta, started, outcome, retries, object_id)

    async def rename(self, process: int) -> None:
        self._op_ids += 1
        source, target = f"r{self._op_ids}", f"r{self._op_ids}-renamed"
        outcome, _, _ = await self._open_commit(process, RENAMES, source, 7)
        if outcome is not Outcome.OK:
            return
        response, _ = await self.call(process, build.rename_key(VOLUME, RENAMES, source, target))
        self.renames.append((source, target, Outcome.INFO if response is None
                             else _outcome(response)))


def _outcome(response: om_pb2.OMResponse) -> Outcome:
    if response.status == om_pb2.OK:
        return Outcome.OK
    return Outcome.INFO if response.status in AMBIGUOUS else Outcome.FAIL


class Nemesis:
    """Draws faults from the seed while the workload runs."""

    def __init__(self, world: World, nodes: list[SimNode], network: Network,
                 faults: Faults) -> None:
        self.world = world
        self.nodes = nodes
        self.network = network
        self.faults = faults
        self.rng = world.stream("faults")
        self.counts: dict[str, int] = {}
        self.down: set[str] = set()
        self.cut: set[tuple[str, str]] = set()

    def _count(self, kind: str, text: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.world.record(text, shown=True)

    async def run(self, stop: asyncio.Event) -> None:
        f = self.faults
        kinds: list[tuple[str, float, Callable[[], None]]] = [
            ("crash", f.crash_rate, self.crash), ("partition", f.partition_rate, self.partition),
            ("pause", f.pause_rate, self.pause), ("clock", f.clock_jump_rate, self.clock_jump),
            ("reset", f.reset_rate, self.reset), ("stall", f.stall_rate, self.stall),
            ("transfer", f.transfer_rate, self.transfer)]
        total = sum(rate for _, rate, _ in kinds)
        if total <= 0:
            return
        while not stop.is_set():
            await asyncio.sleep(self.rng.expovariate(total))
            pick = self.rng.uniform(0, total)
            for _, rate, action in kinds:
                pick -= rate
                if pick <= 0:
                    action()
                    break

    def crash(self) -> None:
        alive = [n for n in self.nodes if n.alive]
        if self.down or len(alive) < len(self.nodes):
            return
        node = self.rng.choice(alive)
        kept = node.crash(self.rng)
        self.down.add(node.name)
        self._count("crash", f"crash {node.name}: journal keeps {kept}")
        self.world.at(self.rng.uniform(0.2, 3.0), node.name, lambda: self._restart(node))

    def _restart(self, node: SimNode) -> None:
        async def start() -> None:
            await node.start()
            self.down.discard(node.name)
            for other in self.nodes:
                if other is not node and other.alive:
                    self.network.reconnect_later(node.id, other.id)
        asyncio.get_running_loop().create_task(start())

    def pause(self) -> None:
        """The node stops (SIGSTOP, a VM pause): its events wait until it resumes."""
        node = self.rng.choice([n for n in self.nodes if n.alive] or self.nodes)
        until = self.world.clock.now + self.rng.uniform(0.2, 4.0)
        self.world.paused_until[node.name] = max(self.world.paused_until.get(node.name, 0.0),
                                                 until)
        self._count("pause", f"pause {node.name} until {until:.3f}s")

    def clock_jump(self) -> None:
        """The node's monotonic clock jumps forward (as after a VM was suspended)."""
        node = self.rng.choice(self.nodes)
        jump = self.rng.uniform(0.3, 3.0)
        self.world.skew[node.name] = self.world.skew.get(node.name, 0.0) + jump
        self._count("clock", f"clock of {node.name} jumps {jump:.3f}s ahead")

    def partition(self) -> None:
        ids = [n.id for n in self.nodes]
        if self.rng.random() < 0.5:
            alone = self.rng.choice(ids)
            links = {(a, b) for a in ids for b in ids if a != b and alone in (a, b)}
            text = f"partition: {self._name(alone)} cut off"
        else:
            a, b = self.rng.sample(ids, 2)
            links = {(a, b)}
            text = f"partition: {self._name(a)} -> {self._name(b)} one way"
        self.network.cut_links(links)
        self._count("partition", text)

        def heal() -> None:
            self.network.heal(links)
            self.world.record(f"heal {sorted(links)}", shown=True)
            for x, y in links:
                self.network.reconnect_later(x, y)
        self.world.at(self.rng.uniform(0.5, 5.0), "", heal)

    def reset(self) -> None:
        a, b = self.rng.sample([n.id for n in self.nodes], 2)
        self._count("reset", f"connection reset {self._name(a)}-{self._name(b)}")
        self.network.disconnect(a, b)

    def stall(self) -> None:
        node = self.rng.choice(self.nodes)
        until = self.world.clock.now + self.rng.uniform(0.05, 2.0)
        disks = self.network.disks
        disks.stalled_until[node.id] = max(disks.stalled_until.get(node.id, 0.0), until)
        self._count("stall", f"disk stall {node.name} until {until:.3f}s")

    def transfer(self) -> None:
        for node in self.nodes:
            if node.alive and node.raft.role().is_leader:
                node.raft.raft.om_transfer_requested = True
                self._count("transfer", f"leadership transfer asked of {node.name}")
                return

    def _name(self, node_id: str) -> str:
        return next(n.name for n in self.nodes if n.id == node_id)


async def _settle(world: World, nodes: list[SimNode], network: Network) -> bool:
    """Heals everything and waits until every node applied the leader's commit index."""
    network.heal(set(network.cut))
    for a in nodes:
        for b in nodes:
            if a.name < b.name:
                network.connect(a.id, b.id)
    deadline = world.clock.now + SETTLE_S
    while world.clock.now < deadline:
        await asyncio.sleep(0.05)
        leaders = [n for n in nodes if n.alive and n.raft.role().ready]
        if len(leaders) != 1:
            continue
        commit = leaders[0].raft.role().commit_index
        machines = [n.machine for n in nodes]
        if all(m is not None and m.applied_index == commit for m in machines):
            return True
    for node in nodes:    # why not: each node's view, for the trace
        role = node.raft.role()
        status = node.raft.raft.getStatus()
        world.record(f"unsettled {node.name}: alive {node.alive} leader {role.is_leader} "
                     f"ready {role.ready} term {role.term} commit {role.commit_index} "
                     f"applied {node.machine.applied_index if node.machine else None} "
                     f"log {status.get('log_len')} leader {status.get('leader')} "
                     f"paused until {world.paused_until.get(node.name, 0.0):.3f} "
                     f"skew {world.skew.get(node.name, 0.0):.3f} "
                     f"connected {sorted(str(n) for n in node.raft.raft.transport.peers())}",
                     shown=True)
    return False


async def _observe(clients: Clients) -> tuple[dict[str, int | None], dict[str, Usage],
                                              list[Violation]]:
    """The final reads: register values, bucket usage, renames, usage against keys."""
    final: dict[str, int | None] = {}
    for number in range(REGISTER_KEYS):
        key = f"k{number}"
        response, _ = await clients.call(0, build.lookup_key(VOLUME, REGISTER, key))
        assert response is not None
        final[key] = (response.lookup_key.key_info.data_size
                      if response.status == om_pb2.OK else None)
    usage: dict[str, Usage] = {}
    violations: list[Violation] = []
    present: set[str] = set()
    for bucket in (REGISTER, *ADD_BUCKETS, RENAMES):
        info, _ = await clients.call(0, build.info_bucket(VOLUME, bucket))
        listed, _ = await clients.call(0, build.list_keys(VOLUME, bucket, max_keys=10_000))
        assert info is not None
        assert listed is not None
        bucket_info = info.info_bucket.bucket_info
        usage[bucket] = Usage(bucket_info.used_bytes, bucket_info.used_namespace)
        keys = listed.list_keys.key_info
        if bucket == RENAMES:
            present = {k.key_name for k in keys}
        size = sum(k.data_size * max(1, k.replication_factor) for k in keys)
        if (bucket_info.used_namespace, bucket_info.used_bytes) != (len(keys), size):
            violations.append(Violation("quota", "usage_not_keys",
                                        f"usage {bucket_info.used_namespace} keys / "
                                        f"{bucket_info.used_bytes} B, keys hold {len(keys)} / "
                                        f"{size} B", bucket))
    for source, target, outcome in clients.renames:
        if outcome is Outcome.OK and (source in present or target not in present):
            violations.append(Violation("renames", "rename_lost",
                                        f"{source} -> {target} acknowledged", source))
        if target in present and source in present:
            violations.append(Violation("renames", "both_names", f"{source} and {target}"))
    return final, {b: usage[b] for b in ADD_BUCKETS}, violations


async def _main(world: World, requests: int, faults: Faults) -> Result:
    network = Network(world, faults)
    names = ("om1", "om2", "om3")
    addresses = tuple(NodeAddress(name, "127.0.0.1", 9862 + i, 9872 + i)
                      for i, name in enumerate(names))
    node_rng = world.stream("nodes")
    nodes = [SimNode(world, network, a, addresses, node_rng) for a in addresses]
    for node in nodes:
        network.nodes[node.id] = node
    for node in nodes:
        await _as(world, node.name, node.start())
    for a in nodes:
        for b in nodes:
            if a.name < b.name:
                network.connect(a.id, b.id)
    clients = Clients(world, nodes, network, requests)
    await clients.setup()
    stop = asyncio.Event()
    nemesis = Nemesis(world, nodes, network, faults)
    chaos = asyncio.get_running_loop().create_task(nemesis.run(stop))
    await asyncio.gather(*(clients.run(p) for p in range(CLIENTS)))
    stop.set()
    await chaos
    for node in nodes:
        if not node.alive:
            await _as(world, node.name, node.start())
    violations: list[Violation] = []
    if not await _settle(world, nodes, network):
        violations.append(Violation("settle", "no_quiescence",
                                    f"the cluster did not settle within {SETTLE_S} s"))
        final, usage = None, None
    else:
        final, usage, more = await _observe(clients)
        violations.extend(more)
        if not await _settle(world, nodes, network):   # the reads' rounds are entries too
            violations.append(Violation("settle", "no_quiescence", "after the final reads"))
    digests = {n.name: n.store.digests() for n in nodes if n.store is not None}
    for name, per_table in sorted(digests.items()):
        world.record(f"digest {name} {sorted(per_table.items())}")
    history = History(tuple(clients.ops))
    violations.extend(run_all(history, final_state=final, observed_usage=usage,
                              digests=digests if final is not None else None))
    for node in nodes:
        node.alive = False        # no more ticks; then nothing of theirs may stay pending
    current = asyncio.current_task()
    for _ in range(3):
        for task in asyncio.all_tasks():
            if task is not current:
                task.cancel()
        await asyncio.sleep(0)
    for node in nodes:
        node.close()
    return Result(world.seed, world.digest.hexdigest(), violations, world.trace, len(history),
                  clients.requests, world.clock.now, nemesis.counts, world.events)


async def _as(world: World, owner: str, work: object) -> None:
    """Runs ``work`` (a coroutine) as a task owned by ``owner``."""
    done = asyncio.get_running_loop().create_future()
    running: list[asyncio.Task[None]] = []

    def begin() -> None:
        running.append(asyncio.ensure_future(_wrap(work, done)))
    world.at(0.0, owner, begin)
    await done


async def _wrap(work: object, done: asyncio.Future[None]) -> None:
    try:
        await work  # type: ignore[misc]
        done.set_result(None)
    except BaseException as error:
        done.set_exception(error)
        raise


def run_seed(seed: int, requests: int = 2000, faults: Faults | None = None,
             base: Path | None = None) -> Result:
    """Runs one seed to its verdict; the same seed gives the same digest."""
    own = base is None
    root = Path(tempfile.mkdtemp(prefix=f"om-sim-{seed}-", dir=_tmpfs())) if own else base
    assert root is not None
    world = World(seed, root)
    quiet = logging.getLogger()
    level = quiet.level
    quiet.setLevel(logging.CRITICAL + 1)
    try:
        with seam(world.clock, world.global_random), take_over(world.raft_time):
            return world.loop.run_until_complete(_main(world, requests, faults or Faults()))
    finally:
        quiet.setLevel(level)
        world.loop.close()
        if own:
            shutil.rmtree(root, ignore_errors=True)


def _tmpfs() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def digest_of(results: list[Result]) -> str:
    """One digest over several seeds' digests."""
    return hashlib.sha256("".join(r.digest for r in results).encode()).hexdigest()

