"""A node with shards refuses a Raft snapshot ahead of its store (docs/SHARDS.md,
*After step 5*): the snapshot holds shard 0's store only, so an install would leave
shards 1..S-1 applying later slices over rows they never got, a silent divergence; the
node fails stop instead (``process.py`` ``_install_failed``), saying why.

Red cases: the install prepared at S = 2 (the follower's shard 1 then diverges); a
snapshot not ahead (a restart over the node's own) refused, which would stop every
restart of a node with shards.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from om.config import ServerConfig
from om.node.catchup import CheckpointClient
from om.node.parts import MACHINE_SEAM
from om.protocol import om_pb2
from om.statemachine.apply import StateMachine
from om.statemachine.checkpoint_shelf import CheckpointShelf
from om.statemachine.raft_snapshot import ShardedInstallRefused, Snapshotter
from om.statemachine.store import Store


def _snapshotter(machine: StateMachine, directory: Path, shards: int) -> Snapshotter:
    shelf = CheckpointShelf(directory / "checkpoints", 2, directory.name, False, MACHINE_SEAM)
    client = CheckpointClient(ServerConfig(data_dir=directory))
    return Snapshotter(machine, directory, False, shelf=shelf, source=client, shards=shards)


def test_a_node_with_shards_refuses_a_snapshot_ahead_of_its_store(tmp_path: Path) -> None:
    leader = StateMachine(Store(tmp_path / "leader" / "db"))
    follower = StateMachine(Store(tmp_path / "follower" / "db"))
    try:
        leader.apply(3, om_pb2.PersistDbBatch(term=1))
        snapshot = tmp_path / "snapshot.tar"
        _snapshotter(leader, tmp_path / "leader", 2).serialize(str(snapshot), {"raft": 1})
        raft_data, install = _snapshotter(leader, tmp_path / "leader", 2).prepare_install(
            str(snapshot))
        assert (raft_data, install) == ({"raft": 1}, None), "not ahead: nothing to refuse"
        _, install = _snapshotter(follower, tmp_path / "follower", 1).prepare_install(
            str(snapshot))
        assert install is not None, "one shard: the snapshot is the whole store"
        with pytest.raises(ShardedInstallRefused, match="shards = 2"):
            _snapshotter(follower, tmp_path / "follower", 2).prepare_install(str(snapshot))
    finally:
        leader.store.close()
        follower.store.close()
