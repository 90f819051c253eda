"""``om freon generate``: the offline generator against the real write path.

* The rows it writes are the rows a node writes for the same requests, byte for
  byte (same managed indexes, same clock), usage counters included.
* Chunking changes nothing but the number of write batches.
* A real 3-node cluster started on copies of one generated database serves the
  keys, accepts writes above the generated ids and ends with equal digests.
"""

from __future__ import annotations

import dataclasses
import filecmp
import json
from pathlib import Path

import pytest

from bench import driver
from bench.ceiling import InProcessCaller, in_process_node
from om.cli import main
from om.client import OMClient
from om.client import requests as build
from om.client.errors import OMClientError
from om.cluster import lifecycle as om_cluster
from om.cluster import preload
from om.config import shard_data_dir
from om.executor.fso.fs import FSO
from om.integrity import fs_audit
from om.protocol import om_pb2
from om.protocol.shard_routing import shard_of
from om.schema import tables
from om.schema.ids import object_id_for
from om.statemachine.apply import StateMachine
from om.statemachine.store import Store
from tests import cluster_harness

NOW_MS = 1_700_000_000_000
DATA_TABLES = (om_pb2.VOLUME, om_pb2.BUCKET, om_pb2.KEY, om_pb2.OPEN_KEY, om_pb2.DELETED)
SMALL = preload.Namespace(volumes=2, buckets=2, keys=10, size=1000, user="alice",
                          batch_keys=3)


def _rows(db: Path) -> tuple[dict[tables.TableId, list[tuple[bytes, bytes]]],
                             om_pb2.TransactionInfo]:
    store = Store(db)
    try:
        rows = {table: list(store.iterate(table)) for table in DATA_TABLES}
        return rows, store.transaction_info()
    finally:
        store.close()


async def _through_a_node(directory: Path, namespace: preload.Namespace) -> None:
    """Sends the generator's requests, in its order, to an in-process leader-flow node."""
    async with in_process_node(directory, None, "test") as node:
        node.leader.clock_ms = lambda: NOW_MS
        caller = InProcessCaller(node, user=namespace.user)
        requests = [build.create_volume(v) for v in namespace.volume_names()]
        requests += [build.create_bucket(v, b) for v, b in namespace.bucket_names()]
        for request in requests:
            response, _ = await caller.call_raw(request)
            assert response.status == om_pb2.OK, response.message
        for volume, bucket, key in namespace.key_names():
            created, _ = await caller.call_raw(
                build.create_key(volume, bucket, key, data_size=namespace.size))
            session = created.create_key.client_session_id
            committed, _ = await caller.call_raw(
                build.commit_key(volume, bucket, key, session, namespace.size))
            assert committed.status == om_pb2.OK, committed.message


async def test_generated_rows_are_the_rows_a_node_writes(tmp_path: Path) -> None:
    result = preload.generate_into(tmp_path / "gen" / "db", SMALL, clock=lambda: NOW_MS)
    assert (result.volumes, result.buckets, result.keys) == (2, 4, 10)
    assert result.batches == 2 + 4          # volumes, buckets, then ceil(10 / 3) key batches
    await _through_a_node(tmp_path / "node", SMALL)
    generated, generated_info = _rows(tmp_path / "gen" / "db")
    served, served_info = _rows(tmp_path / "node" / "db")
    for table in DATA_TABLES:
        assert generated[table] == served[table], tables.TABLE_NAMES[table]
    assert generated_info.managed_index == served_info.managed_index == 2 + 4 + 2 * 10
    assert (generated_info.applied_index, generated_info.term) == (0, 0)
    bucket = om_pb2.BucketInfo.FromString(dict(generated[om_pb2.BUCKET])[b"/vol1-0/bucket1-0"])
    assert (bucket.used_bytes, bucket.used_namespace) == (2 * 1000 * 3, 2)  # keys 0, 1
    volume = om_pb2.VolumeInfo.FromString(dict(generated[om_pb2.VOLUME])[b"/vol1-1"])
    assert volume.used_namespace == 2
    assert not generated[om_pb2.OPEN_KEY]


def test_chunking_changes_only_the_number_of_batches(tmp_path: Path) -> None:
    digests = []
    for batch_keys in (1, 4, 1000):
        namespace = preload.Namespace(buckets=3, keys=25, size=7, user="bob",
                                      batch_keys=batch_keys)
        db = tmp_path / f"b{batch_keys}" / "db"
        preload.generate_into(db, namespace, clock=lambda: NOW_MS)
        store = Store(db)
        digests.append(store.digests())
        store.close()
    assert digests[0] == digests[1] == digests[2]


def test_generate_refuses_a_store_with_applied_log_entries(tmp_path: Path) -> None:
    store = Store(tmp_path / "db")
    try:
        StateMachine(store).apply(2, om_pb2.PersistDbBatch(term=1))
        with pytest.raises(preload.GenerateError, match="applied Raft log entries"):
            preload.generate(store, SMALL)
    finally:
        store.close()


