"""Scale figures: namespaces of two sizes, alternated on fresh seeded 3-node clusters.

    python scripts/scale_figures.py SMALL_DB SMALL_KEYS LARGE_DB LARGE_KEYS ROUNDS

SMALL_DB and LARGE_DB are databases that ``om freon generate`` wrote (keys
``preload/<i>`` in vol1/bucket1, e.g. ``om bench --keys N`` leaves one in
OUT/seed/db). Each round starts a cluster on copies of each (Raft secret, no
client TLS, as ``om bench``), writes with ``om freon omkg -t 64`` for 15 s, then
times 300 lookups of random keys and 60 pages of 1,000 keys from random start
keys, and reads each node's resident memory (server + Raft process). Prints a
JSON line per cluster. README, "At 10 million keys".
"""

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil

from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.cluster import preload


def _percentile_ms(seconds: list[float], share: float) -> float:
    return round(sorted(seconds)[int(len(seconds) * share) - 1] * 1000, 1)


def run(label, seed, keys):
    d = Path(f"/tmp/scale-figures/{label}")
    subprocess.run(["rm", "-rf", str(d)])
    om_cluster.write_config(d, 3, om_cluster.free_port_base(), "leader", "", tls=False)
    c = om_cluster.Cluster(d)
    preload.copy_database(seed, [c.config.data_dir / n.id / "db" for n in c.nodes])
    t = time.monotonic()
    for n in c.nodes:
        c.start_node(n.id)
    c.wait_ready(600)
    up = time.monotonic() - t
    out = d / "f.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "om",
            "freon",
            "omkg",
            "-t",
            "64",
            "--duration",
            "15",
            "--om",
            ",".join(c.addresses),
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    writes = json.loads(out.read_text())["write_requests_per_s"]
    rss = {}
    for n in c.nodes:
        p = psutil.Process(c.pid(n.id))
        rss[n.id] = round(
            sum(x.memory_info().rss for x in [p, *p.children(recursive=True)]) / 2**20
        )
    lookups, pages = [], []
    with OMClient(c.addresses, policy=RetryPolicy(deadline_s=30)) as om:
        for _ in range(300):
            k = f"preload/{random.randrange(keys)}"
            t = time.perf_counter()
            om.lookup_key("vol1", "bucket1", k)
            lookups.append(time.perf_counter() - t)
        for _ in range(60):
            start = f"preload/{random.randrange(keys)}"
            t = time.perf_counter()
            page = om.list_keys("vol1", "bucket1", start_key=start, max_keys=1000)
            pages.append(time.perf_counter() - t)
            assert len(page.key_info) == 1000 or page.truncated is False
    q = _percentile_ms
    om_cluster.down(c)
    print(
        json.dumps(
            {
                "label": label,
                "up_s": round(up, 1),
                "writes_per_s": round(writes),
                "rss_mb": rss,
                "lookup_p50_ms": q(lookups, 0.5),
                "lookup_p99_ms": q(lookups, 0.99),
                "list1000_p50_ms": q(pages, 0.5),
                "list1000_p99_ms": q(pages, 0.99),
            }
        ),
        flush=True,
    )


for _ in range(int(sys.argv[5])):
    run("small", Path(sys.argv[1]), int(sys.argv[2]))
    run("large", Path(sys.argv[3]), int(sys.argv[4]))
