"""A node's shard processes, seen from the node (docs/SHARDS.md, increment B).

With ``shards`` = S > 1 the node's Raft adapter makes a channel per shard and hands the
node the ends of channels 1..S-1 (``RaftProcessReplicator.take_shard_channels``); the
node starts one shard process per end (``python -m om.node.shard_process``, with
``pass_fds`` as ``front_pool.py`` starts front workers) and closes its copies, so the
shard process alone holds it. The shard reads its configuration, the node's own
(``ServerConfig.for_shard``), pickled from stdin.

Fate sharing needs no watcher here: a shard process that exits closes its channel,
which stops the Raft process, and so the node (``RaftProcessReplicator.child_gone``:
fail-stop); the node's death stops the Raft process, which closes every shard's
channel unannounced, and each shard fails stop. An orderly stop (``stop``) comes after
the node closed its Raft process, which first told every shard ``closing``: each is
sent SIGTERM, drains and exits; one that does not within CLOSE_TIMEOUT_S is killed.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import signal
import socket
import subprocess
import sys

from om.config import ServerConfig

logger = logging.getLogger(__name__)
CLOSE_TIMEOUT_S = 20.0


def spawn(config: ServerConfig, shard: int, channel: socket.socket) -> subprocess.Popen[bytes]:
    """Starts shard ``shard``'s process on ``channel`` (its end of the Raft process's
    channel ``shard``, closed here: the process holds it now) with the node's
    ``config``."""
    assert 1 <= shard < config.shards
    assert config.serving_shard == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "om.node.shard_process", str(channel.fileno()), str(shard)],
        pass_fds=(channel.fileno(),), stdin=subprocess.PIPE)
    channel.close()
    assert process.stdin is not None
    try:
        process.stdin.write(pickle.dumps(config.for_shard(shard)))
        process.stdin.close()
    except BrokenPipeError:   # it died at once: its channel closed, so the node stops
        logger.critical("shard %d's process exited before it read its configuration", shard)
    return process


async def stop(process: subprocess.Popen[bytes]) -> int:
    """Stops a shard process whose Raft process closed (SIGTERM: it drains), killing it
    after CLOSE_TIMEOUT_S; its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.to_thread(process.wait, CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        logger.warning("shard process %d did not stop within %s s: killed", process.pid,
                       CLOSE_TIMEOUT_S)
        process.kill()
        return await asyncio.to_thread(process.wait, CLOSE_TIMEOUT_S)


class ShardProcesses:
    """The node's shard processes 1..S-1."""

    def __init__(self, config: ServerConfig, channels: tuple[socket.socket, ...]) -> None:
        """Starts shard k's process on ``channels[k - 1]`` (none with one shard)."""
        assert len(channels) == config.shards - 1, "one channel per shard above 0"
        self.processes = [spawn(config, shard, channel)
                          for shard, channel in enumerate(channels, start=1)]

    async def close(self) -> None:
        """Stops every shard process, after the node's Raft process stopped."""
        for process in self.processes:
            status = await stop(process)
            if status:
                logger.warning("shard process %d exited with status %d", process.pid, status)
