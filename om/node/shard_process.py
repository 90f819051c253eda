"""Shard k's process (k >= 1): the write path of its buckets, beside its node's.

With ``shards`` = S > 1 (docs/SHARDS.md) a node runs S processes that execute writes:
its own (shard 0, the coordinator) and one per shard k = 1..S-1, each started as
``python -m om.node.shard_process FD K`` with ``pass_fds`` by its node
(``om/node/shard_pool.py``, as ``front_pool.py`` starts front workers). FD is the
shard's end of the Raft process's channel k, which the node's Raft adapter made
(``RaftProcessReplicator.take_shard_channels``); the configuration comes pickled on
stdin, the node's own as ``ServerConfig.for_shard(K)`` made it, so every setting is
the node's.

The process builds the node's parts from that configuration (``Node`` with
``shard_channel``; ``parts.py`` picks the shard's pieces): its store at
``<node data dir>/shard-K/db``, ``StateMachine(store, K)`` (it asserts every slice
it applies is shard K's), the leader flow sealing shard K's slices, clients served on
``NodeAddress.shard_port(K)``, and as its Raft part the same adapter attached to
channel K (no child of its own; the position of an entry with nothing for shard K
moves in memory, ``StateMachine.pass_position``). It has no metrics endpoint, no
checkpoint server and no snapshots (shard 0's until docs/SHARDS.md's step 4), and
answers the node's own requests (integrity, transfers, membership, checkpoint files)
with a pointer to shard 0.

Fate sharing: the Raft process stops when channel K closes (this process died), and
with it the node; this process stops (fail-stop, status 70) when the Raft process
closes channel K without saying ``closing`` first (the node or its Raft process
died). An orderly stop: the node closes its Raft process (which says ``closing`` to
every shard), then sends SIGTERM; this process drains and closes as ``om serve``
does. SIGINT is ignored: its node stops it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import sys

import uvloop

from om.config import ServerConfig
from om.node.node import Node
from om.node.rpc import serve


async def _serve(config: ServerConfig, channel: socket.socket) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await serve(Node(config, shard_channel=channel), stop)


def main(argv: list[str]) -> int:
    """Runs shard ``argv[1]`` on the channel descriptor ``argv[0]``, its configuration
    read from stdin."""
    shard = int(argv[1])
    logging.basicConfig(level=os.environ.get("OM_LOG_LEVEL", "WARNING"),
                        format=f"%(asctime)s %(levelname)s %(name)s[shard {shard}]: "
                               "%(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # its node stops it
    channel = socket.socket(fileno=int(argv[0]))
    config: ServerConfig = pickle.load(sys.stdin.buffer)   # its node's for_shard(k)
    assert config.serving_shard == shard
    try:
        uvloop.run(_serve(config, channel))
    except OSError as error:
        print(f"om shard {shard}: cannot start: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
