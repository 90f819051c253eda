"""The client RPC server: length-prefixed protobuf frames over TCP, on uvloop.

Client connections (``om.node.connections``: framing, back-pressure, bounds)
are served by the node's own process when ``workers`` is 1, or by ``workers``
front processes sharing the client port (``om.node.front_pool``). Either way each
connection's request frames go through the node's ``Intake``
(``om.node.intake``: parse, identity, submit, answer framing), so a request is
treated the same whoever serves its connection. Responses carry the request's
call id and may return out of order.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass

from om.config import ServerConfig
from om.node import gc_policy
from om.node.accept import ClientServer, client_server
from om.node.connections import (
    CONNECTION_GAUGES,
    ClientConnection,
    Connections,
    listen_backlog,
    raise_fd_limit,
)
from om.node.front_pool import Fronts, listening_sockets
from om.node.front_worker import client_context
from om.node.intake import Intake
from om.node.node import Node
from om.observe.http_endpoint import MetricsEndpoint

logger = logging.getLogger(__name__)


def raft_security(node: Node) -> str:
    """", raft=..." for the start line: whether peers must hold the cluster secret."""
    if len(node.config.nodes) == 1:
        return ""
    if node.config.raft.secret:
        return ", raft=authenticated"
    return ", raft=UNAUTHENTICATED: no raft_secret_file"


def client_security(node: Node, context: ssl.SSLContext | None) -> str:
    """What the start line says of the client port."""
    if context is None:   # om serve alone, or om cluster up --insecure / --no-tls
        return "PLAIN, UNAUTHENTICATED: no [tls], any client may claim any user"
    tokens = " (or a delegation token)" if node.tokens_enabled else ""
    return f"TLS, certificate required{tokens}"


def acl_security(node: Node) -> str:
    """", acls=..." for the start line: whether requests are authorized."""
    config = node.config
    if config.acl_enabled:
        return f", acls=on (admins: {', '.join(config.admins) or 'none'})"
    return ", acls=OFF: any user may do anything (acl_enabled = false)"


def start_metrics_endpoint(node: Node) -> MetricsEndpoint | None:
    """Serves the node's registry at http://host:http_port/prom (None when off)."""
    address = node.config.node
    if not address.http_port or node.config.serving_shard:   # the node's, on shard 0
        return None
    return MetricsEndpoint(node.metrics.registry, address.host, address.http_port)


def start_line(node: Node, context: ssl.SSLContext | None, workers: int,
               endpoint: MetricsEndpoint | None) -> str:
    """What ``om serve`` prints once it serves."""
    config, address = node.config, node.config.node
    metrics = f", metrics=http://{address.http_address}/prom" if endpoint else ""
    serving = ("1 (this process serves clients)" if workers == 1 else
               f"{workers} (front processes serve clients: TLS, framing)")
    shard = config.serving_shard
    name = f"{config.node_id} shard {shard}" if shard else config.node_id
    return (f"OM {name} listening on {address.host}:{address.shard_port(shard)} "
            f"(execution={config.execution}, workers={serving}, data={config.node_data_dir}, "
            f"durable={'yes' if config.raft.fsync else 'NO: fsync = false'}"
            f"{raft_security(node)}, clients={client_security(node, context)}"
            f"{acl_security(node)}{metrics})")


def shards_notice(config: ServerConfig) -> str:
    """What the node's own process prints at start with shards (none with one): what
    works at S > 1 and what does not yet (docs/SHARDS.md)."""
    if config.shards == 1 or config.serving_shard:
        return ""
    ports = ", ".join(f"shard {k} on {config.node.shard_address(k)}"
                      for k in range(config.shards))
    return (f"EXPERIMENTAL: shards = {config.shards} ({ports}; docs/SHARDS.md): Raft "
            "snapshots hold shard 0's store only (a node that needs one fails stop, and a "
            "compaction may drop entries a lagging shard has not applied), shard stores "
            "above 0 are not synced, Prepare is refused: for trials, not for data you keep")


@dataclass
class _OwnConnections:
    """Clients served by this process (workers = 1)."""

    server: ClientServer
    connections: Connections

    @classmethod
    async def bind(cls, node: Node, context: ssl.SSLContext | None) -> _OwnConnections:
        limits, address = node.config.limits, node.config.node
        connections = Connections(raise_fd_limit(limits.connections_max),
                                  limits.connection_idle_s)
        intake = Intake(node)
        backlog = listen_backlog(limits.listen_backlog_max)
        listener = listening_sockets(address.host,
                                     address.shard_port(node.config.serving_shard), 1,
                                     backlog)[0]
        try:
            server = await client_server(
                listener, lambda: ClientConnection(limits, connections, intake), context,
                limits.tls_handshakes_max, backlog)
        except BaseException:
            listener.close()
            raise
        node.metrics.add_state(CONNECTION_GAUGES, connections.state)
        return cls(server, connections)

    async def serve_until(self, stop: asyncio.Event) -> None:
        await self.server.start_serving()
        idle_closer = asyncio.get_running_loop().create_task(
            self.connections.close_idle_forever())
        try:
            await stop.wait()
        finally:
            idle_closer.cancel()
            self.server.close()


async def _serve_fronts(node: Node, fronts: Fronts, stop: asyncio.Event) -> None:
    """Serves until ``stop``; a front that exits meanwhile stops the node (fail-stop)."""
    stopped = asyncio.get_running_loop().create_task(stop.wait())
    watched = asyncio.get_running_loop().create_task(fronts.watch())
    try:
        await asyncio.wait([stopped, watched], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        watched.cancel()
    if not stop.is_set():
        logger.critical("front worker %d of OM %s exited: stopping the node",
                        watched.result(), node.config.node_id)
        node.fail_stop()
    fronts.stop_accepting()


async def serve(node: Node, stop: asyncio.Event) -> None:
    """Serves clients until ``stop`` is set, then drains and closes the node.

    Every endpoint is bound before the node starts: a port taken by another
    process stops the start with nothing begun (OSError)."""
    address = node.config.node
    workers = node.config.workers_count()
    context = client_context(node.config)
    endpoint = start_metrics_endpoint(node)
    own: _OwnConnections | None = None
    fronts: Fronts | None = None
    try:
        if workers == 1:
            own = await _OwnConnections.bind(node, context)
        else:
            listeners = listening_sockets(address.host, address.port, workers,
                                          listen_backlog(node.config.limits.listen_backlog_max))
    except OSError:
        if endpoint is not None:
            endpoint.close()
        raise
    await node.start()
    if own is None:
        fronts = Fronts(node.config, Intake(node))
        node.metrics.add_state(CONNECTION_GAUGES, fronts.state)
        await fronts.start(listeners)
    print(start_line(node, context, workers, endpoint), flush=True)
    notice = shards_notice(node.config)
    if notice:
        print(notice, flush=True)
    try:
        with gc_policy.serving():
            if own is not None:
                await own.serve_until(stop)
            else:
                assert fronts is not None
                await _serve_fronts(node, fronts, stop)
    finally:
        await node.close()
        if own is not None:
            await own.server.wait_closed()
        if fronts is not None:
            await fronts.close()
        if endpoint is not None:
            endpoint.close()
        print(f"OM {node.config.node_id} stopped", flush=True)
