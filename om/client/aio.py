"""The asyncio client: many requests in flight on one connection.

Responses are matched to requests by call id, so they may return out of
order. A lost connection fails every request pending on it; each then retries
(same call id) according to ``RetryPolicy``. A TLS setting that cannot work with
the OM is raised at once as ``OMTlsError`` (``om.client.diagnosis``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

from om.client import diagnosis
from om.client.errors import OMConnectionError, error_for
from om.client.identity import DEFAULT_ADDRESS, ClientIdentity, Tls, split_address
from om.client.retry_policy import Attempts, RetryPolicy
from om.protocol import om_pb2
from om.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, WireError, encode_frame


class _Connection:
    """One TCP connection with its pending requests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._pending: dict[int, asyncio.Future[om_pb2.OMResponse]] = {}
        self._decoder = FrameDecoder(DEFAULT_MAX_FRAME_BYTES)
        self._answered = False      # the OM sent bytes on it (then TLS matched)
        self._task = asyncio.get_running_loop().create_task(self._read_forever())

    @classmethod
    async def open(cls, address: str, timeout_s: float,
                   context: ssl.SSLContext | None) -> _Connection:
        host, port = split_address(address)
        opening = asyncio.open_connection(host, port, ssl=context,
                                          server_hostname=host if context else None)
        reader, writer = await asyncio.wait_for(opening, timeout_s)
        return cls(reader, writer)

    @property
    def alive(self) -> bool:
        return not self._task.done()

    async def request(self, frame: bytes, call_id: int, timeout_s: float) -> om_pb2.OMResponse:
        assert call_id not in self._pending, "one attempt of a call at a time"
        future: asyncio.Future[om_pb2.OMResponse] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            self._writer.write(frame)
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(call_id, None)

    async def _read_forever(self) -> None:
        error: BaseException = ConnectionResetError("the OM closed the connection")
        try:
            while data := await self._reader.read(65536):
                self._answered = True
                for payload in self._decoder.feed(data):
                    response = om_pb2.OMResponse.FromString(payload)
                    future = self._pending.get(response.call_id)
                    if future is not None and not future.done():
                        future.set_result(response)
        except (OSError, WireError) as failure:
            error = failure
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionResetError(str(error)) if self._answered
                                         else diagnosis.ClosedBeforeReply(error))
            self._writer.close()

    async def close(self) -> None:
        self._writer.close()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class AsyncOMClient(ClientIdentity):
    """An asyncio OM client that retries with the same call id."""

    def __init__(self, addresses: Sequence[str] = (DEFAULT_ADDRESS,), user: str | None = None,
                 policy: RetryPolicy | None = None, client_id: str | None = None,
                 read_mode: str = "linearizable", tls: Tls | None = None,
                 token: om_pb2.TokenProto | None = None) -> None:
        super().__init__(addresses, user, policy, client_id, read_mode, tls, token)
        self._connections: dict[str, _Connection] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        """Closes every connection."""
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()

    async def call(self, request: om_pb2.OMRequest) -> om_pb2.OMResponse:
        """Sends ``request`` (retrying as needed); raises the typed error unless OK."""
        response, _ = await self.call_raw(request)
        if response.status != om_pb2.OK:
            raise error_for(response)
        return response

    async def call_raw(self, request: om_pb2.OMRequest) -> tuple[om_pb2.OMResponse, int]:
        """The final answer to ``request`` whatever its status, and the retries it took."""
        self.stamp(request)
        frame = encode_frame(request.SerializeToString())
        loop = asyncio.get_running_loop()
        attempts = Attempts(list(self.route(request)), self._current, self.policy, loop.time())
        while True:
            address = attempts.address
            try:
                connection = await self._connection(address)
                response = await connection.request(frame, request.call_id,
                                                    self.policy.attempt_timeout_s)
            except (OSError, TimeoutError, WireError) as error:
                await self._drop(address)
                problem = await self._misconfigured(address, error)
                if problem is not None:
                    raise problem from None
                delay = attempts.after_connection_error(loop.time())
                if delay is None:
                    raise OMConnectionError(
                        f"no OM answered call {request.call_id} within "
                        f"{self.policy.deadline_s} s (tried {attempts.addresses})") from None
            else:
                route = self.rerouted(request, response, address)
                if route is not None:
                    attempts.reroute(list(route))
                    continue
                delay = attempts.after_response(response, loop.time())
                if delay is None:
                    self._current = attempts.current % len(self.addresses)
                    return response, attempts.retries
            await asyncio.sleep(delay)

    async def _misconfigured(self, address: str, error: BaseException,
                             ) -> diagnosis.OMTlsError | None:
        """The one-line error when ``error`` shows TLS settings that cannot work with the
        OM at ``address`` (a plain client probes the port, within a second)."""
        if isinstance(error, diagnosis.ClosedBeforeReply):
            if self.tls is None:
                probe_s = min(diagnosis.PROBE_TIMEOUT_S, self.policy.attempt_timeout_s)
                speaks_tls = await diagnosis.speaks_tls_async(address, probe_s)
                return diagnosis.plain_to_tls(address) if speaks_tls else None
            return diagnosis.closed_before_reply(address, self.tls, error.cause)
        if isinstance(error, ssl.SSLError) and self.tls is not None:
            return diagnosis.handshake_failure(error, address, self.tls)
        return None

    async def _connection(self, address: str) -> _Connection:
        connection = self._connections.get(address)
        if connection is not None and connection.alive:
            return connection
        lock = self._opening.setdefault(address, asyncio.Lock())
        async with lock:
            connection = self._connections.get(address)
            if connection is None or not connection.alive:
                connection = await _Connection.open(address, self.policy.attempt_timeout_s,
                                                    self.ssl_context)
                self._connections[address] = connection
            return connection

    async def _drop(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            await connection.close()

