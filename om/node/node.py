"""One OM node: store, state machine, replicator and leader service, wired up.

The node owns fail-stop: if a committed entry cannot be applied, the process
exits at once (status 70) rather than continue with a store that diverged.

The requests the node answers itself (ServiceList, integrity, leadership transfer,
membership) get the gate's envelope checks here (``om/gatekeeper/validation.py``;
the flows check theirs in the template), and their answers never raise: a bug in
one is INTERNAL_ERROR, logged and counted like the flows' (``_guarded``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable

from om.config import ConfigError, ServerConfig
from om.consensus.local import LocalReplicator
from om.consensus.port import Replicator
from om.consensus.pysyncobj.process import RaftProcessReplicator
from om.consensus.pysyncobj.replicator import RaftReplicator
from om.executor.admin import upgrade
from om.executor.context import Limits as HandlerLimits
from om.executor.errors import OMError
from om.executor.registry import KINDS, error_response
from om.executor.security import tokens, user_certificates
from om.flows.batch_pipeline import BatchConfig
from om.flows.leader_flow import LeaderConfig, LeaderService
from om.flows.purge import PurgeConfig
from om.flows.replicated_flow import ReplicatedFlowService
from om.flows.template import audit_request, not_leader_response
from om.gatekeeper import validation
from om.gatekeeper.authorize import acl_policy
from om.gatekeeper.retry_cache import RetryCacheConfig
from om.node import gc_policy
from om.node import membership as node_membership
from om.node import transfer as node_transfer
from om.node.catchup import CheckpointClient, CheckpointServer
from om.node.integrity import INTEGRITY_GAUGES, INTEGRITY_TYPES, NodeIntegrity
from om.observe.audit import AuditLog, AuditSettings, AuditSink, NoAudit
from om.observe.metrics import NODE_STATE, NodeMetrics, StateGauge
from om.observe.tracing import NullTracer, Tracer, TraceSink
from om.protocol import om_pb2
from om.protocol.token_format import instant
from om.schema import tables
from om.schema.read_view import ReadView
from om.security.tls import PeerIdentity
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult, StateMachine
from om.statemachine.checkpoint_shelf import CheckpointShelf
from om.statemachine.digests import Digests, derive_key
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.snapshot import Snapshotter
from om.statemachine.snapshot_checkpoints import CheckpointSettings, SnapshotCheckpoints
from om.statemachine.store import Store, StoreMemory, shared_memory

logger = logging.getLogger(__name__)
FAIL_STOP_EXIT = 70
TOKEN_TYPES = frozenset({om_pb2.GetDelegationToken, om_pb2.RenewDelegationToken,
                         om_pb2.CancelDelegationToken})
CERTIFICATE_ONLY = frozenset({om_pb2.GetDelegationToken, om_pb2.RenewDelegationToken})


def _answered(response: om_pb2.OMResponse) -> asyncio.Future[om_pb2.OMResponse]:
    answer: asyncio.Future[om_pb2.OMResponse] = asyncio.get_running_loop().create_future()
    answer.set_result(response)
    return answer


def _exit_now() -> None:
    os._exit(FAIL_STOP_EXIT)


SECRET_TABLE = tables.TABLE_NAMES[om_pb2.SECRET_KEY]


def secret_rows_refused(request: om_pb2.OMRequest, config: ServerConfig) -> bool:
    """Whether ``request`` reads raw secretKeyTable rows (om admin repair's
    ReadVerifyLeaves with values) for a user who is not an administrator: whoever
    holds a secret key can forge any user's delegation token, ACLs on or off."""
    return (request.cmd_type == om_pb2.ReadVerifyLeaves and request.read_verify_leaves.values
            and request.read_verify_leaves.table == SECRET_TABLE
            and request.user not in config.admins and "*" not in config.admins)


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
    """The leader pipeline's settings from the server configuration."""
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
        retry_cache_enabled=not config.unsafe_disable_retry_cache,
        read_mode=config.read_mode,
        purge=PurgeConfig(config.purge.interval_s, config.purge.rows_max,
                          config.purge.deleted_retention_s, config.purge.open_key_expire_s,
                          config.purge.multipart_expire_s),
        fso_lock_plan=config.fso.lock_plan,
    )


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


