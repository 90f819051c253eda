"""The node's parts, picked from its configuration once (issue 34: ports, chosen once).

Four settings decide which implementation fills each port, and they are read here
and nowhere else in ``om/node``:

* ``execution`` picks the state machine and the write path (``EXECUTIONS``, one
  ``Execution`` each): ``leader`` runs the leader flow over the plain state machine;
  ``replicated`` runs Ozone's old flow over the old flow's state machine (execute in
  apply); ``switchable`` runs the leader flow over the old flow's state machine, both
  flows per write type (docs/FLOW_SWITCH.md).
* The ring's size (``ring``, ``replicator``): one node replicates locally (no Raft, no
  checkpoints); more, over Raft; with ``shards`` > 1 a node, even alone, runs the Raft
  process (it merges the shards' sub-batches) and hands the channels of shards 1..S-1
  to the shard processes it starts (``Ring.shard_channels``, ``shard_pool.py``).
* ``[raft] separate_process`` picks the Raft adapter (``RAFT_ADAPTERS``): a Raft child
  process (the default) or pysyncobj in a thread of this process.
* The node holds the state machine and the replicator that applies to it as one part
  (``Replication``): one start, one scrape of both's gauges, one close.
* ``unsafe_disable_retry_cache`` picks the retry cache's keys (``leader_config``): the
  fault ``ForgetfulRetryKeys`` for chaos's red case, else ``retry_key``.
* ``serving_shard`` (set only in the configuration a node hands its shard process k,
  ``om/node/shard_process.py``): shard k's state machine over its own store, and as
  its Raft part the adapter attached to the Raft process's channel k (``ring``).

Invariant: the node holds each part through its port (``Machine``, ``WritePath``,
``om.consensus.port.RaftPort``) and never asks a part its type, so a mode is one row
of these tables. The clocks and the randomness a node reads come in at the same
seam (``om/schema/seam.py`` ``Seam``; ``MACHINE_SEAM``, the wall's clock and the OS's
entropy, by default), and every part that reads time or random bytes is given it
here, so a simulator can drive a node (``tests/test_seam_reads.py`` fails on a read
in the core that bypasses it).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from om.config import ConfigError, ServerConfig
from om.consensus.local import LocalReplicator
from om.consensus.port import ApplyEntry, BarrierEntry, RaftPort, Replicator, ReplicatorPart
from om.consensus.pysyncobj.process import NoSnapshots, PassPosition, RaftProcessReplicator
from om.consensus.pysyncobj.replicator import RaftReplicator
from om.executor.admin import upgrade
from om.executor.context import Limits as HandlerLimits
from om.flows.batch_pipeline import BatchConfig
from om.flows.leader_flow import leader_service
from om.flows.purge import PurgeConfig
from om.flows.replicated_flow import replicated_flow_service
from om.flows.settings import LeaderConfig
from om.gatekeeper.authorize import acl_policy
from om.gatekeeper.retry_cache import ForgetfulRetryKeys, RetryCacheConfig, retry_key
from om.gatekeeper.shard_gate import ShardGate
from om.node.catchup import CheckpointClient, CheckpointServer
from om.observe.audit import AuditLog, AuditSettings, AuditSink
from om.observe.metrics import NodeMetrics
from om.observe.tracing import NullTracer, Tracer, TraceSink
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView, SnapshotViews
from om.schema.seam import Seam
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.checkpoint_shelf import CheckpointShelf
from om.statemachine.digests import Digests, derive_key
from om.statemachine.raft_snapshot import CarriedCheckpoints, SnapshotSource, Snapshotter
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store, StoreMemory

logger = logging.getLogger(__name__)
# The machine's: the wall clock, a monotonic clock (perf_counter: CLOCK_MONOTONIC on
# Linux, the finest there), the OS's entropy. The only default of the seam.
MACHINE_SEAM = Seam(wall_ns=time.time_ns, elapsed_ns=time.perf_counter_ns,
                    randomness=secrets.token_bytes)


class Machine(SnapshotSource, Protocol):
    """A state machine as the node holds it (either flow's)."""

    @property
    def view(self) -> ReadView:
        """What this node's readers see (the old flow's write cache over the store)."""
        ...

    def apply_entry(self, position: int, entry: bytes) -> ApplyResult: ...

    def metrics(self) -> dict[str, float]:
        """State gauges by ``StateGauge.key``."""
        ...

    def close(self) -> None: ...


class WritePath(Protocol):
    """A request service as the node holds it: the shared template
    (``om/flows/template.py`` ``RequestService``) holding one write flow
    (``LeaderFlow`` or ``ReplicatedFlow``), built by ``leader_service`` or
    ``replicated_flow_service``."""

    snapshot_views: SnapshotViews | None
    clock_ms: Callable[[], int]

    @property
    def in_flight(self) -> int: ...

    def submit(self, request: om_pb2.OMRequest,
               peer: str = "") -> asyncio.Future[om_pb2.OMResponse]: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def leadership_lost(self) -> None: ...

    def gauges(self) -> dict[str, float]:
        """State gauges by ``StateGauge.key`` (the flow's own: purge, retry cache, locks)."""
        ...


def handler_limits(config: ServerConfig) -> HandlerLimits:
    """What the handlers enforce, from the server configuration."""
    tokens_ = config.tokens
    return HandlerLimits(list_max_keys=config.limits.list_max_keys,
                         token_renew_interval_ms=int(tokens_.renew_interval_s * 1000),
                         token_max_lifetime_ms=int(tokens_.max_lifetime_s * 1000),
                         token_key_rotation_ms=int(tokens_.key_rotation_s * 1000),
                         tokens_max=tokens_.tokens_max,
                         snapshots_per_bucket_max=config.snapshot.per_bucket_max)


def leader_config(config: ServerConfig) -> LeaderConfig:
    """The request services' settings from the server configuration."""
    limits, batch = config.limits, config.batch
    return LeaderConfig(
        lock_timeout_s=limits.lock_timeout_s,
        in_flight_max=limits.in_flight_max,
        sweep_interval_s=limits.retry_sweep_interval_s,
        retry=RetryCacheConfig(expiry_ms=int(limits.retry_cache_expiry_s * 1000),
                               memory_entries=limits.retry_cache_memory_entries),
        batch=BatchConfig(bytes_max=batch.bytes_max,
                          writes_max=batch.writes_max if batch.enabled else 1,
                          inflight_batches_max=batch.inflight_batches_max,
                          queue_max=batch.queue_max),
        acl=acl_policy(config),
        limits=handler_limits(config),
        retry_keys=ForgetfulRetryKeys() if config.unsafe_disable_retry_cache else retry_key,
        read_mode=config.read_mode,
        purge=PurgeConfig(config.purge.interval_s, config.purge.rows_max,
                          config.purge.deleted_retention_s, config.purge.open_key_expire_s,
                          config.purge.multipart_expire_s),
        fso_lock_plan=config.fso.lock_plan,
        shard_gate=shard_gate(config),
    )


def shard_gate(config: ServerConfig) -> ShardGate | None:
    """Which requests this process's shard answers (none to check with one shard)."""
    if config.shards == 1:
        return None
    node = config.node
    return ShardGate(config.serving_shard, tuple(node.shard_address(k)
                                                 for k in range(config.shards)))


def init_layout(store: Store, version: int) -> None:
    """Starts a new store (nothing applied, no layout row) at layout ``version`` when it
    is below the software's ([upgrade] init_layout_version; -1: the software's, the
    default, which needs no row). Every node of a new cluster writes the same row before
    its first entry, so replicas stay identical; a store that exists keeps its own."""
    if version > upgrade.SOFTWARE_LAYOUT_VERSION:
        raise ConfigError(f"[upgrade] init_layout_version {version} is newer than this "
                          f"software's layout {upgrade.SOFTWARE_LAYOUT_VERSION}")
    if version < 0 or version == upgrade.SOFTWARE_LAYOUT_VERSION:
        return
    if (store.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY) is not None
            or store.get(om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY) is not None):
        return
    row = upgrade.layout_row(version)
    with Digests.attach(store).changes() as digest:
        batch = store.new_batch()
        store.batch_put(batch, om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY, row)
        digest.put(om_pb2.TRANSACTION_INFO, tables.LAYOUT_VERSION_KEY, row, old=None)
        digest.write(batch)
    logger.warning("a new store starts at layout %d of %d: features above it are refused "
                   "until om admin om finalizeupgrade", version, upgrade.SOFTWARE_LAYOUT_VERSION)