def test_cli_generates_copies_and_refuses_to_overwrite(tmp_path: Path) -> None:
    nodes = [tmp_path / f"om{i}" for i in (1, 2, 3)]
    args = ["freon", "generate", "--data-dir", str(nodes[0]), "--copy-to",
            *map(str, nodes[1:]), "--buckets", "2", "--keys", "40", "--batch-keys", "7",
            "--json", str(tmp_path / "r.json")]
    assert main(args) == 0
    record = json.loads((tmp_path / "r.json").read_text())
    assert (record["keys"], record["buckets"], record["batches"]) == (40, 2, 2 + 6)
    for copy in nodes[1:]:
        same = filecmp.dircmp(nodes[0] / "db", copy / "db")
        assert (same.left_only, same.right_only, same.funny_files) == ([], [], [])
        assert filecmp.cmpfiles(nodes[0] / "db", copy / "db", same.common_files,
                                shallow=False)[0] == sorted(same.common_files)
    assert main(args) == 2                                   # the databases exist
    (nodes[0] / "raft").mkdir(parents=True)
    assert main(["freon", "generate", "--data-dir", str(tmp_path / "x"), "--copy-to",
                 str(nodes[0]), "--keys", "1"]) == 2         # a node that already ran
    assert main(["freon", "generate", "--data-dir", str(tmp_path / "y"),
                 "--volume", "Bad_Name"]) == 2


@pytest.mark.integration
def test_a_cluster_on_seeded_copies_serves_them_writes_above_them_and_agrees(
        tmp_path: Path) -> None:
    namespace = preload.Namespace(buckets=2, keys=600, size=100, user="bench")
    seed = preload.generate_into(tmp_path / "seed" / "db", namespace)
    dirs = driver.FlowDirs.of(tmp_path, "leader")
    databases = [node / "db" for node in dirs.node_dirs(driver.FlowSpec("leader"), 3)]
    preload.copy_database(tmp_path / "seed" / "db", databases)
    cluster = cluster_harness.start(dirs.cluster)
    try:
        with cluster_harness.client(cluster, user="bench") as client:
            _check_served(client, namespace)
            new = client.put_key("vol1", "bucket1-1", "after/0", data_size=5)
            assert new.object_id > object_id_for(seed.managed_index, 255)
            client.delete_key("vol1", "bucket1-0", "preload/0")
            bucket = client.info_bucket("vol1", "bucket1-1")
            assert (bucket.used_namespace, bucket.used_bytes) == (301, 300 * 300 + 15)
        cluster_harness.wait_converged(cluster)
        digests = cluster_harness.digests_after_stop(cluster)
    finally:
        om_cluster.down(cluster)
    assert digests["om1"] == digests["om2"] == digests["om3"]


def _check_served(client: OMClient, namespace: preload.Namespace) -> None:
    """The generated keys, lists and counters, as the cluster serves them."""
    assert namespace.keys == 600
    key = client.lookup_key("vol1", "bucket1-1", "preload/599")
    assert (key.data_size, key.replication_factor) == (100, 3)
    listed = client.list_keys("vol1", "bucket1-0", prefix="preload/", max_keys=1000)
    assert len(listed.key_info) == 300
    bucket = client.info_bucket("vol1", "bucket1-0")
    assert (bucket.used_namespace, bucket.used_bytes) == (300, 300 * 300)
    assert client.info_volume("vol1").used_namespace == 2
    with pytest.raises(OMClientError):
        client.lookup_key("vol1", "bucket1-1", "preload/0")   # in the other bucket


def test_a_file_system_namespace_after_another_is_one_directory_of_files(
        tmp_path: Path) -> None:
    """``--layout fso``: ``<prefix>/<i>`` are files of one directory; a second namespace
    (``more``) goes into the same database with managed indexes above the first's."""
    first = preload.Namespace(keys=20, user="bench", batch_keys=7)
    files = preload.Namespace(keys=30, volume="fsovol", bucket="fsb", prefix="big",
                              layout=FSO, user="bench", batch_keys=7)
    result = preload.generate_into(tmp_path / "db", first, more=[files])
    assert (result.volumes, result.buckets, result.keys) == (2, 2, 50)
    store = Store(tmp_path / "db")
    try:
        assert StateMachine(store).managed_index == result.managed_index == 2 + 2 + 2 * 50
        directories = [om_pb2.DirectoryInfo.FromString(raw).name
                       for _, raw in store.scan(om_pb2.DIRECTORY, b"", None, 100)]
        assert directories == ["big"]
        assert len(store.scan(om_pb2.FILE, b"", None, 100)) == 30
        assert fs_audit.fs_problems(store) == []
    finally:
        store.close()


SHARDED_TABLES = (*DATA_TABLES, om_pb2.DIRECTORY, om_pb2.FILE, om_pb2.OPEN_FILE)


def _all_rows(db: Path) -> dict[tables.TableId, dict[bytes, bytes]]:
    store = Store(db)
    try:
        return {table: dict(store.iterate(table)) for table in SHARDED_TABLES}
    finally:
        store.close()