class Node:
    """The parts of one OM process, from store to leader service."""

    def __init__(self, config: ServerConfig, fail_stop: Callable[[], None] = _exit_now) -> None:
        if config.unsafe_disable_retry_cache:
            logger.warning("the retry cache is DISABLED (unsafe_disable_retry_cache): retries "
                           "of committed writes execute again; for tests only")
        self.config = config
        self.fail_stop = fail_stop
        NodeIntegrity.check_startable(config)   # before anything is opened or applied
        self.tracer: TraceSink = NullTracer()
        if config.trace_path is not None:
            self.tracer = Tracer(config.trace_path, config.trace_flow or config.execution)
        # With Raft, the durable journal is the write-ahead log: a restart replays
        # what RocksDB lost (apply skips applied positions), and the journal is
        # compacted only after a snapshot, whose checkpoint flushes RocksDB. A single
        # node has no journal, so its RocksDB writes are its durability.
        if config.unsafe_store_without_wal:
            logger.warning("RocksDB's write-ahead log is DISABLED (unsafe_store_without_wal): "
                           "a crash loses unflushed batches until the Raft journal replays "
                           "them; for tests only")
        self.store = Store(config.node_data_dir / "db",
                           sync_writes=config.raft.fsync and len(config.nodes) == 1,
                           wal=not config.unsafe_store_without_wal,
                           memory=StoreMemory(config.limits.store_memtable_bytes,
                                              config.limits.store_block_cache_bytes))
        # the first to attach a store without digests gives it the cluster's key and shape
        Digests.attach(self.store, derive_key(config.raft.secret), config.verify.leaf_bits,
                       config.verify.fanout_bits)
        init_layout(self.store, config.upgrade.init_layout_version)
        settings = leader_config(config)
        self.handler_limits = settings.limits
        self.metrics = NodeMetrics()
        self.audit: AuditLog | None = None
        if config.audit.enabled:
            self.audit = AuditLog(AuditSettings(config.audit_path, config.audit.reads,
                                                config.audit.max_bytes, config.audit.backups,
                                                config.audit.flush_interval_s),
                                  config.node_id)
        audit: AuditSink = self.audit or NoAudit()
        self.state_machine: StateMachine | ReplicatedStateMachine
        if config.execution in ("replicated", "switchable"):
            self.state_machine = ReplicatedStateMachine(
                self.store, settings.limits,
                MemoryRetryCache(settings.retry.expiry_ms, settings.retry.memory_entries),
                config.limits.unflushed_transactions_max, fail_stop,
                groups=dict(config.user_groups))
        else:
            self.state_machine = StateMachine(self.store)
        # OM snapshots: checkpoints a kill cut short are taken before anything replays
        snapshot = config.snapshot
        self.snapshot_checkpoints = SnapshotCheckpoints(
            config.node_data_dir, self.store,
            CheckpointSettings(max(2, snapshot.open_max), snapshot.headroom_bytes_min,
                               snapshot.headroom_fraction_min))
        self.snapshot_checkpoints.recover()
        self.integrity = NodeIntegrity(config, self.store, self.state_machine.quiesce,
                                       self.state_machine.applying,
                                       lambda: self.state_machine.applied_index, fail_stop)
        self.raft: RaftReplicator | RaftProcessReplicator | None = None
        self.membership_ledger = node_membership.Ledger()
        self.replicator: Replicator
        self.checkpoints: CheckpointServer | None = None
        self.checkpoint_client: CheckpointClient | None = None
        if len(config.nodes) == 1:
            self.replicator = LocalReplicator(config.node_id, config.node.address,
                                              self.state_machine.applied_index, self.apply_entry)
        else:
            shelf = CheckpointShelf(config.node_data_dir / "checkpoints", config.catchup.kept,
                                    config.node_id, config.raft.fsync, config.catchup.lease_s)
            self.checkpoints = CheckpointServer(config, shelf)
            self.checkpoint_client = CheckpointClient(config)
            snapshots = Snapshotter(
                self.state_machine, config.node_data_dir, config.raft.fsync, shelf=shelf,
                source=self.checkpoint_client, unsafe_delay_s=config.unsafe_snapshot_delay_s,
                unsafe_delay_if=self._leads, carried=self.snapshot_checkpoints)
            raft_dir = config.node_data_dir / "raft"
            if config.raft.separate_process:
                self.raft = RaftProcessReplicator(
                    config.node, config.nodes, raft_dir, config.raft, self.apply_entry,
                    snapshots, self.barrier_entry, config.batch.bytes_max, fail_stop)
            else:
                self.raft = RaftReplicator(
                    config.node, config.nodes, raft_dir, config.raft, self.apply_entry,
                    snapshots, self.barrier_entry, config.batch.bytes_max)
            self.replicator = self.raft
        # The flows never see a diverged node ready: it executes and answers nothing.
        self.replicator = self.integrity.attach(
            self.replicator, self.raft.transfer_leadership if self.raft is not None else None)
        self.leader: LeaderService | ReplicatedFlowService
        if config.execution == "switchable":   # both flows, per type (docs/FLOW_SWITCH.md)
            assert isinstance(self.state_machine, ReplicatedStateMachine)
            self.leader = LeaderService(config.node_id, self.state_machine.view,
                                        self.state_machine, self.replicator, settings,
                                        self.tracer, metrics=self.metrics, audit=audit)
        elif isinstance(self.state_machine, ReplicatedStateMachine):
            self.leader = ReplicatedFlowService(config.node_id, self.state_machine,
                                                self.replicator, settings, self.tracer,
                                                metrics=self.metrics, audit=audit)
        else:
            self.leader = LeaderService(config.node_id, self.store, self.state_machine,
                                        self.replicator, settings, self.tracer,
                                        metrics=self.metrics, audit=audit)
        self.leader.snapshot_views = self.snapshot_checkpoints
        gc_gauges = tuple(StateGauge(name, f"om_{name}", "Python's garbage collector "
                                     "(om/node/gc_policy.py)") for name in gc_policy.metrics())
        self.metrics.add_state(NODE_STATE + gc_gauges, self.state)
        self.metrics.add_state(INTEGRITY_GAUGES, self.integrity.state)
        if self.raft is not None:
            self.metrics.add_histogram(
                "om_journal_sync_duration_seconds",
                "Time of one Raft journal sync: one pwrite and, when durable, one fdatasync "
                "(reported by the Raft process about once a second)", self.raft.journal_syncs)
        if self.raft is not None:
            self.raft.on_leadership_lost(self.leader.leadership_lost)
        self.closing = False

    def _leads(self) -> bool:
        return self.replicator.role().is_leader

    def barrier_entry(self, term: int) -> bytes:
        """The empty batch a new leader commits in ``term`` before it serves."""
        return log_entry.encode_batch(om_pb2.PersistDbBatch(
            term=term, leader_id=self.config.node_id, timestamp_ms=time.time_ns() // 1_000_000))

    def apply_entry(self, position: int, entry: bytes) -> ApplyResult:
        """Applies a committed entry; stops the process if that is impossible."""
        try:
            result = self.state_machine.apply_entry(position, entry)
            if result.snapshots_changed:   # an OM snapshot's barrier: checkpoint here
                self.state_machine.quiesce()
                self.snapshot_checkpoints.applied()
            self.integrity.after_apply(position, entry, result)
            if result.prepared and self.raft is not None:
                # Ozone's prepare: every node takes a snapshot and compacts its log at
                # the marker, so the new software starts from a snapshot, not old entries
                self.raft.compact_log()
            return result
        except BaseException as error:
            logger.critical("cannot apply committed entry at position %d to %s: %s: stopping "
                            "this node (a full disk? free space and restart it: it catches up "
                            "from the others)", position, self.store.path, error, exc_info=True)
            self.fail_stop()
            raise

    async def start(self) -> None:
        """Starts the leader service and, with Raft, following leadership."""
        await self.leader.start()
        if self.raft is not None:
            await self.raft.start()
        self.integrity.start()

    def submit(self, request: om_pb2.OMRequest,
               peer: str = "") -> asyncio.Future[om_pb2.OMResponse]:
        """Starts answering one client request (from ``peer``, for the audit log); the
        caller must not cancel the future."""
        if self.closing:
            return _answered(error_response(request, om_pb2.LEADER_NOT_READY,
                                            f"OM:{self.config.node_id} is shutting down"))
        if request.cmd_type not in KINDS:   # the flows check theirs after the shape check
            invalid = validation.problem(request, self.handler_limits)
            if invalid is not None:
                return _answered(error_response(request, invalid.status, invalid.message))
        if request.cmd_type == om_pb2.ServiceList:
            return _answered(self.service_list(request))
        if request.cmd_type in INTEGRITY_TYPES:
            if secret_rows_refused(request, self.config):
                return _answered(error_response(
                    request, om_pb2.PERMISSION_DENIED, f"user {request.user!r} may not read "
                    f"raw rows of {SECRET_TABLE}: they hold the keys that sign delegation "
                    "tokens; only an OM administrator (admins) may"))
            return self._guarded(request, self.integrity.submit(request))
        if request.cmd_type == om_pb2.TransferLeadership:
            return self._guarded(request, node_transfer.answer(request, self.config, self.raft))
        if request.cmd_type == om_pb2.ChangeMembership:
            return self._guarded(request,
                                 node_membership.answer(request, self.config, self.raft,
                                                        self.membership_ledger))
        if self.integrity.diverged:
            refusal = self.integrity.refusal(request, self.replicator.role())
            assert refusal is not None
            return _answered(refusal)
        if request.cmd_type == om_pb2.SetFlows and self.config.execution != "switchable":
            return _answered(error_response(
                request, om_pb2.NOT_SUPPORTED_OPERATION, f"this OM runs execution = "
                f"\"{self.config.execution}\": the flow switch needs execution = "
                "\"switchable\" on every OM (a rolling restart; docs/FLOW_SWITCH.md)"))
        if request.cmd_type == om_pb2.FetchCheckpointFile:
            if self.checkpoints is None:
                return _answered(error_response(request, om_pb2.NOT_SUPPORTED_OPERATION,
                                                "a one-node ring keeps no checkpoints"))
            return self._guarded(request, self.checkpoints.answer(request))
        if request.cmd_type in TOKEN_TYPES and not self.tokens_enabled:
            return _answered(error_response(
                request, om_pb2.NOT_SUPPORTED_OPERATION, "delegation tokens need a secure "
                "cluster: TLS with client certificates (om cluster up, not --no-tls) and [tokens] "
                "enabled"))
        if request.cmd_type == om_pb2.GetDelegationToken:
            # the next secret key, should one be due (om/executor/security/tokens.py); a client's
            # own bytes never get this far
            request.secret_key_candidate = secrets.token_bytes(tokens.SECRET_BYTES)
        elif request.secret_key_candidate:
            request.ClearField("secret_key_candidate")
        if isinstance(self.raft, RaftProcessReplicator) and self.raft.catching_up:
            return _answered(error_response(
                request, om_pb2.LEADER_NOT_READY, f"OM:{self.config.node_id} is installing "
                "a checkpoint of the leader's store (catching up): ask another OM"))
        return self.leader.submit(request, peer)

    def _guarded(self, request: om_pb2.OMRequest,
                 work: Awaitable[om_pb2.OMResponse]) -> asyncio.Future[om_pb2.OMResponse]:
        """Answers a request the node handles itself in a task whose result is always an
        answer: an exception (a bug) becomes INTERNAL_ERROR, logged; every INTERNAL_ERROR
        (an audit that could not run reports one too) counts in om_internal_errors_total."""
        async def answer() -> om_pb2.OMResponse:
            try:
                response = await work
            except Exception:
                logger.exception("answering %s failed", om_pb2.Type.Name(request.cmd_type))
                response = error_response(request, om_pb2.INTERNAL_ERROR,
                                          "internal error while answering the request")
            if response.status == om_pb2.INTERNAL_ERROR:
                self.metrics.requests.internal_error()
            return response
        return asyncio.get_running_loop().create_task(answer())

    @property
    def tokens_enabled(self) -> bool:
        """Whether this node issues and accepts delegation tokens (TLS and [tokens] on)."""
        return self.config.tls.enabled and self.config.tokens.enabled

    def _read_view(self) -> ReadView:
        """What this node's readers see (the old flow's write cache over the store)."""
        if isinstance(self.state_machine, ReplicatedStateMachine):
            return self.state_machine.view
        return self.store

    def token_user(self, request: om_pb2.OMRequest) -> str | om_pb2.OMResponse:
        """The user a request without a client certificate acts as: its delegation
        token's owner; or the answer that refuses it. A token this node cannot
        validate while it is not the ready leader (it may lag) sends the client to the
        leader instead. Getting or renewing a token needs a certificate."""
        if not request.HasField("token"):
            return error_response(
                request, om_pb2.PERMISSION_DENIED, "no client certificate and no delegation "
                "token: present a certificate signed by the cluster CA, or a token from "
                "`om sh token get` (--token FILE)")
        try:
            identifier = tokens.authenticate(request.token, self._read_view(),
                                             time.time_ns() // 1_000_000)
        except OMError as error:
            role = self.replicator.role()
            if not role.ready:
                return not_leader_response(request, self.config.node_id, role)
            return error_response(request, error.status, error.message)
        except Exception:
            logger.exception("validating a delegation token failed")
            self.metrics.requests.internal_error()
            return error_response(request, om_pb2.INTERNAL_ERROR,
                                  "internal error while validating the delegation token")
        if request.cmd_type in CERTIFICATE_ONLY:
            return error_response(
                request, om_pb2.INVALID_AUTH_METHOD, "Delegation Token can be issued or "
                "renewed only with a client certificate, not with a delegation token")
        return identifier.owner

    def certificate_refusal(self, identity: PeerIdentity) -> str | None:
        """Why this node refuses the client certificate ``identity`` (UNAUTHORIZED): its
        revocation was applied here (om/executor/security/user_certificates.py). None: accepted,
        or the node is closing (``submit`` refuses everything then; the store may be
        closed)."""
        if self.closing:
            return None
        row = user_certificates.revoked(self._read_view(), identity.user, identity.serial)
        if row is None:
            return None
        return (f"the certificate of user {row.user} (serial {row.serial}) was revoked at "
                f"{instant(row.revoked_at)} by {row.revoked_by}: this OM refuses it; an "
                f"administrator may issue a new one (om admin user add {row.user})")

    def audit_refused(self, request: om_pb2.OMRequest, peer: str, message: str,
                      status: str = "PERMISSION_DENIED") -> None:
        """Audits a request the server refused before it reached the flow (a forged user,
        a bad delegation token)."""
        if self.audit is not None:
            audit_request(self.audit, request, peer, status, message)

    async def handle(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Answers one client request; the caller's cancellation does not stop it."""
        return await asyncio.shield(self.submit(request))

    def node_info(self) -> om_pb2.NodeInfo:
        """This node's role and positions."""
        role = self.replicator.role()
        name = "FOLLOWER"
        if role.is_leader:
            name = "LEADER" if role.ready else "LEADER_NOT_READY"
        elif role.candidate:
            name = "CANDIDATE"
        return om_pb2.NodeInfo(
            node_id=self.config.node_id, address=self.config.node.address,
            role=name, term=role.term,
            commit_index=role.commit_index, applied_index=self.state_machine.applied_index,
            execution=self.config.execution, managed_index=self.state_machine.managed_index,
            metrics=self.metrics.flat(), http_address=self.config.node.http_address,
            replica_state=self.integrity.marked.state if self.integrity.marked else "",
            membership=self._membership(), match_index=self._match_indexes())

    def _membership(self) -> str:
        """LEARNER, MAINTENANCE or VOTER, as this node was started."""
        node = self.config.node
        if node.learner:
            return "LEARNER"
        return "MAINTENANCE" if node.maintenance else "VOTER"

    def _match_indexes(self) -> dict[str, int]:
        """Each follower's match index by node id, as this node sees it when it leads."""
        if self.raft is None:
            return {}
        ids = {n.raft_address: n.id for n in self.config.nodes}
        return {ids.get(a, a): i for a, i in self.raft.match_indexes().items()}

    def state(self) -> dict[str, float]:
        """This node's state gauges, by ``StateGauge.key`` (read at every scrape)."""
        role = self.replicator.role()
        service = self.leader
        memtables, block_cache = self.store.memory.usage()
        values: dict[str, float] = {
            "leader": float(role.is_leader), "ready": float(role.ready), "term": role.term,
            "commit_index": role.commit_index,
            "applied_index": self.state_machine.applied_index,
            "managed_index": self.state_machine.managed_index,
            "writes_in_flight": service.in_flight,
            "leader_changes": self.raft.leader_changes.count if self.raft else 0,
            "snapshot_checkpoints_taken": self.snapshot_checkpoints.taken,
            "snapshot_checkpoints_freed": self.snapshot_checkpoints.freed,
            "snapshot_checkpoint_seconds": self.snapshot_checkpoints.last_checkpoint_s,
            "store_memtable_bytes": memtables, "store_block_cache_bytes": block_cache,
            "checkpoint_cache_bytes": sum(shared_memory().usage()),
            "digest_leaf_cache_bytes": Digests.attach(self.store).cache_bytes(),
            **gc_policy.metrics()}
        if isinstance(service, LeaderService):
            retry = service.retry_cache.statistics()
            values.update(purge_pending_directories=service.purger.pending(),
                          purge_steps=service.purger.steps,
                          purge_entries=service.purger.purged,
                          purge_deleted_keys=service.purger.keys_purged,
                          purge_expired_open_keys=service.purger.open_keys_deleted,
                          purge_expired_multipart_uploads=service.purger.uploads_aborted,
                          retry_cache_hits=retry["hits"],
                          retry_cache_entries=retry["recent"],
                          retry_cache_bytes=retry["recent_bytes"],
                          lock_waiters=service.locks.table.statistics().waiters)
        machine = self.state_machine
        if isinstance(machine, ReplicatedStateMachine):
            buffer = machine.double_buffer
            values.update(double_buffer_flushes=buffer.flushes,
                          double_buffer_transactions=buffer.transactions,
                          write_cache_rows=len(machine.cache),
                          # a switchable node holds both flows' caches
                          retry_cache_entries=values.get("retry_cache_entries", 0)
                          + len(machine.retry),
                          retry_cache_bytes=values.get("retry_cache_bytes", 0)
                          + machine.retry.bytes)
        return values

    def service_list(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """ServiceList: what this node knows of itself and the leader."""
        role = self.replicator.role()
        body = om_pb2.ServiceListResponse(nodes=[self.node_info()], leader_id=role.leader_id)
        return om_pb2.OMResponse(cmd_type=request.cmd_type, status=om_pb2.OK,
                                 call_id=request.call_id, service_list=body)

    async def close(self) -> None:
        """Refuses new requests, drains in-flight writes, closes the store and the trace."""
        self.closing = True
        await self.leader.close()
        await self.integrity.close()
        if self.checkpoint_client is not None:
            self.checkpoint_client.stop()
        if self.raft is not None:
            await self.raft.close()
        if isinstance(self.state_machine, ReplicatedStateMachine):
            self.state_machine.close()
        self.tracer.close()
        if self.audit is not None:
            self.audit.close()
        self.snapshot_checkpoints.close()
        self.store.close()
