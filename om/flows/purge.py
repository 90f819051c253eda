"""The leader's background purges: replicated system writes, bounded and paced.

Three kinds of rows outlive the requests that made them, and the leader removes
each in bounded steps, every step a request of its own submitted through the
leader's write path (so it is locked as its plan says, replicated and applied
like any write: followers never compute anything):

* **deleted subtrees** (Ozone's DirectoryDeletingService): ``rm -r`` of a
  directory in a file-system bucket writes one tombstone (deletedDirectoryTable)
  and returns; a ``PurgeDirectories`` step removes at most ``rows_max`` entries of
  one deleted directory (``om.executor.fso.fso_keys``), releasing their bytes and
  namespace; nested directories become tombstones of their own.
* **deletedTable rows past their retention** (``PurgeKeys``, Ozone's type 81):
  versions deleted or overwritten more than ``deleted_retention_s`` ago.
* **open keys and files never committed** (``DeleteOpenKeys``, Ozone's open-key
  cleanup): created more than ``open_key_expire_s`` ago. A multipart upload's own
  open row is not one: it goes with its upload.
* **multipart uploads never completed** (``AbortExpiredMultiPartUploads``, Ozone's
  type 127): initiated more than ``multipart_expire_s`` ago; aborted as a client's
  abort would (parts to deletedTable, their bytes back to the bucket), at most
  ``multipart.UPLOADS_MAX`` a step.

Each interval, while this node is the ready leader, each kind gets at most one
step, one at a time, so purges never crowd out client writes. The row kinds are
scanned from a cursor, at most ``SCAN_PAGES * rows_max`` rows a step, wrapping
round at the end: a step's cost is bounded whatever the table holds. A pass over
a table that finds nothing due learns the earliest time a row there can carry,
and the table is not read again until the cutoff reaches it
(``om.flows.purge_scan``): with a day's retention, deleted keys none of which is
due cost one pass until the oldest is, not 4,000 parsed rows a second on the
event loop (once rows fall due steadily, passes go on, each purging). What the scans
learned holds for one term: a node that becomes the ready leader again (or
restarts) passes once over each table. A pass that purges goes round again.
A clock skew between successive leaders only moves a purge by that skew:
purging is garbage collection, never a correctness promise.

The gauges the scrape thread reads are counters this loop keeps
(``pending_directories`` is counted by each directory step, or each interval on
a node that does not lead): nothing here reads the store from another thread.

Idempotent across leader changes and crashes: a step is computed from applied
state by whoever leads and names its cutoff; its handler re-checks each row
against it and skips rows already gone. A deposed leader's step that commits
after its successor's barrier is skipped at apply (an older term).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf.message import Message

from om.config import Purge
from om.executor.multipart.uploads import UPLOADS_MAX
from om.flows.purge_scan import TableScan
from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView
from om.schema.seam import Seam
from om.schema.tables import TableId

logger = logging.getLogger(__name__)
Submit = Callable[[om_pb2.OMRequest], asyncio.Future[om_pb2.OMResponse]]
Row = TypeVar("Row")


SCAN_PAGES = 4    # a keys step scans at most this many times rows_max rows
PENDING_COUNTED = 10_000   # deleted directories the gauge counts at most


@dataclass(frozen=True)
class PurgeConfig:
    """How fast and after how long the purges remove rows."""

    interval_s: float = Purge.interval_s     # the defaults: om.config.Purge's ([purge])
    rows_max: int = Purge.rows_max
    deleted_retention_s: float = Purge.deleted_retention_s
    open_key_expire_s: float = Purge.open_key_expire_s
    multipart_expire_s: float = Purge.multipart_expire_s

    def __post_init__(self) -> None:
        assert self.interval_s > 0
        assert self.rows_max > 0
        assert self.deleted_retention_s >= 0
        assert self.open_key_expire_s > 0
        assert self.multipart_expire_s > 0


def _deleted_at(row: om_pb2.RepeatedKeyInfo) -> int:
    """When a deletedTable row's last version left: it is due once all of them are."""
    return max((version.deletion_time for version in row.key_info), default=0)


def _opened_at(info: om_pb2.KeyInfo) -> int | None:
    """When an open row was created; None for an upload's own row (it goes with it)."""
    return None if info.multipart_upload_id == str(info.open_client_id) else info.creation_time


def _initiated_at(upload: om_pb2.MultipartKeyInfo) -> int:
    return upload.creation_time


