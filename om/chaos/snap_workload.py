"""The chaos run's OM-snapshot workload: snapshots of the register bucket, read through.

One worker (a history process, ``om.chaos.history``) runs, one at a time:

* ``snap_create``: CreateSnapshot of the register bucket, named ``s<n>`` (``n``
  unique across the run); one that may exist joins the worker's list;
* ``snap_read``: LookupKey of a register key through one listed snapshot
  (``.snapshot/<name>/<key>``): what the register held when the snapshot was taken;
* ``snap_delete``: DeleteSnapshot of the oldest listed snapshot, once more than
  ``SNAPSHOTS_KEPT`` are listed (the worker forgets it whatever the answer, so the
  list stays bounded, and a snapshot whose create was unknown is deleted too rather
  than left to fill the bucket's snapshot limit). A read through a snapshot whose
  create was unknown is recorded but not judged.

The register workers write the bucket meanwhile, so the checker
(``om.chaos.snap_checkers``) can tell whether a read through a snapshot saw the
bucket as it was when the snapshot was taken. Outcomes as in
``om.chaos.workload``.
"""

from __future__ import annotations

import threading
import time

from om.chaos.history import SNAPSHOT, F, Outcome
from om.chaos.workload import (
    REGISTER_BUCKET,
    VOLUME,
    Recorder,
    Worker,
    WorkloadConfig,
    outcome_of,
    register_key,
)
from om.client import requests as build
from om.protocol import om_pb2
from om.security.tls import ClientTls

SNAPSHOTS_KEPT = 3
CREATE_SHARE = 0.1          # of the steps; reads are the rest (deletes follow creates)
STEP_PAUSE_S = 0.5          # <= 2 steps/s: the checker judges each read against its key's
                            # writes, and the snapshots' checkpoints cost the nodes disk


class SnapWorker(Worker):
    """One snapshot client on the register bucket."""

    def __init__(self, process: int, addresses: list[str], recorder: Recorder,
                 config: WorkloadConfig, stop: threading.Event,
                 tls: ClientTls | None = None) -> None:
        super().__init__(process, addresses, recorder, config, stop, tls)
        self.snapshots: list[str] = []     # acknowledged, not yet deleted; oldest first

    def snap_step(self) -> None:
        """One create (and the delete it makes due), or one read through a snapshot."""
        if not self.snapshots or self._rng.random() < CREATE_SHARE:
            self._create()
            if len(self.snapshots) > SNAPSHOTS_KEPT:
                self._delete(self.snapshots.pop(0))
        else:
            self._read(self._rng.choice(self.snapshots))
        self._stop.wait(STEP_PAUSE_S)

    def _create(self) -> None:
        name = f"s{self._recorder.next_value()}"
        started = time.monotonic_ns()
        done = self._send(build.create_snapshot(VOLUME, REGISTER_BUCKET, name))
        outcome = outcome_of(done)
        self._snap_record(F.SNAP_CREATE, name, None, started, outcome)
        if outcome is not Outcome.FAIL:   # an unknown one too, so that it is deleted in turn
            self.snapshots.append(name)

    def _delete(self, name: str) -> None:
        started = time.monotonic_ns()
        done = self._send(build.delete_snapshot(VOLUME, REGISTER_BUCKET, name))
        self._snap_record(F.SNAP_DELETE, name, None, started, outcome_of(done))

    def _read(self, name: str) -> None:
        key = register_key(self._rng.randrange(self._config.register_keys))
        started = time.monotonic_ns()
        done = self._send(build.lookup_key(VOLUME, REGISTER_BUCKET, build.snapshot_key(name, key)))
        if done is not None and done.status == om_pb2.OK:
            value: int | None = done.lookup_key.key_info.data_size
            outcome = Outcome.OK
        else:
            value = None
            outcome = Outcome.OK if done is not None and done.status == om_pb2.KEY_NOT_FOUND \
                else Outcome.FAIL
        self._snap_record(F.SNAP_READ, key, value, started, outcome, name)

    def _snap_record(self, f: F, key: str, value: int | None, started: int, outcome: Outcome,
                     snapshot: str = "") -> None:
        self._record(f, key, value, started, outcome, self._client.last_retries,
                     extra={SNAPSHOT: snapshot} if snapshot else None)
