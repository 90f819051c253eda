"""A follower wiped and restarted on a large namespace catches up by snapshot while
writes go on; counts the terms (elections) it cost.

    python scripts/wipe_catch_up.py SEED_DB

SEED_DB: a database ``om freon generate`` wrote (``om bench --keys N`` leaves one
in OUT/seed/db). README, "A wiped follower at 10M".
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from om.cluster import lifecycle as om_cluster
from om.cluster import preload

seed = Path(sys.argv[1])
d = Path("/tmp/scale-figures/wipe")
subprocess.run(["rm", "-rf", str(d)])
om_cluster.write_config(
    d, 3, om_cluster.free_port_base(), "leader", "\n[raft]\ncompaction_min_time_s = 15\n", tls=False
)
c = om_cluster.Cluster(d)
preload.copy_database(seed, [c.config.data_dir / n.id / "db" for n in c.nodes])
for n in c.nodes:
    c.start_node(n.id)
leader = c.wait_ready(600)
load = subprocess.Popen(
    [
        sys.executable,
        "-m",
        "om",
        "freon",
        "omkg",
        "-t",
        "32",
        "--duration",
        "75",
        "--om",
        ",".join(c.addresses),
        "--json",
        str(d / "f.json"),
    ],
    stdout=subprocess.DEVNULL,
)
time.sleep(30)  # every node has compacted (15 s) at least once: its snapshot holds the seed
lead = c.wait_for_leader()
term0 = lead.term
victim = next(n for n in c.nodes if n.id != lead.node_id)
c.stop_node(victim.id)
shutil.rmtree(c.config.data_dir / victim.id)
t = time.monotonic()
c.start_node(victim.id)
while True:
    info = om_cluster.node_infos([victim.address], 1.0)[0]
    now = c.wait_for_leader()
    if (
        info.role == "FOLLOWER"
        and info.applied_index >= now.applied_index - 200
        and info.applied_index > 0
    ):
        break
    if time.monotonic() - t > 300:
        print("TIMEOUT", info)
        break
    time.sleep(0.2)
took = time.monotonic() - t
load.wait()
terms = {i.node_id: i.term for i in c.node_infos()}
om_cluster.down(c)
writes = json.loads((d / "f.json").read_text())["write_requests_per_s"]
digests = c.stopped_digests()
print(
    json.dumps(
        {
            "wiped": victim.id,
            "caught_up_s": round(took, 1),
            "term_before": term0,
            "terms_after": terms,
            "writes_per_s_during": round(writes),
            "replicas_equal": len({json.dumps(x, sort_keys=True) for x in digests.values()}) == 1,
        }
    )
)
