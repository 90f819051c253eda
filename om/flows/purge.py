"""The leader's background purge of deleted subtrees (Ozone's DirectoryDeletingService).

``rm -r`` of a directory in a file-system bucket writes one tombstone
(deletedDirectoryTable) and returns: the subtree is unreachable at once. This
service then purges it, on the leader only, in bounded steps: each step is a
``PurgeDirectories`` request the leader submits through its own write path (so it
takes the bucket's read lock, gets a managed index, and is replicated and applied
like any write: followers never compute anything). A step removes at most
``rows_max`` entries of one deleted directory (``om.executor.fso_keys``), releasing
their bytes and namespace from the bucket; nested directories become tombstones of
their own. Steps run one at a time, at most one every ``interval_s`` while there is
work, so a purge never crowds out client writes.

Idempotent across leader changes and crashes: each step is computed from applied
state by whoever leads; a deposed leader's step that commits after its successor's
barrier is skipped at apply (an older term), one that commits before it is seen.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from om.protocol import om_pb2
from om.schema import tables
from om.schema.read_view import ReadView

logger = logging.getLogger(__name__)
Submit = Callable[[om_pb2.OMRequest], asyncio.Future[om_pb2.OMResponse]]


@dataclass(frozen=True)
class PurgeConfig:
    """How fast deleted subtrees are purged."""

    interval_s: float = 1.0
    rows_max: int = 1000

    def __post_init__(self) -> None:
        assert self.interval_s > 0
        assert self.rows_max > 0


class DirectoryPurger:
    """Submits purge steps while deleted subtrees wait, one at a time."""

    def __init__(self, view: ReadView, submit: Submit, ready: Callable[[], bool],
                 config: PurgeConfig, user: str) -> None:
        self._view = view
        self._submit = submit
        self._ready = ready
        self.config = config
        self._user = user
        self._client_id = f"om-purge-{uuid.uuid4()}"
        self._calls = itertools.count(1)
        self.steps = 0
        self.purged = 0

    def pending(self, limit: int = 10_000) -> int:
        """Deleted directories waiting for their purge (counted up to ``limit``)."""
        return len(self._view.scan(om_pb2.DELETED_DIRECTORY, b"", None, limit))

    def next_bucket(self) -> tuple[str, str] | None:
        """The bucket (volume, name) of the first deleted directory, if any."""
        found = self._view.scan(om_pb2.DELETED_DIRECTORY, b"", None, 1)
        if not found:
            return None
        _, volume_id, bucket_id = found[0][0].split(b"/", 3)[:3]
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
        """Submits one purge step; True when one was applied."""
        found = self.next_bucket()
        if found is None:
            return False
        volume, bucket = found
        request = om_pb2.OMRequest(
            cmd_type=om_pb2.PurgeDirectories, client_id=self._client_id,
            call_id=next(self._calls), user=self._user,
            purge_directories=om_pb2.PurgeDirectoriesRequest(
                volume=volume, bucket=bucket, rows_max=self.config.rows_max))
        answer = await self._submit(request)
        if answer.status != om_pb2.OK:
            logger.info("purge step in /%s/%s: %s %s", volume, bucket,
                        om_pb2.Status.Name(answer.status), answer.message)
            return False
        self.steps += 1
        self.purged += answer.purge_directories.purged
        return True

    async def run_forever(self) -> None:
        """Purges while this node is the ready leader, one step an interval."""
        while True:
            await asyncio.sleep(self.config.interval_s)
            if self._ready():
                try:
                    await self.step()
                except Exception:
                    logger.exception("a purge step failed; the next one tries again")
