"""Catch-up from checkpoint files: the FetchCheckpointFile RPC, both ends.

A follower behind the leader's compacted log gets the leader's Raft snapshot (a
small manifest, ``om/statemachine/raft_snapshot.py``) through Raft, then downloads the
checkpoint it names from the node that keeps it over that node's client port,
outside Raft, as Ozone's followers download the leader's checkpoint:

* ``CheckpointServer`` answers FetchCheckpointFile requests from the node's
  ``CheckpointShelf``: a chunk of one listed file at an offset (resumable), or a
  manifest. Only nodes may ask: the request carries an HMAC-SHA256 keyed from the
  cluster's Raft secret (``signed_bytes``) and a time within ``CLOCK_SKEW_MS``; a
  cluster without a secret runs Raft unauthenticated too (its start line says so)
  and serves any caller. At most ``serving_max`` chunks are read at once.
* ``CheckpointClient`` is the follower's ``CheckpointSource``: a blocking
  connection (TLS with the [tls] client certificate when the port needs it) on the
  snapshot worker thread, paced to ``rate_bytes_per_s``, retrying connection
  failures and SERVER_BUSY for ``source_timeout_s``, then (the source died)
  turning to the newest checkpoint another node keeps at the position Raft
  gave, or later (asked again until one has: nodes take one at each compaction),
  all within ``deadline_s``.

Every refusal is a status with a message and no data: PERMISSION_DENIED (no or a
wrong mac, an old one), INVALID_SNAPSHOT_ERROR (a checkpoint not kept here),
INVALID_REQUEST (a path the checkpoint does not list, such as ``../x``, an offset
past the end, a length over ``chunk_bytes``), SERVER_BUSY.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import socket
import struct
import threading
import time

from om.config import ServerConfig
from om.executor.registry import error_response
from om.node.peer_answer import client_context, connect, exchange
from om.protocol import om_pb2
from om.protocol.framing import FrameDecoder
from om.statemachine.checkpoint_download import ReadChunk
from om.statemachine.checkpoint_shelf import (
    BadChunkRequest,
    CheckpointGone,
    CheckpointShelf,
    Manifest,
)
from om.statemachine.raft_snapshot import STAGING

logger = logging.getLogger(__name__)
CLOCK_SKEW_MS = 60_000
ATTEMPT_TIMEOUT_S = 10.0
RETRY_DELAY_S = 0.2
NEWEST_ASK_S = 1.0          # how long one node may take to name its newest checkpoint
NEWEST_POLL_S = 1.0
_KEY_LABEL = b"om catch-up from checkpoint files v1"


def mac_key(secret: str) -> bytes:
    """The HMAC key of FetchCheckpointFile, derived from the cluster's Raft secret (never
    the secret itself, which also keys Raft's frames)."""
    return hmac.new(secret.encode(), _KEY_LABEL, hashlib.sha256).digest()


def signed_bytes(body: om_pb2.FetchCheckpointFileRequest) -> bytes:
    """What the mac covers: every field but the mac, length-prefixed (unambiguous)."""
    parts = [body.checkpoint_id.encode(), body.path.encode(), body.node_id.encode()]
    return struct.pack(">QIQ", body.offset, body.length, body.issued_ms) + b"".join(
        struct.pack(">I", len(p)) + p for p in parts)


def sign(body: om_pb2.FetchCheckpointFileRequest, key: bytes) -> None:
    """Sets ``body.mac``."""
    body.mac = hmac.new(key, signed_bytes(body), hashlib.sha256).digest()