# -- the store and what watches it -------------------------------------------------------

def open_store(config: ServerConfig) -> Store:
    """The node's RocksDB, with the cluster's digests attached and its layout set.

    With Raft, the durable journal is the write-ahead log: a restart replays what
    RocksDB lost (apply skips applied positions), and the journal is compacted only
    after a snapshot, whose checkpoint flushes RocksDB. A single node has no journal,
    so its RocksDB writes are its durability (unless it runs shards: they replicate
    through a Raft process even alone)."""
    if config.unsafe_store_without_wal:
        logger.warning("RocksDB's write-ahead log is DISABLED (unsafe_store_without_wal): "
                       "a crash loses unflushed batches until the Raft journal replays "
                       "them; for tests only")
    store = Store(config.node_data_dir / "db",
                  sync_writes=config.raft.fsync and len(config.nodes) == 1
                  and config.shards == 1,   # shards: the Raft process's journal, even alone
                  wal=not config.unsafe_store_without_wal,
                  memory=StoreMemory(config.limits.store_memtable_bytes,
                                     config.limits.store_block_cache_bytes))
    # the first to attach a store without digests gives it the cluster's key and shape
    Digests.attach(store, derive_key(config.raft.secret), config.verify.leaf_bits,
                   config.verify.fanout_bits)
    init_layout(store, config.upgrade.init_layout_version)
    return store


