"""The node's side of replica integrity: verify entries, the diverged state, the auditor.

``om.node.node.Node`` owns one ``NodeIntegrity`` and calls it at four points:

* **start-up**: ``check_startable`` refuses a node whose marker says a repair
  holds it (``ReplicaHalted``: CockroachDB's prevent-startup file);
* **apply**: ``after_apply`` checkpoints the store when a verify entry was just
  applied (``om.integrity.verifier``), and halts this node, by the node's
  fail-stop, when the entry is a repair's halt aimed at it and it is marked
  diverged: its database then holds exactly that position;
* **requests**: ``submit`` answers the integrity requests (StartVerify through
  Raft, the others in ``om.integrity.service``); ``refusal`` answers every
  client request of a diverged node with REPLICA_DIVERGED;
* **the periodic auditor**: ``start`` starts it (``om.integrity.periodic``, off
  unless ``[auditor] periodic_interval_s`` is set), on followers only;
* **continuous verification** (``[verify]``): while this node leads it proposes a
  verify entry every ``interval_s``; on every node, each verification read is
  compared with the peers' (``om.integrity.continuous``, over ``PeerLink``s), and
  an outvoted node marks itself; the scrub (``om.integrity.scrub``) runs its
  passes; a store from before digests gets them in the background
  (``_build_digests``, paced at ``build_rows_per_s``);
* **leadership**: the request flows see this node through ``GuardedReplicator``,
  which never reports a diverged node ready, so it executes nothing and
  answers nothing as leader; and while it leads, ``_step_down_forever`` asks
  Raft every ``STEP_DOWN_INTERVAL_S`` to hand leadership to a caught-up
  follower (pysyncobj's TimeoutNow).

Why a diverged node keeps applying and voting rather than stopping: in a
3-node cluster it is the spare for quorum, and everything it applies is
committed by the healthy majority; the divergence stays in its own store,
which nobody reads. Repair stops it (``halt``) only when it is about to be
repaired, at a position every replica checkpointed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from om.config import NodeAddress, ServerConfig
from om.consensus.port import ReplicateResult, ReplicateStatus, Replicator, Role
from om.executor.registry import error_response
from om.flows.template import not_leader_response
from om.integrity import auditor, marker
from om.integrity.auditor import AuditConfig
from om.integrity.continuous import SelfCheck
from om.integrity.periodic import PeriodicAuditor, Schedule
from om.integrity.scrub import Scrubber
from om.integrity.service import IntegrityService, Positions
from om.integrity.verifier import Verification, Verifier
from om.node.integrity_peers import PeerLink
from om.observe.metrics import StateGauge
from om.protocol import om_pb2
from om.schema.seam import Seam
from om.statemachine import log_entry
from om.statemachine.apply import ApplyResult
from om.statemachine.digests import Digests
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

STEP_DOWN_INTERVAL_S = 0.5
INTEGRITY_TYPES = {om_pb2.StartVerify: "start_verify",
                   om_pb2.GetVerifyTrees: "get_verify_trees",
                   om_pb2.ReadVerifyLeaves: "read_verify_leaves",
                   om_pb2.MarkDiverged: "mark_diverged",
                   om_pb2.ScrubReplica: "scrub_replica",
                   om_pb2.AuditReplica: "audit_replica"}
# change something: administrators only
_PROPOSING = (om_pb2.StartVerify, om_pb2.MarkDiverged, om_pb2.ScrubReplica)
BUILD_PAGE_ROWS = 1000      # rows the digest build covers under apply's lock at a time
CHECK_WAIT_FRACTION = 0.5   # of the interval: how long a self-check waits for a peer

INTEGRITY_GAUGES = (
    StateGauge("replica_diverged", "om_replica_diverged", "1 while this node is marked "
               "diverged (it refuses client requests and leadership)"),
    StateGauge("verify_position", "om_verify_last_position", "Log position of the newest "
               "verification whose digests this node read (0: none)"),
    StateGauge("verify_compute_seconds", "om_verify_digests_read_seconds",
               "Time reading the digests of that verification took"),
    StateGauge("verify_checks", "om_verify_checks", "Verifications this node compared with "
               "its peers' ([verify] interval_s, and om admin verify)", counter=True),
    StateGauge("verify_divergences", "om_verify_divergences", "Checks that found this node "
               "outvoted (it marked itself diverged)", counter=True),
    StateGauge("verify_last_check_position", "om_verify_last_check_position",
               "Log position of the last check"),
    StateGauge("verify_last_check_clean", "om_verify_last_check_clean",
               "1 when the last check found every member agreeing, 0 otherwise"),
    StateGauge("verify_last_check_timestamp", "om_verify_last_check_timestamp_seconds",
               "Unix time the last check ended"),
    StateGauge("verify_interval", "om_verify_interval_seconds",
               "[verify] interval_s: how often the leader proposes a verification (0: off)"),
    StateGauge("digests_complete", "om_digests_complete", "1 once every row is covered by "
               "the digests (0 while a store from before them builds them)"),
    StateGauge("scrub_passes", "om_scrub_passes", "Scrub passes this node ran to the end",
               counter=True),
    StateGauge("scrub_drift_leaves", "om_scrub_drift_leaves", "Leaves the scrub found "
               "differing from their rows, and recomputed", counter=True),
    StateGauge("scrub_last_duration", "om_scrub_last_duration_seconds",
               "Duration of the last scrub pass"),
    StateGauge("scrub_last_rows", "om_scrub_last_rows", "Rows the last scrub pass read"),
    StateGauge("audit_runs", "om_audit_runs", "Auditor runs on this node", counter=True),
    StateGauge("audit_duration_seconds", "om_audit_last_duration_seconds",
               "Duration of the last auditor run"),
    StateGauge("audit_last_run_timestamp", "om_audit_last_run_timestamp_seconds",
               "Unix time the last auditor run (on demand or periodic) ended"),
    StateGauge("audit_rows_checked", "om_audit_last_rows_checked",
               "Rows the last auditor run checked"),
    *(StateGauge(f"audit_{category}", f"om_audit_violations_{category}",
                 f"Confirmed {category} violations in the last auditor run")
      for category in auditor.STORE_CATEGORIES),
    StateGauge("audit_periodic_interval", "om_audit_periodic_interval_seconds",
               "[auditor] periodic_interval_s: the periodic audit's interval (0: off)"),
    StateGauge("audit_periodic_running", "om_audit_periodic_running",
               "1 while a periodic audit runs on this node"),
    StateGauge("audit_periodic_runs", "om_audit_periodic_runs",
               "Periodic audits this node ran to the end", counter=True),
    StateGauge("audit_periodic_skipped", "om_audit_periodic_skipped",
               "Periodic audits skipped: due while an audit was still running", counter=True),
    StateGauge("audit_periodic_not_follower", "om_audit_periodic_not_follower",
               "Periodic audits not started: due while this node led or knew no leader",
               counter=True),
    StateGauge("audit_periodic_stopped", "om_audit_periodic_stopped",
               "Periodic audits stopped half-way: this node became leader", counter=True),
    StateGauge("audit_periodic_failed", "om_audit_periodic_failures",
               "Periodic audits that could not run (logged)", counter=True),
    StateGauge("audit_periodic_last_run_timestamp",
               "om_audit_periodic_last_run_timestamp_seconds",
               "Unix time the last periodic audit ended (persisted across restarts)"),
    StateGauge("audit_periodic_last_duration", "om_audit_periodic_last_duration_seconds",
               "Duration of the last periodic audit"),
    StateGauge("audit_periodic_last_rows_checked", "om_audit_periodic_last_rows_checked",
               "Rows the last periodic audit checked"),
    *(StateGauge(f"audit_periodic_{category}", f"om_audit_periodic_violations_{category}",
                 f"Confirmed {category} violations in the last periodic audit")
      for category in auditor.STORE_CATEGORIES),
)


def check_members(nodes: Sequence[NodeAddress], node_id: str) -> int:
    """The members a self-check votes over: the voters, and this node when it is a
    learner (it compares itself with them; counted out, its own answer made one more
    than the members, which a soak's learner tripped on)."""
    voters = [n for n in nodes if not n.learner]
    return len(voters) + (0 if any(n.id == node_id for n in voters) else 1)


class GuardedReplicator:
    """The node's replicator as the request flows see it: never ready while diverged."""

    def __init__(self, inner: Replicator, diverged: Callable[[], bool]) -> None:
        self._inner = inner
        self._diverged = diverged

    async def replicate(self, entry: bytes) -> ReplicateResult:
        return await self._inner.replicate(entry)

    def role(self) -> Role:
        role = self._inner.role()
        if role.ready and self._diverged():
            return dataclasses.replace(role, ready=False)
        return role


class NodeIntegrity:
    """Verify entries, the marker and the integrity requests of one node."""

    def __init__(self, config: ServerConfig, store: Store, quiesce: Callable[[], None],
                 applying: Callable[[], AbstractContextManager[object]],
                 applied_index: Callable[[], int], fail_stop: Callable[[], None],
                 seam: Seam) -> None:
        """``seam``: what a verify entry's time and id are read from (the node's,
        om/node/parts.py: a verify entry is replicated data)."""
        self._config = config
        self._clock_ms = seam.clock_ms
        self._randomness = seam.randomness
        self._node_dir = config.node_data_dir
        self._store = store
        self._applying = applying
        self._applied_index = applied_index
        self._fail_stop = fail_stop
        found = marker.load(self._node_dir)
        assert found is None or not found.stops_start, "check_startable first"
        self.marked: marker.Marker | None = found
        if found is not None:
            logger.critical("node %s is marked diverged since position %d (%s): it refuses "
                            "client requests and leadership until om admin repair",
                            config.node_id, found.detected_at, marker.marker_path(self._node_dir))
        self._closing = threading.Event()
        verify = config.verify
        voters = [n for n in config.nodes if not n.learner]
        self._peers = {n.id: PeerLink(config, n.address) for n in voters if n.id != config.node_id}
        self.self_check = SelfCheck(
            config.node_id, None, {n: link.call for n, link in self._peers.items()},
            check_members(config.nodes, config.node_id), self._mark_self,
            max(1.0, CHECK_WAIT_FRACTION * verify.interval_s))
        self.verifier = Verifier(self._node_dir, store, quiesce, verify.keep, self._verified)
        self.self_check.verifier = self.verifier
        self.scrubber = Scrubber(self._node_dir, store, applying, verify.scrub_rows_per_s,
                                 self._drifted)
        self._replicator: Replicator | None = None
        self._transfer: Callable[[], None] | None = None
        self.service = IntegrityService(
            config.node_id, self._node_dir, store, self.verifier, self.scrubber,
            self._positions, self._marked,
            AuditConfig(retry_expiry_ms=int(config.limits.retry_cache_expiry_s * 1000)))
        auditor_config = config.auditor
        self.periodic = PeriodicAuditor(
            self.service, Schedule(auditor_config.periodic_interval_s,
                                   auditor_config.jitter_fraction, auditor_config.rows_per_s),
            self._node_dir, self._follows, self._leads)
        self._tasks: set[asyncio.Task[om_pb2.OMResponse]] = set()
        self._step_down: asyncio.Task[None] | None = None
        self._proposer: asyncio.Task[None] | None = None
        self._verify_soon = asyncio.Event()
        self._builder = threading.Thread(target=self._build_digests, name="digest-build",
                                         daemon=True)

    @staticmethod
    def check_startable(config: ServerConfig) -> None:
        """ReplicaHalted when a repair holds this node: it must not apply anything."""
        found = marker.load(config.node_data_dir)
        if found is not None and found.stops_start:
            raise marker.ReplicaHalted(marker.halted_message(config.node_id, found,
                                                             config.node_data_dir))

    @property
    def diverged(self) -> bool:
        return self.marked is not None

    def attach(self, replicator: Replicator,
               transfer_leadership: Callable[[], None] | None) -> GuardedReplicator:
        """Wires the node's replicator, and Raft's leadership transfer (None: one node)."""
        self._replicator = replicator
        self._transfer = transfer_leadership
        return GuardedReplicator(replicator, lambda: self.diverged)

    # -- apply -------------------------------------------------------------------------

    def after_apply(self, position: int, entry: bytes, result: ApplyResult) -> None:
        """On the apply path, right after ``entry`` was applied at ``position``."""
        if not result.applied or not log_entry.is_verify(entry):
            return  # a replay (the store is past it) or a deposed leader's entry
        batch = log_entry.decode(entry)
        assert isinstance(batch, om_pb2.PersistDbBatch)
        spec = self.verifier.applied(position, batch)
        if spec.halt_node_id == self._config.node_id:
            self._halt(position)

    def _halt(self, position: int) -> None:
        """Stops this node at ``position`` for a repair, if it is marked diverged."""
        found = marker.load(self._node_dir)
        verification = self.verifier.get(position)
        if found is None or found.state != marker.DIVERGED:
            logger.warning("a repair asked node %s to halt at position %d, but it is not "
                           "marked diverged: ignored", self._config.node_id, position)
            return
        if verification is None or verification.state == om_pb2.VERIFY_FAILED:
            logger.error("not halting at position %d: no checkpoint flushed the store there",
                         position)
            return
        marker.save(self._node_dir, found.moved(marker.HALTED, position=position))
        logger.critical("node %s halts at position %d for repair: it will not start again "
                        "until om admin repair --node-id %s clears %s", self._config.node_id,
                        position, self._config.node_id, marker.marker_path(self._node_dir))
        self._fail_stop()

    # -- requests ----------------------------------------------------------------------

    def submit(self, request: om_pb2.OMRequest) -> asyncio.Future[om_pb2.OMResponse]:
        """Starts answering an integrity request (``INTEGRITY_TYPES``)."""
        problem = self._problem(request)
        if problem is not None:
            return _answered(problem)
        if request.cmd_type == om_pb2.StartVerify:
            work = self._start_verify(request)
        else:
            work = self.service.handle(request)
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def refusal(self, request: om_pb2.OMRequest, role: Role) -> om_pb2.OMResponse | None:
        """REPLICA_DIVERGED for a client request to a diverged node; None otherwise."""
        found = self.marked
        if found is None:
            return None
        response = error_response(
            request, om_pb2.REPLICA_DIVERGED,
            f"OM:{self._config.node_id}'s replica differs from the majority's (verified at "
            f"log position {found.detected_at}, in {', '.join(found.tables)}): it serves no "
            f"request until om admin repair --node-id {self._config.node_id}; ask another OM")
        if role.leader_id and role.leader_id != self._config.node_id:
            response.leader_node_id = role.leader_id
            response.leader_address = role.leader_address
        return response

    def _problem(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse | None:
        body = INTEGRITY_TYPES[request.cmd_type]
        if request.WhichOneof("body") != body:
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  f"{om_pb2.Type.Name(request.cmd_type)} request must carry "
                                  f"a {body} body")
        acl_on, admins = self._config.acl_enabled, self._config.admins
        if acl_on and request.cmd_type in _PROPOSING and request.user not in admins:
            return error_response(request, om_pb2.PERMISSION_DENIED,
                                  f"user {request.user!r} is not an OM administrator")
        if (acl_on and request.cmd_type == om_pb2.ReadVerifyLeaves
                and request.read_verify_leaves.values and request.user not in admins):
            return error_response(request, om_pb2.PERMISSION_DENIED,
                                  f"user {request.user!r} may not read raw rows")
        return None

    async def _start_verify(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Proposes a verify entry through Raft; answers with its position once it is
        committed and applied (checkpointed) here."""
        assert self._replicator is not None
        role = self._replicator.role()
        if not role.ready or self.diverged:
            return not_leader_response(request, self._config.node_id, role)
        result = await self._propose(role.term, request.start_verify.halt_node_id)
        if result.status is ReplicateStatus.QUEUE_FULL:
            return error_response(request, om_pb2.SERVER_BUSY, "the Raft queue is full")
        if result.status is not ReplicateStatus.COMMITTED:
            return not_leader_response(request, self._config.node_id, self._replicator.role())
        return om_pb2.OMResponse(cmd_type=request.cmd_type, status=om_pb2.OK,
                                 call_id=request.call_id,
                                 start_verify=om_pb2.StartVerifyResponse(
                                     position=result.position, term=role.term))

    async def _propose(self, term: int, halt_node_id: str = "") -> ReplicateResult:
        """Replicates a verify entry of ``term`` (halting ``halt_node_id`` when given)."""
        assert self._replicator is not None
        verify = om_pb2.VerifyMarker(verify_id=self._randomness(16), halt_node_id=halt_node_id)
        batch = om_pb2.PersistDbBatch(term=term, leader_id=self._config.node_id,
                                      timestamp_ms=self._clock_ms(), verify=verify)
        return await self._replicator.replicate(log_entry.encode_verify(batch))

    async def _propose_forever(self) -> None:
        """While this node leads (and is not diverged), a verify entry every interval, or
        sooner when the scrub mended a leaf."""
        assert self._replicator is not None
        interval = self._config.verify.interval_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._verify_soon.wait(), interval)
            self._verify_soon.clear()
            role = self._replicator.role()
            if not role.is_leader or not role.ready or self.diverged:
                continue
            result = await self._propose(role.term)
            if result.status is not ReplicateStatus.COMMITTED:
                logger.warning("continuous verification: the verify entry was not committed "
                               "(%s)", result.status.name)

    def _verified(self, verification: Verification) -> None:
        """On the verifier's worker thread: this node's digests at a position are read."""
        if self._peers and not self._closing.is_set():
            self.self_check.check(verification)

    def _mark_self(self, found: marker.Marker) -> None:
        """The self-check outvoted this node: the marker file, as MarkDiverged writes it."""
        if marker.load(self._node_dir) is None:
            marker.save(self._node_dir, found)
        self._marked(marker.load(self._node_dir) or found)

    def _drifted(self, leaves: int) -> None:
        """The scrub mended ``leaves`` leaves: verify soon (the leader proposes at once)."""
        self._verify_soon.set()

    def _build_digests(self) -> None:
        """Covers a store from before digests, a page at a time, at the configured pace."""
        digests = Digests.attach(self._store)
        pace_s = BUILD_PAGE_ROWS / self._config.verify.build_rows_per_s
        if not digests.complete:
            logger.warning("this store has no digests yet (written before them): building "
                           "them in the background at %d rows/s; verifications fail until "
                           "done", self._config.verify.build_rows_per_s)
        while not digests.complete and not self._closing.is_set():
            started = time.monotonic()
            with self._applying():
                digests.build_step(BUILD_PAGE_ROWS)
            self._closing.wait(max(0.0, pace_s - (time.monotonic() - started)))
        if digests.complete:
            logger.info("digests cover every row")

    # -- the marker and leadership -------------------------------------------------------

    def _marked(self, found: marker.Marker) -> None:
        self.marked = found

    def _positions(self) -> Positions:
        role = self._replicator.role() if self._replicator is not None else None
        return Positions(self._applied_index(), role.commit_index if role else 0,
                         self._raft_members())

    def _raft_members(self) -> tuple[str, ...]:
        """The voters in this node's Raft configuration, by node id (by Raft address when
        this node's configuration predates them); the configured voters until Raft has
        reported its own."""
        members = getattr(self._replicator, "members", None)
        addresses: list[str] = members() if callable(members) else []
        if not addresses:
            return tuple(sorted(n.id for n in self._config.nodes if not n.learner))
        ids = {n.raft_address: n.id for n in self._config.nodes}
        return tuple(sorted(ids.get(a, a) for a in addresses))

    def _follows(self) -> bool:
        """Whether this node follows a leader it knows (a periodic audit may start)."""
        if self._replicator is None:
            return False
        role = self._replicator.role()
        return not role.is_leader and not role.candidate and role.leader_id not in (
            "", self._config.node_id)

    def _leads(self) -> bool:
        return self._replicator is not None and self._replicator.role().is_leader

    def start(self) -> None:
        """Starts the periodic auditor, and handing leadership away whenever this diverged
        node leads."""
        loop = asyncio.get_running_loop()
        if self._transfer is not None:
            self._step_down = loop.create_task(self._step_down_forever())
        if self._config.verify.interval_s > 0 and len(self._config.nodes) > 1:
            self._proposer = loop.create_task(self._propose_forever())
        self._builder.start()
        self.scrubber.start()
        self.periodic.start()

    async def _step_down_forever(self) -> None:
        assert self._replicator is not None
        transfer = self._transfer
        assert transfer is not None
        while True:
            await asyncio.sleep(STEP_DOWN_INTERVAL_S)
            if self.diverged and self._replicator.role().is_leader:
                logger.warning("node %s is diverged and leads: handing leadership away",
                               self._config.node_id)
                transfer()

    async def close(self) -> None:
        """Stops the step-down loop and the trees worker; drops unanswered requests."""
        self._closing.set()
        tasks = [t for t in (self._step_down, self._proposer, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.periodic.close()
        await self.scrubber.close()
        if self._builder.is_alive():
            await asyncio.to_thread(self._builder.join)
        self.verifier.close()
        for link in self._peers.values():
            link.close()

    def state(self) -> dict[str, float]:
        """Gauges (``INTEGRITY_GAUGES``), read at every scrape."""
        values: dict[str, float] = {"replica_diverged": float(self.diverged),
                                    "audit_runs": self.service.audits}
        done = self.verifier.latest_done()
        if done is not None:
            values.update(verify_position=done.spec.position,
                          verify_compute_seconds=done.compute_s)
        check = self.self_check.last
        values.update(verify_checks=self.self_check.checks,
                      verify_divergences=self.self_check.divergences,
                      verify_interval=self._config.verify.interval_s,
                      digests_complete=float(Digests.attach(self._store).complete),
                      scrub_passes=self.scrubber.passes,
                      scrub_drift_leaves=self.scrubber.drift_leaves)
        if check is not None:
            values.update(verify_last_check_position=check.position,
                          verify_last_check_clean=float(check.result == "clean"),
                          verify_last_check_timestamp=check.finished_at_s)
        scrub = self.scrubber.last
        if scrub is not None:
            values.update(scrub_last_duration=scrub.duration_s, scrub_last_rows=scrub.rows)
        run = self.service.last_audit
        if run is not None:
            values.update(audit_duration_seconds=run.duration_s,
                          audit_last_run_timestamp=run.finished_at_s,
                          audit_rows_checked=run.report.rows_checked)
            values.update({f"audit_{c}": n for c, n in run.report.counts().items()})
        values.update(self.periodic.state())
        return values


def _answered(response: om_pb2.OMResponse) -> asyncio.Future[om_pb2.OMResponse]:
    answer: asyncio.Future[om_pb2.OMResponse] = asyncio.get_running_loop().create_future()
    answer.set_result(response)
    return answer
