"""A node's answers to the integrity requests: trees, rows, its own mark, the auditor.

``om.node.node.Node`` routes GetVerifyTrees, ReadVerifyRange, MarkDiverged and
AuditReplica here, outside the request flows (as ServiceList is): they read
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import Message

from om.executor.registry import error_response
from om.integrity import audit_scan, auditor, marker, merkle
from om.integrity.auditor import AuditConfig, AuditReport
from om.integrity.merkle import KeyRange
from om.integrity.scan import TABLE_IDS, RateLimit, ThrottledView
from om.integrity.tree_store import StoredForest, StoredTree
from om.integrity.verifier import Verification, Verifier, VerifyUnavailable
from om.protocol import om_pb2
from om.statemachine.store import Store

logger = logging.getLogger(__name__)

# A bucket's check re-reads all its keys, so an audit reads each key about twice
# (docs/OPERATIONS.md: ~10 s a node at 100k keys, writes unaffected at this pace).
DEFAULT_AUDIT_ROWS_PER_S = 50_000
AUDIT_DIR = "audit"
DEFAULT_DETAILS_MAX = 100


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
                 positions: Callable[[], Positions], on_marked: Callable[[marker.Marker], None],
                 audit_config: AuditConfig) -> None:
        self.node_id = node_id
        self._node_dir = node_dir
        self._store = store
        self._verifier = verifier
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
        if kind == "get_verify_trees":   # a page of a tree is a query of its file
            return await asyncio.to_thread(self._trees, request)
        if kind == "read_verify_range":
            return await self._range(request)
        if kind == "mark_diverged":
            return self._mark(request)
        assert kind == "audit_replica", f"not an integrity request: {kind}"
        return await self._audit(request)

    def replica_state(self) -> str:
        """The marker's state, or "" when this node has none."""
        found = marker.load(self._node_dir)
        return "" if found is None else found.state

    # -- trees and rows ----------------------------------------------------------------

    def _trees(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        body = request.get_verify_trees
        verification = self._verifier.get(body.position)
        answer = om_pb2.GetVerifyTreesResponse(node_id=self.node_id, position=body.position,
                                               replica_state=self.replica_state())
        if verification is not None and (not body.position
                                         or verification.spec.position == body.position):
            _describe(answer, verification, body.tables)
            if body.HasField("level") and verification.forest is not None:
                tree = verification.forest.trees.get(body.level.table)
                if tree is None:
                    return error_response(request, om_pb2.INVALID_REQUEST,
                                          f"no tree of table {body.level.table!r}")
                answer.level_page.CopyFrom(level_page(tree, body.level))
            elif verification.state == om_pb2.VERIFY_COMPUTING:
                answer.rows_scanned, answer.rows_total = self._verifier.progress(
                    verification.spec.position)
        return _ok(request, "get_verify_trees", answer)

    async def _range(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        body = request.read_verify_range
        end = body.end if body.HasField("end") else None
        if body.table not in TABLE_IDS or (end is not None and end <= body.start):
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  f"no such range: table {body.table!r}, [{body.start!r}, "
                                  f"{end!r})")
        key_range = KeyRange(body.table, body.start, end)
        after = body.start_after if body.HasField("start_after") else None
        try:
            rows, truncated = await asyncio.to_thread(
                self._verifier.read_range, body.position, key_range, after,
                body.max_rows or 5000)
        except VerifyUnavailable as error:
            return error_response(request, om_pb2.NOT_SUPPORTED_OPERATION, str(error))
        return _ok(request, "read_verify_range", om_pb2.ReadVerifyRangeResponse(
            rows=[om_pb2.RangeRow(key=k, value=v) for k, v in rows], truncated=truncated))

    # -- the mark ----------------------------------------------------------------------

    def _mark(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Marks this node diverged, but only where its own roots differ from the majority's
        at a verification it holds: a wrong claim is refused, not believed."""
        body = request.mark_diverged
        verification = self._verifier.get(body.position)
        if (verification is None or verification.forest is None
                or verification.spec.position != body.position):
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  f"{self.node_id} has no trees at position {body.position}")
        roots = verification.forest.roots()
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
        if done is not None and done.forest is not None:
            answer.verify_position = done.spec.position
            answer.verify_roots.extend(_roots(done.forest))
        return answer


def _check_stop(stop: asyncio.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise AuditStopped("the audit was stopped before it ended")


def _describe(answer: om_pb2.GetVerifyTreesResponse, verification: Verification,
              tables: Iterable[str]) -> None:
    spec = verification.spec
    answer.position, answer.term = spec.position, spec.term
    answer.state, answer.detail = verification.state, verification.detail
    answer.salt = spec.params.salt
    answer.leaf_bits, answer.fanout_bits = spec.params.leaf_bits, spec.params.fanout_bits
    answer.compute_s = verification.compute_s
    forest = verification.forest
    if forest is None:
        return
    answer.roots.extend(_roots(forest))
    wanted = sorted(set(tables) & set(forest.trees))
    answer.trees.applied_index, answer.trees.term = forest.applied_index, forest.term
    # The whole-tree form older tools ask for: the table's leaves, held for this answer only.
    answer.trees.trees.extend(merkle.to_proto(forest.trees[t].whole()) for t in wanted)


# ~70-100 bytes a node: ~200 KB a page, under the default 4 MB frame; against a smaller
# limit the tool halves its pages (om.cli.integrity_rpc).
LEVEL_PAGE_NODES = 2000


def level_page(tree: merkle.MerkleTree | StoredTree,
               query: om_pb2.TreeLevelQuery) -> om_pb2.TreeLevelPage:
    """One page of ``tree``'s nodes at ``query.level`` in its span (``TreeLevelQuery``)."""
    end = query.end if query.HasField("end") else None
    start = query.start
    if query.HasField("start_after") and query.start_after >= start:
        start = query.start_after + b"\0"          # the least key after it
    limit = min(query.max_nodes or LEVEL_PAGE_NODES, LEVEL_PAGE_NODES)
    nodes = ([] if end is not None and start >= end
             else tree.nodes(query.level, start, end, limit + 1))
    page = om_pb2.TreeLevelPage(table=tree.table, depth=tree.depth, root=tree.root_hash,
                                rows=tree.rows, truncated=len(nodes) > limit)
    page.nodes.extend(om_pb2.MerkleNode(start=n.start, hash=n.hash, rows=n.rows, level=n.level)
                      for n in nodes[:limit])
    return page


def _roots(forest: StoredForest) -> list[om_pb2.TableRoot]:
    return [om_pb2.TableRoot(table=name, root=tree.root_hash, rows=tree.rows)
            for name, tree in sorted(forest.trees.items())]


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