def tracer(config: ServerConfig) -> TraceSink:
    """The request trace ([trace] path), or none."""
    if config.trace_path is None:
        return NullTracer()
    return Tracer(config.trace_path, config.trace_flow or config.execution)


def audit_log(config: ServerConfig) -> AuditLog | None:
    """The audit log ([audit] enabled), or none."""
    if not config.audit.enabled:
        return None
    audit = config.audit
    return AuditLog(AuditSettings(config.audit_path, audit.reads, audit.max_bytes,
                                  audit.backups, audit.flush_interval_s), config.node_id)


# -- execution: the state machine and the write path --------------------------------------

@dataclass(frozen=True)
class FlowParts:
    """What every write path is built from, besides its state machine."""

    node_id: str
    replicator: Replicator
    settings: LeaderConfig
    tracer: TraceSink
    metrics: NodeMetrics
    audit: AuditSink
    seam: Seam


class Execution(Protocol):
    """One ``execution`` mode: its state machine, and the write path over it (built
    later: it needs the replicator, which applies to the machine)."""

    @property
    def machine(self) -> Machine: ...

    @property
    def pass_position(self) -> PassPosition | None:
        """How the machine moves past an entry with nothing for its shard; None for the
        old flow's machines, which run at one shard only (``config``)."""
        ...

    def write_path(self, flow: FlowParts) -> WritePath: ...


@dataclass(frozen=True)
class LeaderExecution:
    """``leader``: execute once on the leader, replicate batches of changes."""

    machine: StateMachine

    @property
    def pass_position(self) -> PassPosition | None:
        return self.machine.pass_position

    def write_path(self, flow: FlowParts) -> WritePath:
        return leader_service(flow.node_id, self.machine.view, self.machine, flow.replicator,
                              flow.settings, flow.tracer, flow.seam, flow.metrics,
                              flow.audit)