class CheckpointServer:
    """Answers FetchCheckpointFile from this node's shelf (see the module docstring)."""

    def __init__(self, config: ServerConfig, shelf: CheckpointShelf) -> None:
        self._key = mac_key(config.raft.secret) if config.raft.secret else None
        self._shelf = shelf
        self._chunk_max = config.catchup_chunk_bytes
        self._serving_max = config.catchup.serving_max
        self._serving = 0
        self.chunks_served = 0

    async def answer(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """The answer to one FetchCheckpointFile request."""
        body = request.fetch_checkpoint_file
        refusal = self._refusal(request, body)
        if refusal is not None:
            return refusal
        if self._serving >= self._serving_max:
            return error_response(request, om_pb2.SERVER_BUSY,
                                  f"{self._serving} checkpoint chunks are being read; retry")
        self._serving += 1
        try:
            return await asyncio.to_thread(self._read, request, body)
        finally:
            self._serving -= 1

    def _refusal(self, request: om_pb2.OMRequest,
                 body: om_pb2.FetchCheckpointFileRequest) -> om_pb2.OMResponse | None:
        if request.WhichOneof("body") != "fetch_checkpoint_file":
            return error_response(request, om_pb2.INVALID_REQUEST,
                                  "FetchCheckpointFile needs its body")
        if self._key is None:
            return None
        expected = hmac.new(self._key, signed_bytes(body), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, body.mac):
            logger.warning("refused a checkpoint fetch without the cluster secret's mac "
                           "(claims node %r)", body.node_id)
            return error_response(request, om_pb2.PERMISSION_DENIED,
                                  "FetchCheckpointFile is for the ring's nodes: the request "
                                  "must carry a mac made with the cluster's Raft secret")
        if abs(time.time_ns() // 1_000_000 - body.issued_ms) > CLOCK_SKEW_MS:
            return error_response(request, om_pb2.PERMISSION_DENIED,
                                  f"FetchCheckpointFile issued more than {CLOCK_SKEW_MS} ms "
                                  "from this node's clock: a replay, or clocks apart")
        return None

    def _read(self, request: om_pb2.OMRequest,
              body: om_pb2.FetchCheckpointFileRequest) -> om_pb2.OMResponse:
        try:
            if not body.path:
                manifest = self._shelf.manifest(body.checkpoint_id)
                data = json.dumps(manifest.to_json()).encode()
                if len(data) > self._chunk_max * 2:
                    raise BadChunkRequest(f"the manifest of {manifest.checkpoint_id} has "
                                          f"{len(manifest.files)} files: over the frame limit")
                answer = om_pb2.FetchCheckpointFileResponse(
                    checkpoint_id=manifest.checkpoint_id, data=data, file_size=len(data))
            else:
                data, size = self._shelf.read(body.checkpoint_id, body.path, body.offset,
                                              body.length, self._chunk_max)
                answer = om_pb2.FetchCheckpointFileResponse(
                    checkpoint_id=body.checkpoint_id, data=data, file_size=size)
                self.chunks_served += 1
        except CheckpointGone as gone:
            return error_response(request, om_pb2.INVALID_SNAPSHOT_ERROR, str(gone))
        except BadChunkRequest as bad:
            return error_response(request, om_pb2.INVALID_REQUEST, str(bad))
        return om_pb2.OMResponse(cmd_type=request.cmd_type, status=om_pb2.OK,
                                 call_id=request.call_id, fetch_checkpoint_file=answer)


class CatchupCut(Exception):
    """Test-only (``unsafe_cut_at_fraction``): the download stops half-way, as if the
    node were killed."""


class CatchupStopped(Exception):
    """The node is stopping: the download ends at the next chunk (a restart resumes)."""


class CheckpointClient:
    """The follower's end: fetches checkpoint files from the node that keeps them."""

    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        settings = config.catchup
        self.chunk_bytes = config.catchup_chunk_bytes
        self._rate = settings.rate_bytes_per_s
        self._deadline_s = settings.deadline_s
        self._source_timeout_s = settings.source_timeout_s
        # the knob cuts a node's first download only: one that had never staged any
        self._cut_at = 0.0 if (config.node_data_dir / STAGING).exists() \
            else settings.unsafe_cut_at_fraction
        self._key = mac_key(config.raft.secret) if config.raft.secret else b""
        self._addresses = {n.id: n.address for n in config.nodes}
        self._context = client_context(config)
        self._socket: socket.socket | None = None
        self._connected_to = ""
        self._decoder = FrameDecoder(config.limits.max_frame_bytes)
        self._next_call = 1
        self._paced_until = 0.0
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Ends a download in progress at its next chunk (the node is stopping: it must
        not wait for the download; what is staged stays for the restart)."""
        self._stopping.set()

    # -- the CheckpointSource port -------------------------------------------------------

    def reader(self, manifest: Manifest) -> ReadChunk:
        """Reads chunks of ``manifest``'s files from its source node."""
        address = self._address(manifest.source)
        deadline = time.monotonic() + self._deadline_s
        cut_after = int(manifest.total_bytes * self._cut_at)
        fetched = 0

        def read(path: str, offset: int, length: int) -> bytes:
            nonlocal fetched
            if self._stopping.is_set():
                raise CatchupStopped(f"the node is stopping: {fetched} bytes fetched")
            if cut_after and fetched >= cut_after:
                raise CatchupCut(f"unsafe_cut_at_fraction: stopped after {fetched} bytes")
            try:
                answer = self._call(address, manifest.checkpoint_id, path, offset, length,
                                    min(deadline, time.monotonic() + self._source_timeout_s))
            except TimeoutError as silent:   # the source died: another node's, then
                raise CheckpointGone(f"checkpoint {manifest.checkpoint_id} is not served: "
                                     f"{silent}") from None
            self._pace(len(answer.data))
            fetched += len(answer.data)
            return answer.data

        return read

    def newest(self, source: str, at_least: int) -> Manifest:
        """The newest checkpoint at position ``at_least`` or later that ``source`` keeps,
        else another node; asked again every NEWEST_POLL_S (a node takes one at its
        next compaction) until ``deadline_s``."""
        deadline = time.monotonic() + self._deadline_s
        order = [n for n in (source, *sorted(self._addresses))
                 if n in self._addresses and n != self._config.node_id]
        problems: dict[str, str] = {}
        while not self._stopping.is_set() and time.monotonic() < deadline:
            for node_id in dict.fromkeys(order):
                try:
                    answer = self._call(self._addresses[node_id], "", "", 0, 0,
                                        min(deadline, time.monotonic() + NEWEST_ASK_S))
                    found = Manifest.from_json(json.loads(answer.data))
                except (CheckpointGone, OSError, ValueError) as problem:
                    problems[node_id] = str(problem)
                    continue
                if found.applied_index >= at_least:
                    return found
                problems[node_id] = f"its newest is at position {found.applied_index}"
            time.sleep(NEWEST_POLL_S)
        raise CheckpointGone(f"no node keeps a checkpoint at position {at_least} or later: "
                             + "; ".join(f"OM:{n}: {p}" for n, p in problems.items()))

    def _address(self, node_id: str) -> str:
        address = self._addresses.get(node_id)
        if address is None:
            raise CheckpointGone(f"the checkpoint's node {node_id!r} is not in this node's "
                                 "ring")
        return address

    # -- the wire --------------------------------------------------------------------------

    def _call(self, address: str, checkpoint_id: str, path: str, offset: int, length: int,
              deadline: float) -> om_pb2.FetchCheckpointFileResponse:
        """One request, retried (connection failures, SERVER_BUSY) until ``deadline``."""
        body = om_pb2.FetchCheckpointFileRequest(
            checkpoint_id=checkpoint_id, path=path, offset=offset, length=length,
            node_id=self._config.node_id)
        while True:
            body.issued_ms = time.time_ns() // 1_000_000
            sign(body, self._key)
            request = om_pb2.OMRequest(cmd_type=om_pb2.FetchCheckpointFile,
                                       call_id=self._next_call, fetch_checkpoint_file=body,
                                       client_id=f"catchup-{self._config.node_id}")
            self._next_call += 1
            try:
                response = self._round_trip(address, request)
            except OSError as error:
                self.close()
                if time.monotonic() >= deadline or self._stopping.is_set():
                    raise TimeoutError(f"OM at {address} did not serve checkpoint "
                                       f"{checkpoint_id or '(newest)'}: {error}") from None
                time.sleep(RETRY_DELAY_S)
                continue
            if response.status == om_pb2.OK:
                return response.fetch_checkpoint_file
            if response.status == om_pb2.INVALID_SNAPSHOT_ERROR:
                raise CheckpointGone(response.message)
            if self._stopping.is_set():
                raise CatchupStopped("the node is stopping")
            if response.status != om_pb2.SERVER_BUSY or time.monotonic() >= deadline:
                raise OSError(f"OM at {address} refused a checkpoint chunk: "
                              f"{om_pb2.Status.Name(response.status)}: {response.message}")
            time.sleep(RETRY_DELAY_S)

    def _round_trip(self, address: str, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        if self._socket is None or self._connected_to != address:
            self.close()
            self._socket = connect(address, self._context, ATTEMPT_TIMEOUT_S)
            self._connected_to = address
            self._decoder = FrameDecoder(self._config.limits.max_frame_bytes)
        return exchange(self._socket, self._decoder, request,
                        self._config.limits.max_frame_bytes, address)

    def _pace(self, size: int) -> None:
        """Sleeps so that the bytes fetched stay under ``rate_bytes_per_s``."""
        if not self._rate:
            return
        now = time.monotonic()
        self._paced_until = max(self._paced_until, now) + size / self._rate
        if self._paced_until > now + 0.05:
            time.sleep(self._paced_until - now)

    def close(self) -> None:
        """Closes the connection (the next call opens one)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

