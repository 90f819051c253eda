"""Locust users driving the OM through the blocking ``OMClient`` (no asyncio here).

    locust -f bench/locustfile.py --host 127.0.0.1:9862[,host:port...]      # web UI
    locust -f bench/locustfile.py --headless -u 32 -r 32 -t 30s \\
           --host 127.0.0.1:9862 --csv out/run [--processes 2]

The OM addresses come from ``--host`` (a comma-separated host:port list), else
``$OM_ADDRESS``, else 127.0.0.1:9862. A secure cluster's certificate comes from
``$OM_CERT``, ``$OM_KEY`` and ``$OM_CA``, else from the cluster directory
``$OM_CLUSTER_DIR``, else from the last cluster started (``om cluster up``) when it
serves those addresses (as ``om sh`` finds it); the user is then the
certificate's. ``OMClient`` uses plain sockets, which
gevent (imported by locust) makes cooperative, so each user is one greenlet
with one connection. CPU-bound protobuf work serializes the users of one
process on one core: use ``--processes`` when the generator saturates it.

Every request is reported separately (``CreateKey``, ``CommitKey``,
``LookupKey``, ``ListKeys``, ``DeleteKey``, ``RenameKey``) with its response
time and size; a non-OK status is reported as an exception named after the
status (``KEY_NOT_FOUND``), a transport failure as ``CLIENT_ERROR``. Each user
works on its own keys (``<user prefix>/<n>``, the most recent ``KEYS_KEPT``
remembered), so in a healthy cluster no request fails.

Environment: ``OM_VOLUME`` (vol1), ``OM_BUCKETS`` (how many buckets, 4),
``OM_KEY_SIZE`` (bytes recorded per key, 0), and ``OM_TRACE`` (a path; when set,
every request is also written as a schema-v1 ``client_request`` trace record,
``{pid}`` in the path is replaced by the process id) with ``OM_TRACE_FLOW``
(flow name, ``locust``). The volume and buckets are created on first use,
idempotently (already existing is fine).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from locust import User, constant, events, task

from bench.traces import CLIENT_ERROR, ClientTrace, op_name
from om.client import OMClient, OMClientError
from om.client import requests as build
from om.client.identity import DEFAULT_ADDRESS, split_addresses
from om.client.retry_policy import RetryPolicy
from om.cluster.credentials import environment_tls
from om.protocol import om_pb2

REQUEST_TYPE = "om"
KEYS_KEPT = 1000
LIST_MAX_KEYS = 100
VOLUME = os.environ.get("OM_VOLUME", "vol1")
BUCKETS = tuple(f"bucket{i + 1}" for i in range(int(os.environ.get("OM_BUCKETS", "4"))))
KEY_SIZE = int(os.environ.get("OM_KEY_SIZE", "0"))
POLICY = RetryPolicy(deadline_s=30.0, attempt_timeout_s=10.0)
_TOLERATED = frozenset({om_pb2.OK, om_pb2.VOLUME_ALREADY_EXISTS, om_pb2.BUCKET_ALREADY_EXISTS})
# Address lists whose volume and buckets this process has created.
_prepared: set[tuple[str, ...]] = set()
_status_errors: dict[str, type[OMRequestFailure]] = {}
_trace: ClientTrace | None = None


class OMRequestFailure(Exception):
    """A request that did not end OK; the subclass is named after the status."""

    def __repr__(self) -> str:
        return type(self).__name__

    def __str__(self) -> str:
        return type(self).__name__


def status_error(status: str) -> OMRequestFailure:
    """An exception whose class is named ``status`` (e.g. ``KEY_NOT_FOUND``)."""
    if status not in _status_errors:
        _status_errors[status] = type(status, (OMRequestFailure,), {})
    return _status_errors[status]()


def om_addresses(host: str | None) -> list[str]:
    """``--host``, else ``$OM_ADDRESS``, else the default, as a list of host:port."""
    raw = host or os.environ.get("OM_ADDRESS") or DEFAULT_ADDRESS
    return split_addresses(raw)


def trace() -> ClientTrace:
    """This process's client trace (``$OM_TRACE``), or one that records nothing."""
    global _trace
    if _trace is None:
        path = os.environ.get("OM_TRACE")
        flow = os.environ.get("OM_TRACE_FLOW", "locust")
        _trace = (ClientTrace.open(Path(path.replace("{pid}", str(os.getpid()))), flow)
                  if path else ClientTrace.off())
    return _trace


