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
import socket
from collections.abc import Awaitable, Callable

from om.config import ServerConfig
from om.consensus.port import Replicator
from om.executor.errors import OMError
from om.executor.registry import KINDS, error_response
from om.executor.security import tokens, user_certificates
from om.flows.template import audit_request, not_leader_response
from om.gatekeeper import validation
from om.gatekeeper.shard_gate import wrong_shard
from om.node import gc_policy, parts
from om.node import membership as node_membership
from om.node import transfer as node_transfer
from om.node.integrity import INTEGRITY_GAUGES, INTEGRITY_TYPES, NodeIntegrity
from om.node.shard_pool import ShardProcesses
from om.observe.audit import NoAudit
from om.observe.metrics import NODE_STATE, NodeMetrics, StateGauge
from om.protocol import om_pb2
from om.protocol.token_format import instant
from om.schema import tables
from om.schema.read_view import ReadView
from om.schema.seam import Seam
from om.security.tls import PeerIdentity
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult
from om.statemachine.digests import Digests
from om.statemachine.om_snapshot_checkpoints import CheckpointSettings, SnapshotCheckpoints
from om.statemachine.store import shared_memory

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
# What the node answers itself besides ServiceList: shard 0's business (a shard k >= 1
# has neither the Raft process's channel 0 nor the checkpoints these need)
NODE_REQUESTS = frozenset(INTEGRITY_TYPES) | {om_pb2.TransferLeadership,
                                              om_pb2.ChangeMembership,
                                              om_pb2.FetchCheckpointFile}


def secret_rows_refused(request: om_pb2.OMRequest, config: ServerConfig) -> bool:
    """Whether ``request`` reads raw secretKeyTable rows (om admin repair's
    ReadVerifyLeaves with values) for a user who is not an administrator: whoever
    holds a secret key can forge any user's delegation token, ACLs on or off."""
    return (request.cmd_type == om_pb2.ReadVerifyLeaves and request.read_verify_leaves.values
            and request.read_verify_leaves.table == SECRET_TABLE
            and request.user not in config.admins and "*" not in config.admins)


