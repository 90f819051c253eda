"""Verify and repair of one node with rows changed across a large namespace.

    python -m bench.figures repair SEED_DB [--rows 1000]

SEED_DB: a database ``om freon generate`` wrote. A fresh 3-node cluster on copies
of it (in /tmp/scale-figures/repair, emptied first), no load; one follower is
stopped, ``--rows`` keyTable rows spread over the whole table are changed
offline as a wrong apply would (each KeyInfo's data size plus one, its digests
following), and it is started again. Then
``om admin verify`` (it must name that node alone), ``om admin repair --node-id
NODE --start`` timed, and ``om admin verify`` again (it must be clean). Prints
JSON: each command's wall time, the differences verify named, the ranges and
rows repair wrote. docs/operations/verify-and-repair.md,
"What digests, verify and the scrub cost".
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from bench.figures import runner
from bench.figures.figure import Figure, database_dir, positive_int
from om.protocol import om_pb2
from om.statemachine.digests import Digests
from om.statemachine.store import Store

DIRECTORY = Path("/tmp/scale-figures/repair")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("seed_db", type=database_dir, metavar="SEED_DB")
    parser.add_argument("--rows", type=positive_int, default=1000,
                        help="keyTable rows changed on the node (default 1000)")


def run(args: argparse.Namespace) -> int:
    runner.wait_for_quiet()
    directory = runner.fresh_directory(DIRECTORY)
    cluster = runner.new_cluster(directory)
    runner.seed_by_copying(cluster, args.seed_db)
    with runner.started(cluster, 600):
        leader = cluster.wait_for_leader()
        victim = next(n.id for n in cluster.nodes if n.id != leader.node_id)
        cluster.stop_node(victim)
        changed = change_rows(cluster.config.data_dir / victim / "db", args.rows)
        cluster.start_node(victim)
        cluster.wait_converged(timeout_s=600)
        verify = runner.timed_om_json("admin", "verify", "--dir", str(directory), "--json",
                                      "--rows-max", str(2 * args.rows))
        repair = runner.timed_om_json("admin", "repair", "--dir", str(directory), "--json",
                                      "--node-id", victim, "--start")
        cluster.wait_converged(timeout_s=600)
        after = runner.timed_om_json("admin", "verify", "--dir", str(directory), "--json")
    print(json.dumps(_report(victim, changed, verify, repair, after), indent=2))
    return 0


def change_rows(db: Path, rows: int, seed: int = 29) -> int:
    """Changes ``rows`` keyTable rows of a stopped node's database, each the first key
    after a random point of a random bucket's keys, as a wrong apply would (its digests
    follow: the replica diverges, it does not drift); returns how many were changed."""
    chooser = random.Random(seed)
    store = Store(db)
    try:
        buckets = [key for key, _ in store.scan(om_pb2.BUCKET, b"", None, 10_000)]
        # each bucket's key prefix, from its first key (om freon generate: PREFIX/INDEX)
        firsts = [store.scan(om_pb2.KEY, bucket + b"/", None, 1) for bucket in buckets]
        prefixes = [page[0][0].rsplit(b"/", 1)[0] + b"/" for page in firsts if page]
        keys: set[bytes] = set()
        for _ in range(rows * 50):      # points falling between the same two keys repeat
            if len(keys) == rows:
                break
            point = chooser.choice(prefixes) + str(chooser.randrange(10**8)).encode()
            found = store.scan(om_pb2.KEY, b"", point, 1)
            if found:
                keys.add(found[0][0])
        with Digests.attach(store).changes() as digest:    # as a wrong apply would
            batch = store.new_batch()
            for key in keys:
                info = om_pb2.KeyInfo.FromString(store.get(om_pb2.KEY, key) or b"")
                info.data_size += 1
                store.batch_put(batch, om_pb2.KEY, key, info.SerializeToString())
                digest.put(om_pb2.KEY, key, info.SerializeToString())
            digest.write(batch)
        return len(keys)
    finally:
        store.close()


def _report(victim: str, changed: int, verify: runner.Timed, repair: runner.Timed,
            after: runner.Timed) -> dict[str, Any]:
    return {
        "node": victim, "rows_changed": changed,
        "verify": {"wall_s": verify.wall_s, "result": verify.out.get("result"),
                   "minority": verify.out.get("minority"),
                   "differences_named": len(verify.out.get("differences", [])),
                   "read_s": {n["node_id"]: n["read_s"] for n in verify.out["nodes"]}},
        "repair": {"wall_s": repair.wall_s, "cleared": repair.out.get("cleared"),
                   "leaves": repair.out.get("repaired"),
                   "rows_written": repair.out.get("rows_written")},
        "verify_after": {"wall_s": after.wall_s, "result": after.out.get("result")},
    }


FIGURE = Figure("repair", "verify and repair of one node with rows changed all over a "
                "large namespace", __doc__ or "", add_arguments, run)
