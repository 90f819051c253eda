"""Raft links through proxies on 127.0.0.1 that the nemesis can cut: partitions.

Every node reaches every other node's Raft port through a proxy of its own
(``[raft] links``: "a>b" = the proxy's port; ``DialNode`` in the adapter), so
each direction of each link runs through here. Cutting "a>b" stops carrying
the bytes a sends to b: the proxy stops reading them, so they wait in the
kernel's buffers and then in pysyncobj's, as packets a partition drops would
wait for TCP to retransmit them; the other direction still flows (a one-way
partition). Healing lets them flow again; a connection pysyncobj gave up on
meanwhile (no byte read for its connection timeout) reconnects through the
proxy. Everything runs on one event loop in a thread of the chaos process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from om.config import NodeAddress

HOST = "127.0.0.1"
PUMP_BYTES = 1 << 16


@dataclass
class _Direction:
    """One direction of the links: ``a>b``; ``flowing`` is set unless it is cut."""

    flowing: asyncio.Event = field(default_factory=asyncio.Event)


class LinkProxies:
    """A proxy per ordered pair of nodes; ``cut`` and ``heal`` directions of links."""

    def __init__(self, nodes: Iterable[NodeAddress]) -> None:
        self._nodes = {node.id: node for node in nodes}
        names = sorted(self._nodes)
        self.ports = {f"{a}>{b}": _free_port() for a in names for b in names if a != b}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._directions: dict[str, _Direction] = {}
        self._servers: list[asyncio.Server] = []
        self.cut_now: set[str] = set()

    def links_toml(self) -> str:
        """The ``[raft.links]`` table that routes every node through the proxies."""
        lines = ["", "[raft.links]"] + [f'"{link}" = {port}' for link, port in self.ports.items()]
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        """Opens every proxy's port."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(timeout=30)

    async def _open(self) -> None:
        for link, port in self.ports.items():
            for direction in (link, _reverse(link)):
                if direction not in self._directions:
                    self._directions[direction] = _Direction()
                    self._directions[direction].flowing.set()
            source, target = link.split(">")
            server = await asyncio.start_server(
                functools.partial(self._carry, source=source, target=target), HOST, port)
            self._servers.append(server)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     source: str, target: str) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                HOST, self._nodes[target].raft_port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(
                self._pump(reader, upstream_writer, self._directions[f"{source}>{target}"]),
                self._pump(upstream_reader, writer, self._directions[f"{target}>{source}"]),
                return_exceptions=True)
        finally:
            for closing in (writer, upstream_writer):
                closing.close()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    direction: _Direction) -> None:
        try:
            while True:
                await direction.flowing.wait()
                data = await reader.read(PUMP_BYTES)
                if not data:
                    break
                await direction.flowing.wait()   # cut while this was read: hold it
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    def cut(self, source: str, target: str) -> None:
        """Stops carrying what ``source`` sends to ``target``."""
        self._call(self._directions[f"{source}>{target}"].flowing.clear)
        self.cut_now.add(f"{source}>{target}")

    def cut_both_ways(self, first: str, second: str) -> None:
        self.cut(first, second)
        self.cut(second, first)

    def heal(self) -> None:
        """Every direction carries again."""
        for direction in list(self.cut_now):
            self._call(self._directions[direction].flowing.set)
        self.cut_now.clear()

    def _call(self, action: object) -> None:
        assert callable(action)
        self._loop.call_soon_threadsafe(action)

    def stop(self) -> None:
        """Closes every proxy and its connections, and stops and closes its loop."""
        async def close() -> None:
            for server in self._servers:
                server.close()
            carrying = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in carrying:
                task.cancel()
            await asyncio.gather(*carrying, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _reverse(link: str) -> str:
    source, target = link.split(">")
    return f"{target}>{source}"