class Node:
    """The parts of one OM process, from store to leader service."""

    def __init__(self, config: ServerConfig, fail_stop: Callable[[], None] = _exit_now,
                 seam: Seam | None = None, shard_channel: socket.socket | None = None) -> None:
        """Opens the parts ``config`` names (``parts.py`` picks each, once); ``seam``: the
        clock and the randomness this node reads (the wall's and the OS's by default);
        ``shard_channel``: in shard k >= 1's process (``config.serving_shard``), its end
        of the Raft process's channel k (``om/node/shard_process.py``)."""
        if config.unsafe_disable_retry_cache:
            logger.warning("the retry cache is DISABLED (unsafe_disable_retry_cache): retries "
                           "of committed writes execute again; for tests only")
        self.config = config
        self.fail_stop = fail_stop
        self.seam = seam or parts.MACHINE_SEAM
        NodeIntegrity.check_startable(config)   # before anything is opened or applied
        self.tracer = parts.tracer(config)
        self.store = parts.open_store(config)
        settings = parts.leader_config(config)
        self.handler_limits = settings.limits
        self.metrics = NodeMetrics()
        self.audit = parts.audit_log(config)
        execution = parts.execution(config, self.store, settings, fail_stop)
        self.state_machine = execution.machine
        self.om_snapshot_checkpoints = self._recovered_checkpoints()
        self.integrity = NodeIntegrity(config, self.store, self.state_machine.quiesce,
                                       self.state_machine.applying,
                                       lambda: self.state_machine.applied_index, fail_stop,
                                       self.seam)
        self.membership_ledger = node_membership.Ledger()
        ring = parts.ring(config, self.state_machine, self.om_snapshot_checkpoints, parts.RaftHooks(
            self.apply_entry, self.barrier_entry, self._leads, fail_stop,
            execution.pass_position), self.seam,
            shard_channel)
        self.raft, self.checkpoints = ring.raft, ring.checkpoints
        self._shard_channels = ring.shard_channels
        self.shard_processes: ShardProcesses | None = None
        self.checkpoint_client = ring.checkpoint_client
        self.replication = parts.Replication(self.state_machine, parts.replicator(
            config, ring, self.state_machine.applied_index, self.apply_entry))
        # The flows never see a diverged node ready: it executes and answers nothing.
        self.replicator: Replicator = self.integrity.attach(
            self.replication.replicator,
            self.raft.transfer_leadership
            if self.raft is not None and not config.serving_shard else None)
        self.leader = execution.write_path(parts.FlowParts(
            config.node_id, self.replicator, settings, self.tracer, self.metrics,
            self.audit or NoAudit(), self.seam))
        self.leader.snapshot_views = self.om_snapshot_checkpoints
        self._add_gauges()
        if self.raft is not None:
            self.raft.on_leadership_lost(self.leader.leadership_lost)
        self.closing = False

    def _recovered_checkpoints(self) -> SnapshotCheckpoints:
        """OM snapshots: checkpoints a kill cut short are taken before anything replays."""
        snapshot = self.config.snapshot
        checkpoints = SnapshotCheckpoints(
            self.config.node_data_dir, self.store,
            CheckpointSettings(max(2, snapshot.open_max), snapshot.headroom_bytes_min,
                               snapshot.headroom_fraction_min))
        checkpoints.recover()
        return checkpoints

    def _add_gauges(self) -> None:
        """The node's state gauges, read at every scrape (``state``)."""
        gc_gauges = tuple(StateGauge(name, f"om_{name}", "Python's garbage collector "
                                     "(om/node/gc_policy.py)") for name in gc_policy.metrics())
        self.metrics.add_state(NODE_STATE + gc_gauges, self.state)
        self.metrics.add_state(INTEGRITY_GAUGES, self.integrity.state)
        if self.raft is not None:
            self.metrics.add_histogram(
                "om_journal_sync_duration_seconds",
                "Time of one Raft journal sync: one pwrite and, when durable, one fdatasync "
                "(reported by the Raft process about once a second)", self.raft.journal_syncs)

    def _leads(self) -> bool:
        return self.replicator.role().is_leader

    def barrier_entry(self, term: int) -> bytes:
        """The empty batch a new leader commits in ``term`` before it serves."""
        return log_entry.encode_batch(om_pb2.PersistDbBatch(
            term=term, leader_id=self.config.node_id, timestamp_ms=self.seam.clock_ms()))

    def apply_entry(self, position: int, entry: bytes) -> ApplyResult:
        """Applies a committed entry; stops the process if that is impossible."""
        try:
            result = self.state_machine.apply_entry(position, entry)
            if result.snapshots_changed:   # an OM snapshot's barrier: checkpoint here
                self.state_machine.quiesce()
                self.om_snapshot_checkpoints.applied()
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
        """Starts the leader service, then replication (with Raft, following leadership),
        then with shards one process per shard above 0 (``om/node/shard_pool.py``)."""
        await self.leader.start()
        await self.replication.start()
        if self._shard_channels:   # shards 1..S-1, on the Raft process's channels
            self.shard_processes = ShardProcesses(self.config, self._shard_channels)
            self._shard_channels = ()
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
        if self.config.serving_shard and request.cmd_type in NODE_REQUESTS:
            return _answered(self._shard_0s(request))
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
            request.secret_key_candidate = self.seam.randomness(tokens.SECRET_BYTES)
        elif request.secret_key_candidate:
            request.ClearField("secret_key_candidate")
        if self.raft is not None and self.raft.catching_up:
            return _answered(error_response(
                request, om_pb2.LEADER_NOT_READY, f"OM:{self.config.node_id} is installing "
                "a checkpoint of the leader's store (catching up): ask another OM"))
        return self.leader.submit(request, peer)

    def _shard_0s(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """WRONG_SHARD for a request only shard 0 answers, on shard k >= 1."""
        return wrong_shard(
            request, f"this is shard {self.config.serving_shard} of "
            f"OM:{self.config.node_id}, which answers its buckets' requests: "
            f"{om_pb2.Type.Name(request.cmd_type)} is shard 0's ({self.config.node.address})",
            self.config.node.address, self.config.shards)

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
        return self.state_machine.view

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
                                             self.seam.clock_ms())
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
            node_id=self.config.node_id,
            address=self.config.node.shard_address(self.config.serving_shard),
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
        """This node's state gauges, by ``StateGauge.key`` (read at every scrape); a
        gauge both the flow and the state machine report (a switchable node holds both
        flows' retry caches) is their sum."""
        role = self.replicator.role()
        memtables, block_cache = self.store.memory.usage()
        values: dict[str, float] = {
            "leader": float(role.is_leader), "ready": float(role.ready), "term": role.term,
            "commit_index": role.commit_index,
            "applied_index": self.state_machine.applied_index,
            "managed_index": self.state_machine.managed_index,
            "writes_in_flight": self.leader.in_flight, "leader_changes": 0,
            "merged_entries_appended": 0, "merged_slices_appended": 0,
            "snapshot_checkpoints_taken": self.om_snapshot_checkpoints.taken,
            "snapshot_checkpoints_freed": self.om_snapshot_checkpoints.freed,
            "snapshot_checkpoint_seconds": self.om_snapshot_checkpoints.last_checkpoint_s,
            "store_memtable_bytes": memtables, "store_block_cache_bytes": block_cache,
            "checkpoint_cache_bytes": sum(shared_memory().usage()),
            "digest_leaf_cache_bytes": Digests.attach(self.store).cache_bytes(),
            **gc_policy.metrics()}
        for gauges in (self.leader.gauges(), self.replication.metrics()):
            for key, value in gauges.items():
                values[key] = values.get(key, 0) + value
        return values

    def service_list(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """ServiceList: what this node knows of itself and the leader."""
        role = self.replicator.role()
        body = om_pb2.ServiceListResponse(nodes=[self.node_info()], leader_id=role.leader_id,
                                          shards=self.config.shards)
        return om_pb2.OMResponse(cmd_type=request.cmd_type, status=om_pb2.OK,
                                 call_id=request.call_id, service_list=body)

    async def close(self) -> None:
        """Refuses new requests, drains in-flight writes, closes the store and the trace;
        with shards, stops the Raft process first (it tells the shards ``closing``),
        then the shard processes."""
        self.closing = True
        await self.leader.close()
        await self.integrity.close()
        if self.checkpoint_client is not None:
            self.checkpoint_client.stop()
        await self.replication.close()    # the Raft process tells the shards "closing"
        if self.shard_processes is not None:
            await self.shard_processes.close()
        for unused in self._shard_channels:   # closed before it started
            unused.close()
        self.tracer.close()
        if self.audit is not None:
            self.audit.close()
        self.om_snapshot_checkpoints.close()
        self.store.close()