def _bucket_of_row(table: tables.TableId, key: bytes, value: bytes,
                   bucket_ids: dict[int, tuple[str, str]]) -> tuple[str, str]:
    """The (volume, bucket) a bucket's own row belongs to."""
    if table == om_pb2.BUCKET:
        info = om_pb2.BucketInfo.FromString(value)
        return info.volume_name, info.bucket_name
    if table == om_pb2.KEY:
        key_info = om_pb2.KeyInfo.FromString(value)
        return key_info.volume_name, key_info.bucket_name
    return bucket_ids[int(key.split(b"/")[2])]   # fs_prefix: /volume id/bucket id/...


@pytest.mark.parametrize(("shards", "layout"), [(2, ""), (4, ""), (3, FSO)])
def test_a_sharded_seed_is_the_one_shard_seed_split_by_owner(
        tmp_path: Path, shards: int, layout: str) -> None:
    """Every volume's and bucket's row in every shard (the one-shard seed's byte for
    byte, but a bucket's usage, which only its own shard counts); a bucket's keys and
    FSO rows in its owning shard's store only; nothing else. Red cases: a key seeded
    into another shard, or into every shard; a bucket or volume row left out of a shard
    (shard 0 would find a volume empty); a shard's managed indexes starting over
    (object ids then differ from the one-shard seed's and collide across shards)."""
    namespace = preload.Namespace(volumes=3, buckets=3, keys=45, size=10, user="alice",
                                  batch_keys=4, layout=layout)
    preload.generate_into(tmp_path / "one" / "db", namespace, clock=lambda: NOW_MS)
    one = _all_rows(tmp_path / "one" / "db")
    sharded = dataclasses.replace(namespace, shards=shards)
    results = preload.generate_shards(tmp_path / "node", sharded, clock=lambda: NOW_MS)
    assert sum(result.keys for result in results) == 45
    assert {(r.volumes, r.buckets) for r in results} == {(3, 9)}
    parts = [_all_rows(shard_data_dir(tmp_path / "node", k) / "db") for k in range(shards)]
    bucket_ids = {om_pb2.BucketInfo.FromString(raw).object_id: (volume, bucket)
                  for volume, bucket in namespace.bucket_names()
                  for raw in [one[om_pb2.BUCKET][tables.bucket_key(volume, bucket)]]}
    for table in SHARDED_TABLES:
        if table in (om_pb2.VOLUME, om_pb2.BUCKET):
            continue
        union: dict[bytes, bytes] = {}
        for shard, part in enumerate(parts):
            for key, value in part[table].items():
                assert one[table].get(key) == value, f"{tables.TABLE_NAMES[table]}: S = 1's row"
                owner = shard_of(*_bucket_of_row(table, key, value, bucket_ids), shards)
                assert owner == shard, f"a row of shard {owner}'s bucket in shard {shard}"
            union.update(part[table])
        assert union == one[table], f"{tables.TABLE_NAMES[table]}: every row in some shard"
    for shard, part in enumerate(parts):
        assert part[om_pb2.VOLUME] == one[om_pb2.VOLUME], "every shard holds every volume"
        assert sorted(part[om_pb2.BUCKET]) == sorted(one[om_pb2.BUCKET])
        for key, raw in part[om_pb2.BUCKET].items():
            info = om_pb2.BucketInfo.FromString(raw)
            if shard_of(info.volume_name, info.bucket_name, shards) != shard:
                expected = om_pb2.BucketInfo.FromString(one[om_pb2.BUCKET][key])
                expected.used_bytes, expected.used_namespace = 0, 0
                info.used_bytes, info.used_namespace = 0, 0
                assert info == expected, "another shard's bucket: its row but for usage"
            else:
                assert raw == one[om_pb2.BUCKET][key], "its own bucket: S = 1's row"
    if layout:
        assert sum(len(part[om_pb2.FILE]) for part in parts) == 45


def test_cli_seeds_every_shard_of_every_node(tmp_path: Path) -> None:
    """``--shards``: each node's shard stores, copies byte for byte; a node whose shard
    store exists is refused (red: shard k's store left out, or overwritten)."""
    nodes = [tmp_path / f"om{i}" for i in (1, 2)]
    args = ["freon", "generate", "--data-dir", str(nodes[0]), "--copy-to", str(nodes[1]),
            "--shards", "2", "--buckets", "6", "--keys", "12", "--json", str(tmp_path / "r.json")]
    assert main(args) == 0
    record = json.loads((tmp_path / "r.json").read_text())
    assert (record["volumes"], record["buckets"], record["keys"]) == (1, 6, 12)
    assert len(record["databases"]) == 4
    for shard in (0, 1):
        seeded = [_all_rows(shard_data_dir(node, shard) / "db") for node in nodes]
        assert seeded[0] == seeded[1]
        assert seeded[0][om_pb2.KEY], f"shard {shard} holds keys of its buckets"
    assert main(args) == 2
    assert main(["freon", "generate", "--data-dir", str(tmp_path / "x"), "--copy-to",
                 str(nodes[1]), "--shards", "2"]) == 2