def _close_trace(**_: Any) -> None:
    """Writes out the trace when locust quits."""
    if _trace is not None:
        _trace.close()


events.quitting.add_listener(_close_trace)  # type: ignore[no-untyped-call]


def prepare(client: OMClient) -> None:
    """Creates the volume and buckets once per process (tolerating that they exist)."""
    addresses = tuple(client.addresses)
    if addresses in _prepared:
        return
    for request in (build.create_volume(VOLUME),
                    *(build.create_bucket(VOLUME, b) for b in BUCKETS)):
        response = client.call_raw(request)
        if response.status not in _TOLERATED:
            raise RuntimeError(f"cannot prepare {VOLUME}: "
                               f"{om_pb2.Status.Name(response.status)}: {response.message}")
    _prepared.add(addresses)


class OMUser(User):
    """One client: omkg-style writes, lookups, lists, deletes and renames of its own keys."""

    wait_time = constant(0)

    def on_start(self) -> None:
        addresses = om_addresses(self.host)
        tls = environment_tls(addresses)   # with TLS the user is the certificate's
        self.client = OMClient(addresses, user=None if tls else "locust", policy=POLICY,
                               tls=tls)
        self.prefix = uuid.uuid4().hex[:12]
        self.bucket = random.choice(BUCKETS)
        self.keys: deque[str] = deque(maxlen=KEYS_KEPT)
        self.counter = 0
        prepare(self.client)

    def on_stop(self) -> None:
        self.client.close()

    def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse | None:
        """Sends ``request`` and reports it; the response when OK, else None."""
        op = op_name(request)
        t_ns = time.time_ns()
        started = time.perf_counter()
        response: om_pb2.OMResponse | None = None
        exception: Exception | None = None
        try:
            response = self.client.call_raw(request)
        except OMClientError:
            exception = status_error(CLIENT_ERROR)
        elapsed_s = time.perf_counter() - started
        status = CLIENT_ERROR if response is None else om_pb2.Status.Name(response.status)
        if response is not None and response.status != om_pb2.OK:
            exception = status_error(status)
        self.environment.events.request.fire(
            request_type=REQUEST_TYPE, name=op, response_time=elapsed_s * 1000.0,
            response_length=0 if response is None else response.ByteSize(),
            exception=exception, context={})
        trace().request(t_ns, op, int(elapsed_s * 1e9), status,
                        self.client.last_retries if response is not None else 0)
        return response if exception is None else None

    def _new_key(self) -> str:
        self.counter += 1
        return f"{self.prefix}/{self.counter}"

    @task(10)
    def put_key(self) -> None:
        """CreateKey + CommitKey, as freon omkg does."""
        key = self._new_key()
        opened = self.call(build.create_key(VOLUME, self.bucket, key, KEY_SIZE))
        if opened is None:
            return
        session = opened.create_key.client_session_id
        if self.call(build.commit_key(VOLUME, self.bucket, key, session, KEY_SIZE)):
            self.keys.append(key)

    @task(5)
    def lookup_key(self) -> None:
        if not self.keys:
            return self.put_key()
        self.call(build.lookup_key(VOLUME, self.bucket, random.choice(self.keys)))
        return None

    @task(2)
    def list_keys(self) -> None:
        self.call(build.list_keys(VOLUME, self.bucket, self.prefix + "/",
                                  max_keys=LIST_MAX_KEYS))

    @task(1)
    def delete_key(self) -> None:
        if not self.keys:
            return self.put_key()
        key = self.keys.popleft()
        self.call(build.delete_key(VOLUME, self.bucket, key))
        return None

    @task(1)
    def rename_key(self) -> None:
        if not self.keys:
            return self.put_key()
        key = self.keys.popleft()
        to_key = self._new_key()
        if self.call(build.rename_key(VOLUME, self.bucket, key, to_key)):
            self.keys.append(to_key)
        return None
