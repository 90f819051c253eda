"""The chaos run's clients: worker threads that drive the cluster and record a history.

The workloads run side by side, each worker its own history process id:

* **register**: put (CreateKey + CommitKey, the committed size being a value
  unique per key), get (LookupKey) and delete of a few keys of one bucket, for
  the lost-write and per-key linearizability checks;
* **add**: commits of fresh keys into the exactly-once buckets, each charging
  its size to the bucket, for the exactly-once bounds check. With probability
  ``duplicate_send`` an acknowledged commit is sent again with the same call
  id, as a network that lost the reply would make the client do: with the
  retry cache on, the answer is the original one; off, the commit runs again;
* **mpu** (``om/chaos/mpu_workload.py``): multipart uploads completed or
  aborted, for the multipart checker (``om/chaos/mpu_checkers.py``);
* **snap** (``om/chaos/snap_workload.py``): OM snapshots of the register
  bucket, read through, for the snapshot checker (``om/chaos/snap_checkers.py``);
* **fs** (``om/chaos/fs_workload.py``): mkdir, create, rename and ``rm -r`` on
  the FILE_SYSTEM_OPTIMIZED bucket, for the tree, quota and audit checks
  (``om/chaos/fs_checkers.py``).

Outcomes follow om/chaos/history.py: ``ok`` only for a definite success,
``fail`` only when the operation certainly did not apply (a definite error
status), ``info`` for everything ambiguous (deadline passed, connection lost,
NOT_LEADER after the request may have been sent). Every loop is bounded by a
stop event and an operation count.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from om.chaos.history import F, History, Op, Outcome
from om.client import OMClient, OMConnectionError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.protocol import om_pb2
from om.security.tls import ClientTls

VOLUME = "chaos"
REGISTER_BUCKET = "register"
ADD_BUCKETS = ("exactly-once-1", "exactly-once-2")
FS_BUCKET = "fso"                    # the file-system workload's (om/chaos/fs_workload.py)
FSO_LAYOUT = "FILE_SYSTEM_OPTIMIZED"
MPU_BUCKET = "mpu"                   # the multipart workload's (om/chaos/mpu_workload.py)
AMBIGUOUS = frozenset({om_pb2.NOT_LEADER, om_pb2.LEADER_NOT_READY, om_pb2.SERVER_BUSY,
                       om_pb2.TIMEOUT, om_pb2.INTERNAL_ERROR})


@dataclass(frozen=True)
class WorkloadConfig:
    """How many clients, over what keys, with which faults of their own."""

    register_workers: int = 4
    add_workers: int = 2
    fs_workers: int = 0
    mpu_workers: int = 0
    snap_workers: int = 0
    register_keys: int = 24
    ops_per_worker_max: int = 20_000
    duplicate_send: float = 0.05
    deadline_s: float = 8.0
    attempt_timeout_s: float = 1.5
    seed: int = 1
    op_pause_s: float = 0.0           # between one worker's operations: paces a long run


@dataclass
class Recorder:
    """The shared, thread-safe history under construction."""

    ops: list[Op] = field(default_factory=list)
    duplicate_sends: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _values: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_op_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def next_value(self) -> int:
        """A put value unique across the whole history."""
        with self._lock:
            return next(self._values)

    def add(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def history(self) -> History:
        with self._lock:
            return History(tuple(self.ops))


def register_key(number: int) -> str:
    """The name of register key ``number``."""
    return f"k{number:03d}"


def _outcome(response: om_pb2.OMResponse) -> Outcome:
    if response.status == om_pb2.OK:
        return Outcome.OK
    return Outcome.INFO if response.status in AMBIGUOUS else Outcome.FAIL


def outcome_of(response: om_pb2.OMResponse | None) -> Outcome:
    """A final answer's outcome; no answer at all (the client gave up) is ``info``."""
    return Outcome.INFO if response is None else _outcome(response)


