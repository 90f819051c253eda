"""The chaos run's file-system workload: mkdir, create, rename and ``rm -r`` on an FSO bucket.

Each worker is a history process (``om.chaos.history``) that runs, one at a time:

* ``mkdir``: CreateDirectory (``mkdir -p``) of ``<parent>/d<n>``;
* ``create``: CreateFile (neither recursive nor overwriting) of ``<parent>/f<n>``,
  then CommitKey of the session it got, with the file's size;
* ``rename``: RenameKey of a directory to ``<parent>/r<n>`` (the whole subtree moves);
* ``rmr``: DeleteKey of a directory with ``recursive`` (``rm -r``).

``n`` is unique across the whole run, so every name an op creates is its own: a
name found in the final tree tells which ops could have made it, which is what
the tree checker (``om.chaos.fs_checkers``) relies on. Parents are picked from
the directories the workers believe exist (``Namespace``, updated from their
definite answers); that belief goes stale under concurrent renames and deletes,
which only makes some ops fail, never the history wrong.

Outcomes as in ``om.chaos.workload``: ``ok`` for a definite success, ``fail`` for
a definite error, ``info`` when unknown. A create whose CreateFile answer is
unknown is ``fail``: its commit is never sent, and only that commit, with the
session id the lost answer held, can turn the open file into a file. Every loop
is bounded by the stop event and the operation budget (``Worker.run``).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from om.chaos.history import RENAME_TO, F, Op, Outcome
from om.chaos.workload import FS_BUCKET, VOLUME, Recorder, Worker, WorkloadConfig, outcome_of
from om.client import requests as build
from om.protocol import om_pb2
from om.security.tls import ClientTls

DEPTH_MAX = 4          # directory levels the workload builds (renames respect it too)
DIRECTORIES_MAX = 48   # above this many known directories, no mkdir: files instead
FILE_REPLICATION = 1   # the files' replication factor (quota charges size x factor)
STALE = frozenset({om_pb2.KEY_NOT_FOUND, om_pb2.DIRECTORY_NOT_FOUND, om_pb2.FILE_NOT_FOUND})


def depth(path: str) -> int:
    """Components of a path; the bucket's root ("") has none."""
    return 0 if not path else path.count("/") + 1


def below(path: str, top: str) -> bool:
    """Whether ``path`` is ``top`` or inside it."""
    return path == top or path.startswith(top + "/")


@dataclass
class Namespace:
    """The directories the workers believe exist (shared, thread-safe). A belief, not a
    model: it only steers the workload towards ops that can succeed."""

    directories: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, rng: random.Random, *, with_root: bool, max_depth: int = DEPTH_MAX) -> str:
        """A directory believed to exist, at most ``max_depth`` deep, or the root ("")
        when ``with_root``; "" also when there is nothing to pick."""
        with self._lock:
            choices = sorted(d for d in self.directories if depth(d) <= max_depth)
        if with_root:
            choices.append("")
        return rng.choice(choices) if choices else ""

    def count(self) -> int:
        with self._lock:
            return len(self.directories)

    def height(self, top: str) -> int:
        """Levels of the known subtree of ``top``, ``top`` itself included."""
        with self._lock:
            return max((depth(d) - depth(top) + 1 for d in self.directories
                        if below(d, top)), default=1)

    def add(self, path: str) -> None:
        """``path`` and its parents exist (``mkdir -p``)."""
        parts = path.split("/")
        with self._lock:
            self.directories.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))

    def forget(self, top: str) -> None:
        """``top`` and its subtree are gone, or nobody knows where they are."""
        with self._lock:
            self.directories = {d for d in self.directories if not below(d, top)}

    def move(self, source: str, dest: str) -> None:
        """The subtree of ``source`` is now at ``dest``."""
        with self._lock:
            moved = {dest + d[len(source):] for d in self.directories if below(d, source)}
            self.directories = {d for d in self.directories if not below(d, source)} | moved


