"""A node's answers to the integrity requests: digests, rows, its mark, scrub, auditor.

``om.node.node.Node`` routes GetVerifyTrees, ReadVerifyLeaves, MarkDiverged,
ScrubReplica and AuditReplica here, outside the request flows (as ServiceList is): they read
this node's own state, and any node answers, a diverged one too (a repair
must see what it holds). StartVerify needs Raft and stays in the node.

Reads of a checkpoint run in a worker thread, so the event loop keeps serving.
The auditor's scan runs in a process of its own over a checkpoint
(``om.integrity.audit_scan``), paced by a ``RateLimit``; its candidates are
confirmed here against the live store, in a worker thread. One audit runs at a
time on a node: on demand (AuditReplica) or periodic (``om.integrity.periodic``,
which may stop its run half-way: ``audit_store``'s ``stop``).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from om.executor.registry import error_response
from om.integrity import audit_scan, auditor, marker
from om.integrity.auditor import AuditConfig, AuditReport
from om.integrity.compare import root_bytes
from om.integrity.scan import TABLE_IDS, RateLimit, ThrottledView
from om.integrity.scrub import Scrubber
from om.integrity.verifier import Verification, Verifier, VerifyUnavailable
from om.protocol import om_pb2
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

# A bucket's check re-reads all its keys, so an audit reads each key about twice
# (docs/operations/audit.md: ~10 s a node at 100k keys, writes unaffected at this pace).
DEFAULT_AUDIT_ROWS_PER_S = 50_000
AUDIT_DIR = "audit"
DEFAULT_DETAILS_MAX = 100
# The slowest pace a scrub or audit may be asked for: a request waits for its
# whole pass, so a pace of a few rows a second would hold it (and its client) for
# hours on a store of thousands of rows. 1,000 rows/s still takes a 10M-key store
# through in under three hours.
SCAN_PACE_MIN_ROWS_PER_S = 1_000


@dataclass(frozen=True)
class Positions:
    """This node's positions and membership, for the auditor's cluster checks."""

    applied_index: int
    commit_index: int
    members: tuple[str, ...]


@dataclass(frozen=True)
class AuditRun:
    """The last audit this node ran (exported as metrics)."""

    report: AuditReport
    duration_s: float
    finished_at_s: float = 0.0      # wall clock (Unix time) when it ended


class AuditFailed(Exception):
    """The audit could not run (its scan process failed): the message says why."""


class AuditStopped(Exception):
    """The audit was asked to stop before it ended (its scan killed, nothing reported)."""


class IntegrityService:
    """Answers the integrity requests of one node."""

    def __init__(self, node_id: str, node_dir: Path, store: Store, verifier: Verifier,
                 scrubber: Scrubber, positions: Callable[[], Positions],
                 on_marked: Callable[[marker.Marker], None], audit_config: AuditConfig) -> None:
        self.node_id = node_id
        self._node_dir = node_dir
        self._store = store
        self._verifier = verifier
        self._scrubber = scrubber
        self._positions = positions
        self._on_marked = on_marked
        self._audit_config = audit_config
        self.last_audit: AuditRun | None = None
        self.audits = 0
        self._audit_lock = asyncio.Lock()

    @property
    def auditing(self) -> bool:
        """Whether an audit runs now (or is queued behind one)."""
        return self._audit_lock.locked()

    async def handle(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """The answer to one integrity request (never raises for a client's mistake)."""
        kind = request.WhichOneof("body")
        if kind == "get_verify_trees":   # a page of a level reads the checkpoint's leaves
            return await asyncio.to_thread(self._trees, request)
        if kind == "read_verify_leaves":
            return await asyncio.to_thread(self._leaves, request)
        if kind == "mark_diverged":
            return self._mark(request)
        if kind == "scrub_replica":
            return await self._scrub(request)
        assert kind == "audit_replica", f"not an integrity request: {kind}"
        return await self._audit(request)

    def replica_state(self) -> str:
        """The marker's state, or "" when this node has none."""
        found = marker.load(self._node_dir)
        return "" if found is None else found.state

    # -- digests and rows --------------------------------------------------------------

    def _trees(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        body = request.get_verify_trees
        verification = self._verifier.get(body.position)
        answer = om_pb2.GetVerifyTreesResponse(node_id=self.node_id, position=body.position,
                                               replica_state=self.replica_state())
        if verification is None or (body.position
                                    and verification.spec.position != body.position):
            return _ok(request, "get_verify_trees", answer)
        _describe(answer, verification)
        if body.HasField("level"):
            query = body.level
            if query.table not in TABLE_IDS:
                return error_response(request, om_pb2.INVALID_REQUEST,
                                      f"no table {query.table!r}")
            try:
                found = self._verifier.children(verification.spec.position, query.table,
                                                query.level, list(query.parents))
            except VerifyUnavailable as error:
                return error_response(request, om_pb2.NOT_SUPPORTED_OPERATION, str(error))
            except ValueError as error:
                return error_response(request, om_pb2.INVALID_REQUEST, str(error))
            answer.level_page.table, answer.level_page.level = query.table, query.level
            answer.level_page.nodes.extend(
                om_pb2.DigestNode(index=index, sum=total.to_bytes(32, "big"), rows=rows)
                for index, (total, rows) in sorted(found.items()))
        return _ok(request, "get_verify_trees", answer)

    def _leaves(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        body = request.read_verify_leaves
        if body.table not in TABLE_IDS or len(body.leaves) > LEAVES_A_REQUEST_MAX:
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  f"no table {body.table!r}, or more than "
                                  f"{LEAVES_A_REQUEST_MAX} leaves")
        after = (body.after_leaf, body.after_key) if body.HasField("after_leaf") else None
        try:
            rows, truncated = self._verifier.leaf_rows(body.position, body.table,
                                                       list(body.leaves), body.values, after,
                                                       body.max_rows or 5000)
        except VerifyUnavailable as error:
            return error_response(request, om_pb2.NOT_SUPPORTED_OPERATION, str(error))
        return _ok(request, "read_verify_leaves",
                   om_pb2.ReadVerifyLeavesResponse(rows=rows, truncated=truncated))

    async def _scrub(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """A whole scrub pass now (``om admin verify --full``), at the pace asked."""
        if refused := _pace_refused(request, request.scrub_replica.rows_per_s):
            return refused
        try:
            found = await self._scrubber.scrub_now(request.scrub_replica.rows_per_s)
        except Exception as error:     # the pass failed (its process, a full disk): say so
            return error_response(request, om_pb2.INTERNAL_ERROR, f"scrub failed: {error}")
        found.node_id = self.node_id
        return _ok(request, "scrub_replica", found)

    # -- the mark ----------------------------------------------------------------------

    def _mark(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Marks this node diverged, but only where its own roots differ from the majority's
        at a verification it holds: a wrong claim is refused, not believed."""
        body = request.mark_diverged
        verification = self._verifier.get(body.position)
        if (verification is None or verification.state != om_pb2.VERIFY_DONE
                or verification.spec.position != body.position):
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  f"{self.node_id} has no digests at position {body.position}")
        roots = root_bytes(verification.roots)
        differing = sorted(t for t, root in body.majority_roots.items() if roots.get(t) != root)
        if not differing:
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  f"{self.node_id}'s roots at position {body.position} equal "
                                  "the majority's: nothing to mark")
        found = marker.load(self._node_dir)
        if found is None:
            found = marker.Marker(marker.DIVERGED, body.position, tuple(differing),
                                  body.position)
            marker.save(self._node_dir, found)
        logger.critical("node %s differs from the majority at position %d in %s: it refuses "
                        "client requests and leadership until om admin repair --node-id %s",
                        self.node_id, body.position, ", ".join(differing), self.node_id)
        self._on_marked(found)
        return _ok(request, "mark_diverged", om_pb2.MarkDivergedResponse(tables=differing))

    # -- the auditor -------------------------------------------------------------------

    async def _audit(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        body = request.audit_replica
        if refused := _pace_refused(request, body.rows_per_s):
            return refused
        answer = self._facts()
        if not body.facts_only:
            try:
                run = await self.audit_store(body.rows_per_s or DEFAULT_AUDIT_ROWS_PER_S)
            except AuditFailed as error:
                return error_response(request, om_pb2.INTERNAL_ERROR, str(error))
            _fill_report(answer, run, body.details_max or DEFAULT_DETAILS_MAX)
        return _ok(request, "audit_replica", answer)

    async def audit_store(self, rows_per_s: int, stop: asyncio.Event | None = None,
                          label: str = "audit") -> AuditRun:
        """Audits this node's store (after any audit running now), logs each violation in
        full and keeps the run as ``last_audit`` (the metrics). AuditStopped when ``stop``
        is set before the scan ended: nothing is reported then."""
        async with self._audit_lock:
            run = await self._run_audit(rows_per_s, stop)
        auditor.log_report(run.report, label=label)
        self.last_audit = run
        self.audits += 1
        return run

    async def _run_audit(self, rows_per_s: int, stop: asyncio.Event | None) -> AuditRun:
        """The first pass over a checkpoint in a process of its own
        (``om.integrity.audit_scan``), each candidate confirmed on the live store."""
        started = time.perf_counter()
        work = self._node_dir / AUDIT_DIR
        await asyncio.to_thread(shutil.rmtree, work, True)
        work.mkdir(parents=True)
        try:
            _check_stop(stop)
            await asyncio.to_thread(self._store.checkpoint, work / "checkpoint")
            _check_stop(stop)
            await self._scan(work, rows_per_s, stop)
            candidates, rows = audit_scan.load_candidates(work / "candidates.json")
            _check_stop(stop)
            view = ThrottledView(self._store, RateLimit(rows_per_s=rows_per_s))
            confirmed = await asyncio.to_thread(auditor.confirm, candidates, view,
                                                self._audit_config)
        finally:
            await asyncio.to_thread(shutil.rmtree, work, True)
        report = AuditReport(confirmed.violations, rows, confirmed.candidates,
                             confirmed.cleared, confirmed.unsettled)
        return AuditRun(report, time.perf_counter() - started, time.time())

    async def _scan(self, work: Path, rows_per_s: int, stop: asyncio.Event | None) -> None:
        config = self._audit_config
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "om.integrity.audit_scan", str(work / "checkpoint"),
            str(work / "candidates.json"), str(rows_per_s), str(config.retry_expiry_ms),
            str(config.retry_grace_ms), stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE)
        reading = asyncio.ensure_future(process.communicate())
        stopping = None if stop is None else asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([t for t in (reading, stopping) if t is not None],
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopping is not None:
                stopping.cancel()
            if process.returncode is None:   # stopped, or this task was cancelled
                process.kill()
            await asyncio.gather(reading, return_exceptions=True)  # ends with the process
        if reading.cancelled() or (stop is not None and stop.is_set()
                                   and process.returncode != 0):
            raise AuditStopped("the audit scan was stopped before it ended")
        _, errors = reading.result()
        if process.returncode != 0:
            tail = " | ".join(errors.decode(errors="replace").strip().splitlines()[-3:])
            raise AuditFailed(f"the audit scan failed (status {process.returncode}): {tail}")

    def _facts(self) -> om_pb2.AuditReplicaResponse:
        positions = self._positions()
        answer = om_pb2.AuditReplicaResponse(
            node_id=self.node_id, applied_index=positions.applied_index,
            commit_index=positions.commit_index, members=positions.members,
            replica_state=self.replica_state())
        done = self._verifier.latest_done()
        if done is not None:
            answer.verify_position = done.spec.position
            answer.verify_roots.extend(_roots(done))
        return answer


def _check_stop(stop: asyncio.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise AuditStopped("the audit was stopped before it ended")


def _describe(answer: om_pb2.GetVerifyTreesResponse, verification: Verification) -> None:
    spec = verification.spec
    answer.position, answer.term = spec.position, spec.term
    answer.state, answer.detail = verification.state, verification.detail
    answer.compute_s = verification.compute_s
    if verification.state != om_pb2.VERIFY_DONE:
        return
    shape = verification.shape
    assert shape is not None
    answer.key_id = verification.key_id
    answer.leaf_bits, answer.fanout_bits = shape.leaf_bits, shape.fanout_bits
    answer.roots.extend(_roots(verification))


# leaves a ReadVerifyLeaves may name (a page of their rows answers it)
LEAVES_A_REQUEST_MAX = 4096


def _roots(verification: Verification) -> list[om_pb2.TableRoot]:
    return [om_pb2.TableRoot(table=name, root=root, rows=verification.roots[name][1])
            for name, root in sorted(root_bytes(verification.roots).items())]


def _fill_report(answer: om_pb2.AuditReplicaResponse, run: AuditRun, details_max: int) -> None:
    report = run.report
    answer.counts.update(report.counts())
    answer.violations.extend(om_pb2.AuditViolation(category=v.category, subject=v.subject,
                                                   detail=v.detail)
                             for v in report.violations[:details_max])
    answer.rows_checked, answer.candidates = report.rows_checked, report.candidates
    answer.cleared, answer.unsettled = report.cleared, report.unsettled
    answer.duration_s = run.duration_s


def _ok(request: om_pb2.OMRequest, field: str, body: Message) -> om_pb2.OMResponse:
    """An OK response carrying ``body`` in its ``field``."""
    response = om_pb2.OMResponse(cmd_type=request.cmd_type, status=om_pb2.OK,
                                 call_id=request.call_id)
    getattr(response, field).CopyFrom(body)
    return response


def _pace_refused(request: om_pb2.OMRequest, rows_per_s: int) -> om_pb2.OMResponse | None:
    """INVALID_REQUEST for a pace slower than ``SCAN_PACE_MIN_ROWS_PER_S`` (0: the default)."""
    if 0 < rows_per_s < SCAN_PACE_MIN_ROWS_PER_S:
        return error_response(request, om_pb2.INVALID_REQUEST,
                              f"rows_per_s {rows_per_s} is below the slowest pace, "
                              f"{SCAN_PACE_MIN_ROWS_PER_S} rows/s (0: the default)")
    return None