class Worker:
    """One client thread: a history process that runs one operation at a time."""

    def __init__(self, process: int, addresses: list[str], recorder: Recorder,
                 config: WorkloadConfig, stop: threading.Event,
                 tls: ClientTls | None = None) -> None:
        self.process = process
        self._recorder = recorder
        self._config = config
        self._stop = stop
        self._rng = random.Random(config.seed * 1000 + process)
        policy = RetryPolicy(deadline_s=config.deadline_s,
                             attempt_timeout_s=config.attempt_timeout_s)
        self._client = OMClient(addresses, policy=policy, client_id=f"chaos-{process}",
                                tls=tls)
        self.retries = 0
        self.ops = 0

    def run(self, step: Callable[[], None]) -> None:
        """Runs ``step`` until stopped or the operation budget is spent."""
        try:
            for _ in range(self._config.ops_per_worker_max):
                if self._stop.is_set():
                    return
                step()
                self.ops += 1
                if self._config.op_pause_s:
                    self._stop.wait(self._config.op_pause_s)
        finally:
            self._client.close()

    def _send(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse | None:
        """The final answer, or None when the client gave up (ambiguous)."""
        try:
            response = self._client.call_raw(request)
        except OMConnectionError:
            response = None
        self.retries += self._client.last_retries
        return response

    def _record(self, f: F, key: str, value: int | None, started: int, outcome: Outcome,
                retries: int, object_id: int = 0, extra: dict[str, Any] | None = None) -> None:
        """Records one operation; ``extra``: what a workload's checker needs besides."""
        done = time.monotonic_ns()
        extra = dict(extra or {})
        if object_id and outcome is Outcome.OK:
            extra["object_id"] = object_id
        self._recorder.add(Op(self.process, self._recorder.next_op_id(), f, key,
                              value if outcome is Outcome.OK or f is not F.GET else None,
                              started, done, outcome, self._client.last_node or None,
                              retries, extra))

    def register_step(self) -> None:
        """One put, get or delete of a register key."""
        key = register_key(self._rng.randrange(self._config.register_keys))
        choice = self._rng.random()
        if choice < 0.5:
            self._put(key)
        elif choice < 0.85:
            self._get(key)
        else:
            self._delete(key)

    def _put(self, key: str) -> None:
        value = self._recorder.next_value()
        started = time.monotonic_ns()
        opened = self._send(build.create_key(VOLUME, REGISTER_BUCKET, key, value, 1))
        if opened is None or opened.status != om_pb2.OK:
            outcome = Outcome.FAIL if opened is not None else Outcome.INFO
            self._record(F.PUT, key, value, started, outcome, self._client.last_retries)
            return
        session = opened.create_key.client_session_id
        committed = self._send(build.commit_key(VOLUME, REGISTER_BUCKET, key, session, value))
        outcome = Outcome.INFO if committed is None else _outcome(committed)
        object_id = committed.commit_key.key_info.object_id if committed else 0
        self._record(F.PUT, key, value, started, outcome, self._client.last_retries, object_id)

    def _get(self, key: str) -> None:
        started = time.monotonic_ns()
        response = self._send(build.lookup_key(VOLUME, REGISTER_BUCKET, key))
        if response is not None and response.status == om_pb2.OK:
            self._record(F.GET, key, response.lookup_key.key_info.data_size, started,
                         Outcome.OK, self._client.last_retries)
        elif response is not None and response.status == om_pb2.KEY_NOT_FOUND:
            self._record(F.GET, key, None, started, Outcome.OK, self._client.last_retries)
        else:
            self._record(F.GET, key, None, started, Outcome.FAIL, self._client.last_retries)

    def _delete(self, key: str) -> None:
        started = time.monotonic_ns()
        response = self._send(build.delete_key(VOLUME, REGISTER_BUCKET, key))
        if response is not None and response.status == om_pb2.KEY_NOT_FOUND:
            self._record(F.GET, key, None, started, Outcome.OK, self._client.last_retries)
            return
        outcome = Outcome.INFO if response is None else _outcome(response)
        self._record(F.DELETE, key, None, started, outcome, self._client.last_retries)

    def add_step(self) -> None:
        """One commit of a fresh key into an exactly-once bucket."""
        bucket = self._rng.choice(ADD_BUCKETS)
        delta = self._rng.randrange(1, 1000)
        key = f"p{self.process}-{self._recorder.next_op_id()}"
        started = time.monotonic_ns()
        opened = self._send(build.create_key(VOLUME, bucket, key, delta, 1))
        if opened is None or opened.status != om_pb2.OK:
            outcome = Outcome.FAIL if opened is not None else Outcome.INFO
            self._record(F.ADD, bucket, delta, started, outcome, 0)
            return
        commit = build.commit_key(VOLUME, bucket, key, opened.create_key.client_session_id,
                                  delta)
        response = self._send(commit)
        retries = self._client.last_retries
        if response is not None and self._rng.random() < self._config.duplicate_send:
            self._recorder.duplicate_sends += 1
            response = self._send(commit)  # same call id: the reply was "lost"
            retries += 1 + self._client.last_retries
        outcome = Outcome.INFO if response is None else _outcome(response)
        object_id = response.commit_key.key_info.object_id if response else 0
        self._record(F.ADD, bucket, delta, started, outcome, retries, object_id)


def set_up(addresses: list[str], tls: ClientTls | None = None) -> None:
    """Creates the chaos volume and buckets (idempotent)."""
    policy = RetryPolicy(deadline_s=30.0)
    with OMClient(addresses, policy=policy, tls=tls) as client:
        for request in [build.create_volume(VOLUME), build.create_bucket(VOLUME, REGISTER_BUCKET),
                        *(build.create_bucket(VOLUME, b) for b in ADD_BUCKETS),
                        build.create_bucket(VOLUME, FS_BUCKET, layout=FSO_LAYOUT),
                        build.create_bucket(VOLUME, MPU_BUCKET)]:
            response = client.call_raw(request)
            assert response.status in (om_pb2.OK, om_pb2.VOLUME_ALREADY_EXISTS,
                                       om_pb2.BUCKET_ALREADY_EXISTS), response.message