class FsWorker(Worker):
    """One file-system client: a history process on the FSO bucket."""

    def __init__(self, process: int, addresses: list[str], recorder: Recorder,
                 config: WorkloadConfig, stop: threading.Event, namespace: Namespace,
                 tls: ClientTls | None = None) -> None:
        super().__init__(process, addresses, recorder, config, stop, tls)
        self._namespace = namespace

    def fs_step(self) -> None:
        """One mkdir, create, rename or rm -r."""
        choice = self._rng.random()
        if choice < 0.3 and self._namespace.count() < DIRECTORIES_MAX:
            self._mkdir()
        elif choice < 0.75:
            self._create()
        elif choice < 0.9:
            self._rename()
        else:
            self._rmr()

    def _fresh(self, parent: str, prefix: str) -> str:
        name = f"{prefix}{self._recorder.next_value()}"
        return f"{parent}/{name}" if parent else name

    def _fs_record(self, f: F, path: str, value: int | None, started: int, outcome: Outcome,
                   retries: int, **extra: str | int) -> None:
        self._recorder.add(Op(self.process, self._recorder.next_op_id(), f, path, value,
                              started, time.monotonic_ns(), outcome,
                              self._client.last_node or None, retries, extra))

    def _mkdir(self) -> None:
        path = self._fresh(self._namespace.pick(self._rng, with_root=True,
                                                max_depth=DEPTH_MAX - 1), "d")
        started = time.monotonic_ns()
        response = self._send(build.create_directory(VOLUME, FS_BUCKET, path))
        outcome = outcome_of(response)
        if outcome is Outcome.OK:
            self._namespace.add(path)
        elif response is not None and response.status in STALE | {om_pb2.FILE_ALREADY_EXISTS}:
            self._namespace.forget(path.rpartition("/")[0] or path)
        self._fs_record(F.MKDIR, path, None, started, outcome, self._client.last_retries)

    def _create(self) -> None:
        parent = self._namespace.pick(self._rng, with_root=True)
        path = self._fresh(parent, "f")
        size = self._rng.randrange(1, 1000)
        started = time.monotonic_ns()
        opened = self._send(build.create_file(VOLUME, FS_BUCKET, path, size,
                                              replication_factor=FILE_REPLICATION))
        retries = self._client.last_retries
        if opened is None or opened.status != om_pb2.OK:
            # Nothing can commit this file: the session id is in the answer we lack.
            if opened is not None and opened.status in STALE and parent:
                self._namespace.forget(parent)
            self._fs_record(F.CREATE, path, size, started, Outcome.FAIL, retries,
                            stage="create")
            return
        committed = self._send(build.commit_key(VOLUME, FS_BUCKET, path,
                                                opened.create_file.client_session_id, size))
        retries += self._client.last_retries
        outcome = outcome_of(committed)
        if committed is not None and committed.status in STALE and parent:
            self._namespace.forget(parent)
        extra: dict[str, str | int] = {"stage": "commit"}
        if outcome is Outcome.OK and committed is not None:
            extra["object_id"] = committed.commit_key.key_info.object_id
        self._fs_record(F.CREATE, path, size, started, outcome, retries, **extra)

    def _rename(self) -> None:
        source = self._namespace.pick(self._rng, with_root=False)
        if not source:
            self._mkdir()
            return
        room = DEPTH_MAX - self._namespace.height(source)
        parent = self._namespace.pick(self._rng, with_root=True, max_depth=room)
        if below(parent, source):
            parent = ""   # into itself: the server would refuse it; the root cannot
        dest = self._fresh(parent, "r")
        started = time.monotonic_ns()
        response = self._send(build.rename_key(VOLUME, FS_BUCKET, source, dest))
        outcome = outcome_of(response)
        if outcome is Outcome.OK:
            self._namespace.move(source, dest)
        elif outcome is Outcome.INFO or (response is not None and response.status in STALE):
            self._namespace.forget(source)
            if response is not None and response.status == om_pb2.DIRECTORY_NOT_FOUND:
                self._namespace.forget(parent)
        self._fs_record(F.RENAME, source, None, started, outcome, self._client.last_retries,
                        **{RENAME_TO: dest})

    def _rmr(self) -> None:
        target = self._namespace.pick(self._rng, with_root=False)
        if not target:
            self._mkdir()
            return
        started = time.monotonic_ns()
        response = self._send(build.delete_key(VOLUME, FS_BUCKET, target, recursive=True))
        outcome = outcome_of(response)
        if outcome is not Outcome.FAIL or (response is not None and response.status in STALE):
            self._namespace.forget(target)
        self._fs_record(F.RMR, target, None, started, outcome, self._client.last_retries)
