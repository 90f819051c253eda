"""Instrumented requests: each call is timed, counted, traced, and its status checked.

A ``Session`` sends requests through any ``RequestCaller`` (the asyncio
``AsyncOMClient``, or ``bench.ceiling.InProcessCaller``), and for each one:
records a ``client_request`` trace record, counts ``(op, status)``, adds the
latency of every successful write to ``write_latency`` and of every successful
request to its op's recorder in ``op_latency``, and raises
``RequestFailed`` (carrying the status name) unless the status is OK. A
transport failure the client gave up on has the status ``CLIENT_ERROR``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Protocol

from bench.stats import LatencyRecorder
from bench.traces import CLIENT_ERROR, WRITE_OPS, ClientTrace, op_name
from om.client import AsyncOMClient
from om.client import requests as build
from om.client.errors import OMClientError
from om.protocol import om_pb2

OP_LATENCY_SAMPLES = 200_000


class RequestCaller(Protocol):
    """Sends one request, retrying as the client does; the final answer and its retries."""

    async def call_raw(self, request: om_pb2.OMRequest) -> tuple[om_pb2.OMResponse, int]:
        """The final answer to ``request``, whatever its status, and the retries it took."""
        ...

    async def close(self) -> None:
        """Releases connections."""
        ...


class PooledCaller:
    """Spreads calls over several callers (client connections) in turn: a server with
    front workers gets each some of them (SO_REUSEPORT spreads connections, not
    requests); ``callers`` are they, in turn order."""

    def __init__(self, callers: list[RequestCaller]) -> None:
        assert callers
        self.callers = callers
        self._next = 0

    async def call_raw(self, request: om_pb2.OMRequest) -> tuple[om_pb2.OMResponse, int]:
        caller = self.callers[self._next]
        self._next = (self._next + 1) % len(self.callers)
        return await caller.call_raw(request)

    async def close(self) -> None:
        for caller in self.callers:
            await caller.close()


class RoutedClient(AsyncOMClient):
    """The asyncio client, counting the WRONG_SHARD answers it got (``redirects``).

    A client given the nodes' addresses learns S from its first request that reaches
    the wrong shard and routes by it from then on (``om.client.identity``), so a
    client should be redirected about once in its life: the bench reports the count
    per client (``bench/shard_scaling.py``) to show that routing, not redirects,
    carries the load."""

    redirects = 0

    def learn_shards(self, response: om_pb2.OMResponse) -> bool:
        if response.status == om_pb2.WRONG_SHARD:
            self.redirects += 1
        return super().learn_shards(response)


class RequestFailed(Exception):
    """A request ended with a status other than OK."""

    def __init__(self, op: str, status: str, message: str = "") -> None:
        super().__init__(f"{op}: {status}: {message}" if message else f"{op}: {status}")
        self.op = op
        self.status = status


class Session:
    """Sends requests and measures each one (see the module docstring)."""

    def __init__(self, caller: RequestCaller, trace: ClientTrace,
                 write_latency: LatencyRecorder | None = None) -> None:
        self.caller = caller
        self.trace = trace
        self.write_latency = write_latency if write_latency is not None else LatencyRecorder()
        self.statuses: Counter[tuple[str, str]] = Counter()
        self.op_latency: dict[str, LatencyRecorder] = {}

    async def send(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """The OK response to ``request``; raises ``RequestFailed`` otherwise."""
        op = op_name(request)
        t_ns = time.time_ns()
        started = time.perf_counter_ns()
        try:
            response, retries = await self.caller.call_raw(request)
        except OMClientError as error:
            self._record(op, t_ns, time.perf_counter_ns() - started, CLIENT_ERROR, 0)
            raise RequestFailed(op, CLIENT_ERROR, str(error)) from None
        status = om_pb2.Status.Name(response.status)
        self._record(op, t_ns, time.perf_counter_ns() - started, status, retries)
        if response.status != om_pb2.OK:
            raise RequestFailed(op, status, response.message)
        return response

    def _record(self, op: str, t_ns: int, latency_ns: int, status: str, retries: int) -> None:
        self.trace.request(t_ns, op, latency_ns, status, retries)
        self.statuses[(op, status)] += 1
        if status != "OK":
            return
        recorder = self.op_latency.get(op)
        if recorder is None:
            recorder = self.op_latency[op] = LatencyRecorder(OP_LATENCY_SAMPLES)
        recorder.add(latency_ns)
        if op in WRITE_OPS:
            self.write_latency.add(latency_ns)

    async def put_key(self, volume: str, bucket: str, key: str, size: int) -> None:
        """CreateKey then CommitKey, as ``ozone freon omkg`` does (no data)."""
        opened = await self.send(build.create_key(volume, bucket, key, size))
        session_id = opened.create_key.client_session_id
        await self.send(build.commit_key(volume, bucket, key, session_id, size))

    async def put_file(self, volume: str, bucket: str, path: str, size: int) -> None:
        """CreateFile then CommitKey, as an ``ofs`` client writes a file (no data)."""
        opened = await self.send(build.create_file(volume, bucket, path, size))
        session_id = opened.create_file.client_session_id
        await self.send(build.commit_key(volume, bucket, path, session_id, size))


async def learn_routes(caller: RequestCaller, volume: str, buckets: tuple[str, ...]) -> None:
    """Each connection of ``caller`` (each of a ``PooledCaller``'s) asks InfoBucket of
    ``buckets`` one at a time (untraced), the connections at once, so each client
    learns its nodes' shard count from its first misrouted request, one WRONG_SHARD
    each, before the timed load starts, as a long-lived client has. Without it the
    first burst (``threads`` in flight) goes out before S is known: every request of it
    to another shard than 0 is redirected, and today the client re-routes only the one
    whose answer taught it S; the others, answered WRONG_SHARD with the S it now knows,
    end there (``ClientIdentity.learn_shards`` returns False: 2 of 8 operations failed
    in a smoke run at S = 2), a client race this bench would otherwise count as the
    cluster's failures."""
    assert buckets

    async def ask(each: RequestCaller) -> None:
        session = Session(each, ClientTrace.off())
        for bucket in buckets:
            await session.send(build.info_bucket(volume, bucket))

    callers = caller.callers if isinstance(caller, PooledCaller) else [caller]
    await asyncio.gather(*(ask(each) for each in callers))


async def ensure_bucket(caller: RequestCaller, volume: str, bucket: str | None,
                        layout: str = "") -> None:
    """Creates ``volume`` and ``bucket`` (of ``layout``) unless they exist (idempotent,
    untraced)."""
    session = Session(caller, ClientTrace.off())
    try:
        await session.send(build.create_volume(volume))
    except RequestFailed as failure:
        if failure.status != "VOLUME_ALREADY_EXISTS":
            raise
    if bucket is None:
        return
    try:
        await session.send(build.create_bucket(volume, bucket, layout=layout))
    except RequestFailed as failure:
        if failure.status != "BUCKET_ALREADY_EXISTS":
            raise