@dataclass(frozen=True)
class OldFlowExecution:
    """``replicated``: Ozone's old flow, every node executes each request in apply."""

    machine: ReplicatedStateMachine
    pass_position = None

    def write_path(self, flow: FlowParts) -> WritePath:
        return replicated_flow_service(flow.node_id, self.machine, flow.replicator,
                                       flow.settings, flow.tracer, flow.seam, flow.metrics,
                                       flow.audit)


@dataclass(frozen=True)
class SwitchableExecution:
    """``switchable``: the leader flow over the old flow's state machine, which applies
    both kinds of entry; the ``#FLOWS`` row picks the flow per write type."""

    machine: ReplicatedStateMachine
    pass_position = None

    def write_path(self, flow: FlowParts) -> WritePath:
        return leader_service(flow.node_id, self.machine.view, self.machine, flow.replicator,
                              flow.settings, flow.tracer, flow.seam, flow.metrics,
                              flow.audit)


def _old_flow_machine(config: ServerConfig, store: Store, settings: LeaderConfig,
                      fail_stop: Callable[[], None]) -> ReplicatedStateMachine:
    return ReplicatedStateMachine(
        store, settings.limits,
        MemoryRetryCache(settings.retry.expiry_ms, settings.retry.memory_entries),
        config.limits.unflushed_transactions_max, fail_stop, groups=dict(config.user_groups))


ExecutionBuilder = Callable[[ServerConfig, Store, LeaderConfig, Callable[[], None]], Execution]
EXECUTIONS: dict[str, ExecutionBuilder] = {
    "leader": lambda config, store, settings, fail_stop: LeaderExecution(
        StateMachine(store, config.serving_shard)),
    "replicated": lambda *args: OldFlowExecution(_old_flow_machine(*args)),
    "switchable": lambda *args: SwitchableExecution(_old_flow_machine(*args)),
}


def execution(config: ServerConfig, store: Store, settings: LeaderConfig,
              fail_stop: Callable[[], None]) -> Execution:
    """The state machine and write path ``execution`` names."""
    return EXECUTIONS[config.execution](config, store, settings, fail_stop)


# -- the ring: Raft and catch-up ----------------------------------------------------------

@dataclass(frozen=True)
class RaftHooks:
    """What the Raft adapter calls back into the node."""

    apply_entry: ApplyEntry
    barrier_entry: BarrierEntry
    leads: Callable[[], bool]
    fail_stop: Callable[[], None]
    # the state machine's, for an entry with nothing for this shard (``Execution``);
    # None for the old flow's, which runs at one shard only
    pass_position: PassPosition | None = None


@dataclass(frozen=True)
class Ring:
    """The parts of a node in a ring of more than one; all None for a single node."""

    raft: RaftPort | None = None
    checkpoints: CheckpointServer | None = None
    checkpoint_client: CheckpointClient | None = None
    # with shards, in the node's process: the ends of the Raft process's channels
    # 1..S-1, for the shard processes (om/node/shard_pool.py)
    shard_channels: tuple[socket.socket, ...] = ()


def _raft_process(config: ServerConfig, snapshots: Snapshotter, hooks: RaftHooks) -> RaftPort:
    return RaftProcessReplicator(
        config.node, config.nodes, config.node_data_dir / "raft", config.raft,
        hooks.apply_entry, snapshots, hooks.barrier_entry, config.batch.bytes_max,
        hooks.fail_stop, shards=config.shards, on_position=hooks.pass_position)


def _raft_thread(config: ServerConfig, snapshots: Snapshotter, hooks: RaftHooks) -> RaftPort:
    return RaftReplicator(config.node, config.nodes, config.node_data_dir / "raft", config.raft,
                          hooks.apply_entry, snapshots, hooks.barrier_entry,
                          config.batch.bytes_max)