class Purger:
    """Submits purge steps while rows wait, one at a time.

    Invariants: every store read happens on the event loop, in a step or in
    ``count_pending``; ``_scans`` holds what the scans learned in term ``_term``
    only; each time-based step reads at most ``SCAN_PAGES * rows_max`` rows of a
    table."""

    def __init__(self, view: ReadView, submit: Submit, ready_term: Callable[[], int | None],
                 config: PurgeConfig, user: str, seam: Seam) -> None:
        """``ready_term``: the term in which this node is the ready leader free to
        purge, or None; ``seam``: the node's clock and randomness: an expiry cutoff
        rides in the replicated request (``created_before_ms``), so it comes from the
        seam's clock, and so does the "now" a pass starts at; the purger's client id
        (in every replicated purge request) from its randomness."""
        self._view = view
        self.clock_ms: Callable[[], int] = seam.clock_ms
        self._submit = submit
        self.ready_term = ready_term
        self.config = config
        self._user = user
        self._client_id = f"om-purge-{uuid.UUID(bytes=seam.randomness(16), version=4)}"
        self._calls = itertools.count(1)
        self._scans: dict[TableId, TableScan] = {}
        self._term: int | None = None
        self.pending_directories = 0
        self.rows_scanned = 0
        self.steps = 0
        self.purged = 0
        self.keys_purged = 0
        self.open_keys_deleted = 0
        self.uploads_aborted = 0

    def count_pending(self) -> bytes | None:
        """Counts the deleted directories waiting (up to ``PENDING_COUNTED``) into
        ``pending_directories``, the gauge's value; the first one's key, if any."""
        waiting = self._view.scan(om_pb2.DELETED_DIRECTORY, b"", None, PENDING_COUNTED)
        self.pending_directories = len(waiting)
        return waiting[0][0] if waiting else None

    def _bucket_of(self, deleted_directory: bytes) -> tuple[str, str] | None:
        """The bucket (volume, name) holding a deleted directory, if it is still there."""
        _, volume_id, bucket_id = deleted_directory.split(b"/", 3)[:3]
        for _, raw in self._view.scan(om_pb2.BUCKET, b"", None, 100_000):
            bucket = om_pb2.BucketInfo.FromString(raw)
            if str(bucket.object_id).encode() == bucket_id:
                volume_raw = self._view.get(om_pb2.VOLUME,
                                            tables.volume_key(bucket.volume_name))
                if volume_raw is not None and str(om_pb2.VolumeInfo.FromString(
                        volume_raw).object_id).encode() == volume_id:
                    return bucket.volume_name, bucket.bucket_name
        return None

    async def step(self) -> bool:
        """Submits one step of purging deleted subtrees; True when one was applied.
        ``pending_directories`` is what it saw waiting before it."""
        first = self.count_pending()
        found = None if first is None else self._bucket_of(first)
        if found is None:
            return False
        volume, bucket = found
        answer = await self._send(om_pb2.PurgeDirectories, "purge_directories",
                                  om_pb2.PurgeDirectoriesRequest(
                                      volume=volume, bucket=bucket,
                                      rows_max=self.config.rows_max))
        if answer is None:
            return False
        self.steps += 1
        self.purged += answer.purge_directories.purged
        return True

    async def purge_deleted_keys(self) -> int:
        """One step over deletedTable: removes rows past their retention; how many."""
        cutoff = self._cutoff_ms(self.config.deleted_retention_s)
        old = [key for key, _ in self._due_rows(om_pb2.DELETED, cutoff,
                                                om_pb2.RepeatedKeyInfo.FromString,
                                                _deleted_at)]
        if not old:
            return 0
        answer = await self._send(om_pb2.PurgeKeys, "purge_keys", om_pb2.PurgeKeysRequest(
            keys=old[:self.config.rows_max], retired_before_ms=cutoff))
        purged = 0 if answer is None else answer.purge_keys.purged
        self.keys_purged += purged
        return purged

    async def expire_open_keys(self) -> int:
        """One step over openKeyTable and openFileTable: removes open rows past their
        expiry; how many."""
        cutoff = self._cutoff_ms(self.config.open_key_expire_s)
        expired = [om_pb2.OpenKeyRef(table=table, key=key)
                   for table in (om_pb2.OPEN_KEY, om_pb2.OPEN_FILE)
                   for key, _ in self._due_rows(table, cutoff, om_pb2.KeyInfo.FromString,
                                                _opened_at)]
        if not expired:
            return 0
        answer = await self._send(om_pb2.DeleteOpenKeys, "delete_open_keys",
                                  om_pb2.DeleteOpenKeysRequest(
                                      open_keys=expired[:self.config.rows_max],
                                      created_before_ms=cutoff))
        deleted = 0 if answer is None else answer.delete_open_keys.deleted
        self.open_keys_deleted += deleted
        return deleted

    async def expire_multipart_uploads(self) -> int:
        """One step over multipartInfoTable: aborts uploads past their expiry; how many."""
        cutoff = self._cutoff_ms(self.config.multipart_expire_s)
        expired = [om_pb2.MultipartUploadRef(volume=upload.volume_name,
                                             bucket=upload.bucket_name,
                                             key=upload.key_name, upload_id=upload.upload_id)
                   for _, upload in self._due_rows(om_pb2.MULTIPART_INFO, cutoff,
                                                   om_pb2.MultipartKeyInfo.FromString,
                                                   _initiated_at)]
        if not expired:
            return 0
        step = min(self.config.rows_max, UPLOADS_MAX)
        answer = await self._send(om_pb2.AbortExpiredMultiPartUploads,
                                  "abort_expired_multipart_uploads",
                                  om_pb2.AbortExpiredMultiPartUploadsRequest(
                                      uploads=expired[:step], created_before_ms=cutoff))
        aborted = 0 if answer is None else answer.abort_expired_multipart_uploads.aborted
        self.uploads_aborted += aborted
        return aborted

    def _cutoff_ms(self, age_s: float) -> int:
        return max(0, self.clock_ms() - int(age_s * 1000))

    def _scan_of(self, table: TableId) -> TableScan:
        """``table``'s scan; all are forgotten when the ready term changed (a new term
        may hold rows another leader's clock stamped)."""
        term = self.ready_term()
        if term != self._term:
            self._scans, self._term = {}, term
        return self._scans.setdefault(table, TableScan())

    def _due_rows(self, table: TableId, cutoff_ms: int, parse: Callable[[bytes], Row],
                  time_of: Callable[[Row], int | None]) -> list[tuple[bytes, Row]]:
        """The rows of ``table``'s next page whose time (``time_of``; None: never due)
        is at or before ``cutoff_ms``, parsed; none, without a read, while its scan
        knows no row can be due."""
        scan = self._scan_of(table)
        if not scan.may_hold_due(cutoff_ms):
            return []
        now_ms, limit = self.clock_ms(), SCAN_PAGES * self.config.rows_max
        page = self._view.scan(table, b"", scan.cursor, limit)
        self.rows_scanned += len(page)
        due: list[tuple[bytes, Row]] = []
        later: list[int] = []
        for key, raw in page:
            row = parse(raw)
            time_ms = time_of(row)
            if time_ms is not None and time_ms <= cutoff_ms:
                due.append((key, row))
            elif time_ms is not None:
                later.append(time_ms)
        scan.read(now_ms, page[-1][0] if len(page) == limit else None, bool(due),
                  min(later, default=None))
        return due

    async def _send(self, cmd: om_pb2.Type.ValueType, body_field: str,
                    body: Message) -> om_pb2.OMResponse | None:
        """Submits one step; its answer when OK (else logged, None)."""
        request = om_pb2.OMRequest(cmd_type=cmd, client_id=self._client_id,
                                   call_id=next(self._calls), user=self._user)
        getattr(request, body_field).CopyFrom(body)
        answer = await self._submit(request)
        if answer.status != om_pb2.OK:
            logger.info("%s step: %s %s", om_pb2.Type.Name(cmd),
                        om_pb2.Status.Name(answer.status), answer.message)
            return None
        return answer

    async def _count_only(self) -> None:
        """What a node that does not lead does each interval: keeps its gauge current."""
        self.count_pending()

    async def run_forever(self) -> None:
        """Purges while this node is the ready leader: each kind one step an interval;
        a node that does not lead only counts the deleted directories (its gauge)."""
        while True:
            await asyncio.sleep(self.config.interval_s)
            leading = self.ready_term() is not None
            steps = (self.step, self.purge_deleted_keys, self.expire_open_keys,
                     self.expire_multipart_uploads) if leading else (self._count_only,)
            for step in steps:
                if leading and self.ready_term() is None:
                    break
                try:
                    await step()
                except Exception:
                    logger.exception("a purge step failed; the next one tries again")
