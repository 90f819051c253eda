"""The chaos run's multipart-upload workload: initiate, commit parts, complete or abort.

Each worker is a history process (``om.chaos.history``) that runs one upload at a
time on the OBJECT_STORE bucket ``MPU_BUCKET``, under a key of its own
(``u<n>``, ``n`` unique across the run), so a key found after the run names the
one upload that could have made it:

* InitiateMultiPartUpload, then 2 or 3 parts (CreateKey with the upload id, then
  CommitMultiPartUpload), every part but the last ``PART_BIG`` bytes or more (the
  server rejects a smaller one that is followed by another: ENTITY_TOO_SMALL);
* then, with probability ``ABORT_SHARE``, AbortMultiPartUpload (``mpu_abort``),
  else CompleteMultiPartUpload with the parts' names (``mpu_complete``, its value
  the parts' summed size).

Every request goes through the client's retry policy, so a retry reuses its call
id, as in the other workloads. Outcomes as in ``om.chaos.workload``; an upload
that failed before its complete was sent is a ``fail`` complete (certainly not
applied) followed, when it has an upload id, by an abort attempt, recorded too.
The checker is ``om.chaos.mpu_checkers``.
"""

from __future__ import annotations

import time

from om.chaos.history import UPLOAD_ID, F, Outcome
from om.chaos.workload import MPU_BUCKET, VOLUME, Worker, outcome_of
from om.client import requests as build
from om.protocol import om_pb2

PART_BIG = 5 * 1024 * 1024        # Limits.multipart_min_part_bytes
ABORT_SHARE = 0.2


class MpuWorker(Worker):
    """One multipart client: a history process on ``MPU_BUCKET``."""

    def mpu_step(self) -> None:
        """One upload, from initiate to its complete or abort."""
        key = f"u{self._recorder.next_value()}"
        abort = self._rng.random() < ABORT_SHARE
        sizes = self._sizes()
        started = time.monotonic_ns()
        retries = 0
        opened = self._send(build.initiate_multipart_upload(VOLUME, MPU_BUCKET, key, 1))
        retries += self._client.last_retries
        if opened is None or opened.status != om_pb2.OK:
            f, value = (F.MPU_ABORT, None) if abort else (F.MPU_COMPLETE, sum(sizes))
            self._mpu_record(f, key, value, started, Outcome.FAIL, retries, "")
            return
        upload_id = opened.initiate_multipart_upload.upload_id
        parts: list[tuple[int, str]] = []
        for number, size in enumerate(sizes, start=1):
            name = self._part(key, upload_id, number, size)
            retries += self._client.last_retries
            if name is None:
                if not abort:
                    self._mpu_record(F.MPU_COMPLETE, key, sum(sizes), started, Outcome.FAIL,
                                     retries, upload_id)
                    started = time.monotonic_ns()
                self._abort(key, upload_id, started, retries)
                return
            parts.append((number, name))
        if abort:
            self._abort(key, upload_id, started, retries)
            return
        done = self._send(build.complete_multipart_upload(VOLUME, MPU_BUCKET, key, upload_id,
                                                          parts))
        retries += self._client.last_retries
        self._mpu_record(F.MPU_COMPLETE, key, sum(sizes), started, outcome_of(done), retries,
                         upload_id)

    def _sizes(self) -> list[int]:
        count = self._rng.choice((2, 3))
        return [PART_BIG + self._rng.randrange(1000) for _ in range(count - 1)] + \
            [1 + self._rng.randrange(1000)]

    def _part(self, key: str, upload_id: str, number: int, size: int) -> str | None:
        """The committed part's name, or None when it is not certainly committed."""
        opened = self._send(build.create_key(VOLUME, MPU_BUCKET, key, size, 1,
                                             upload_id=upload_id))
        if opened is None or opened.status != om_pb2.OK:
            return None
        committed = self._send(build.commit_multipart_upload(
            VOLUME, MPU_BUCKET, key, upload_id, number, opened.create_key.client_session_id,
            size))
        if committed is None or committed.status != om_pb2.OK:
            return None
        return committed.commit_multipart_upload.part_name

    def _abort(self, key: str, upload_id: str, started: int, retries: int) -> None:
        done = self._send(build.abort_multipart_upload(VOLUME, MPU_BUCKET, key, upload_id))
        self._mpu_record(F.MPU_ABORT, key, None, started, outcome_of(done),
                         retries + self._client.last_retries, upload_id)

    def _mpu_record(self, f: F, key: str, value: int | None, started: int, outcome: Outcome,
                    retries: int, upload_id: str) -> None:
        self._record(f, key, value, started, outcome, retries,
                     extra={UPLOAD_ID: upload_id} if upload_id else None)