RAFT_ADAPTERS: dict[bool, Callable[[ServerConfig, Snapshotter, RaftHooks], RaftPort]] = {
    True: _raft_process, False: _raft_thread}


def _shard_raft(config: ServerConfig, hooks: RaftHooks, channel: socket.socket) -> RaftPort:
    """Shard k's side of the Raft process its node spawned: attached to channel k,
    the position of an entry with nothing for this shard moved in memory."""
    assert hooks.pass_position is not None, "a shard process runs the leader flow"
    return RaftProcessReplicator(
        config.node, config.nodes, config.node_data_dir, config.raft, hooks.apply_entry,
        NoSnapshots(), hooks.barrier_entry, config.batch.bytes_max, hooks.fail_stop,
        channel=channel, on_position=hooks.pass_position, shard=config.serving_shard)


def ring(config: ServerConfig, state: Machine, carried: CarriedCheckpoints,
         hooks: RaftHooks, seam: Seam, shard_channel: socket.socket | None = None) -> Ring:
    """Raft (the adapter ``[raft] separate_process`` names) and the checkpoints a
    follower catches up from (named and leased by ``seam``), for a ring of more than
    one node. Shard k >= 1's process (``shard_channel``: its end of the Raft process's
    channel k) has the Raft part alone: snapshots and catch-up stay shard 0's until
    docs/SHARDS.md's step 4."""
    assert (shard_channel is None) == (config.serving_shard == 0)
    if shard_channel is not None:
        return Ring(_shard_raft(config, hooks, shard_channel))
    if len(config.nodes) == 1 and config.shards == 1:
        return Ring()
    # the Raft process merges the shards' sub-batches, even alone
    assert config.shards == 1 or hooks.pass_position is not None, "shards run the leader flow"
    shelf = CheckpointShelf(config.node_data_dir / "checkpoints", config.catchup.kept,
                            config.node_id, config.raft.fsync, seam, config.catchup.lease_s)
    client = CheckpointClient(config)
    snapshots = Snapshotter(state, config.node_data_dir, config.raft.fsync, shelf=shelf,
                            source=client, unsafe_delay_s=config.unsafe_snapshot_delay_s,
                            unsafe_delay_if=hooks.leads, carried=carried, shards=config.shards)
    raft = RAFT_ADAPTERS[config.raft.separate_process](config, snapshots, hooks)
    channels = raft.take_shard_channels()
    assert len(channels) == config.shards - 1
    return Ring(raft, CheckpointServer(config, shelf), client, channels)


def replicator(config: ServerConfig, ring: Ring, applied_index: int,
               apply_entry: ApplyEntry) -> ReplicatorPart:
    """Raft for a ring; for a single node, ``LocalReplicator`` (an entry commits when
    applied, at the position after ``applied_index``)."""
    if ring.raft is not None:
        return ring.raft
    return LocalReplicator(config.node_id, config.node.address, applied_index, apply_entry)


class Replication:
    """The node's state machine and the replicator that applies entries to it, held as
    one part: the node starts, scrapes and closes the pair without asking which
    replicator (local or Raft) or which state machine (either flow's) it is.

    Invariant: the replicator closes before the state machine, so nothing applies to
    a closed state machine; a gauge both report is their sum."""

    def __init__(self, machine: Machine, replicator: ReplicatorPart) -> None:
        self.machine = machine
        self.replicator = replicator

    async def start(self) -> None:
        """Starts replication (the state machine is ready once built)."""
        await self.replicator.start()

    def metrics(self) -> dict[str, float]:
        """Both parts' state gauges by ``StateGauge.key``."""
        values = dict(self.machine.metrics())
        for key, value in self.replicator.metrics().items():
            values[key] = values.get(key, 0) + value
        return values

    async def close(self) -> None:
        """Stops replication, then closes the state machine."""
        await self.replicator.close()
        self.machine.close()
