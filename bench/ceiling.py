"""The in-process ceiling: the OM's own request path with no RPC and no Raft.

``in_process_node`` builds a single-node ``om.node.node.Node`` on a real RocksDB
store in a directory (not synced: see ``in_process_node``): the same
request service over the leader flow (locks, retry cache, group commit), handlers and
``StateMachine`` as a server, with ``LocalReplicator`` (an entry is committed
when applied) and an optional server trace.
``InProcessCaller`` hands requests to ``Node.handle`` directly, stamping ids
as a client does, so the freon engine measures it exactly as it measures a
cluster: same generators, same concurrency, same trace records.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from om.config import Raft, ServerConfig
from om.node import gc_policy
from om.node.node import Node
from om.protocol import om_pb2

USER = "bench"


class InProcessCaller:
    """A ``RequestCaller`` over ``Node.handle``: no serialization, no socket, no retries."""

    def __init__(self, node: Node, user: str = USER) -> None:
        self._node = node
        self._user = user
        self._client_id = str(uuid.uuid4())
        self._call_ids = itertools.count(1)

    async def call_raw(self, request: om_pb2.OMRequest) -> tuple[om_pb2.OMResponse, int]:
        """The node's answer to ``request``; never retried."""
        request.client_id = self._client_id
        request.user = request.user or self._user
        if not request.call_id:
            request.call_id = next(self._call_ids)
        return await self._node.handle(request), 0

    async def close(self) -> None:
        """Nothing to release: the node outlives its callers."""
        return None


def _keep_going() -> None:
    """Fail-stop hook: in-process, a failed apply raises instead of exiting."""
    return None


@asynccontextmanager
async def in_process_node(directory: Path, trace_path: Path | None, flow: str,
                          config: ServerConfig | None = None) -> AsyncIterator[Node]:
    """A started single-node ``Node`` storing in ``directory``; closed on exit.

    By default it does not sync RocksDB (``fsync = false``): the ceiling is what the
    executor alone can do. A durable single node must sync each batch on the event
    loop (rocksdict holds the GIL while it syncs), a cost no Raft node pays there."""
    base = config or ServerConfig(raft=Raft(fsync=False))
    server_config = dataclasses.replace(base, data_dir=directory, nodes=(base.node,),
                                        trace_path=trace_path, trace_flow=flow).validate()
    node = Node(server_config, fail_stop=_keep_going)
    try:
        await node.start()
        with gc_policy.serving():
            yield node
    finally:
        await node.close()
