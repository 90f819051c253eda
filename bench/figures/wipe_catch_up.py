"""A follower wiped and restarted on a large namespace catches up by snapshot while
writes go on; counts the terms (elections) it cost.

    python -m bench.figures wipe-catch-up SEED_DB

SEED_DB: a database ``om freon generate`` wrote (``om bench --keys N`` leaves one
in OUT/seed/db). A fresh 3-node cluster on copies of it (Raft secret, no client
TLS; compacting every 15 s; in /tmp/scale-figures/wipe, emptied first) takes
``om freon omkg -t 32`` for 75 s; after 30 s a follower is stopped, its data
directory deleted, and started again; the figure is the time until it follows
within 200 entries of the leader. Prints JSON: the node, that time, the terms
before and after, the write rate over the run, and whether the replicas' digests
are equal afterwards. docs/operations/raft-snapshots.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from bench.figures import runner
from bench.figures.figure import Figure, database_dir
from om.protocol import om_pb2

DIRECTORY = Path("/tmp/scale-figures/wipe")
COMPACTION_TOML = "\n[raft]\ncompaction_min_time_s = 15\n"
THREADS, LOAD_S = 32, 75
WIPE_AFTER_S = 30   # every node has compacted (15 s) at least once: its snapshot holds the seed
CAUGHT_UP_SLACK = 200
CATCH_UP_TIMEOUT_S = 300


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("seed_db", type=database_dir, metavar="SEED_DB")


def caught_up(follower: om_pb2.NodeInfo, leader: om_pb2.NodeInfo,
              slack: int = CAUGHT_UP_SLACK) -> bool:
    """Whether the restarted node follows, has applied something, and is within
    ``slack`` entries of the leader."""
    return (follower.role == "FOLLOWER" and follower.applied_index > 0
            and follower.applied_index >= leader.applied_index - slack)


def run(args: argparse.Namespace) -> int:
    directory = runner.fresh_directory(DIRECTORY)
    cluster = runner.new_cluster(directory, tls=False, extra_toml=COMPACTION_TOML)
    runner.seed_by_copying(cluster, args.seed_db)
    load = runner.freon_omkg_command(THREADS, LOAD_S, addresses=cluster.addresses,
                                     json_path=directory / "f.json")
    with runner.started(cluster, 600), runner.load_running(load, keep_stderr=True) as loading:
        time.sleep(WIPE_AFTER_S)
        leader = cluster.wait_for_leader()
        victim = next(n for n in cluster.nodes if n.id != leader.node_id)
        cluster.stop_node(victim.id)
        shutil.rmtree(cluster.config.data_dir / victim.id)
        began = time.monotonic()
        cluster.start_node(victim.id)
        while True:
            info = runner.node_info(victim.address)
            if caught_up(info, cluster.wait_for_leader()):
                break
            if time.monotonic() - began > CATCH_UP_TIMEOUT_S:
                print("TIMEOUT", info)
                break
            time.sleep(0.2)
        took = time.monotonic() - began
        loading.wait()
        terms = {i.node_id: i.term for i in cluster.node_infos()}
    print(json.dumps({
        "wiped": victim.id,
        "caught_up_s": round(took, 1),
        "term_before": leader.term,
        "terms_after": terms,
        "writes_per_s_during": round(runner.write_rate(directory / "f.json")),
        "replicas_equal": runner.replicas_equal(cluster.stopped_digests()),
    }))
    return 0


FIGURE = Figure("wipe-catch-up", "a wiped follower caught up by snapshot under load",
                __doc__ or "", add_arguments, run)
