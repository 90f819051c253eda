"""Every node serves /prom: Ozone's names present and moving under load, one registry
behind /prom and ``om admin metrics``, and every metric the Grafana dashboard queries
exists on a running node."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from om.chaos.resources import ACCOUNTED
from om.cluster import lifecycle as om_cluster
from tests import cluster_harness as harness
from tests.processes import REPO, om_command
from tests.prom_text import samples

pytestmark = pytest.mark.integration
DASHBOARD = REPO / "grafana" / "om-dashboard.json"
OZONE_NAMES = ("om_metrics_num_key_commits", "om_metrics_num_key_commit_fails",
               "om_metrics_num_key_allocate", "om_metrics_num_key_lookup",
               "om_metrics_num_volume_creates", "om_metrics_num_linearizable_read",
               "omha_metrics_ozone_manager_ha_leader_state")
KEYS = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[om_cluster.Cluster]:
    started = harness.start(tmp_path_factory.mktemp("prom") / "cluster")
    yield started
    om_cluster.down(started)


def scrape(http_address: str, path: str = "/prom") -> dict[str, float]:
    """Every sample at the endpoint, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://{http_address}{path}", timeout=10) as answer:
        return samples(answer.read().decode())


def http_addresses(cluster: om_cluster.Cluster) -> dict[str, str]:
    return {node.id: node.http_address for node in cluster.nodes}


def test_every_node_serves_ozone_names_and_they_move_under_load(
        cluster: om_cluster.Cluster) -> None:
    leader = harness.leader_id(cluster)
    addresses = http_addresses(cluster)
    before = {node_id: scrape(address) for node_id, address in addresses.items()}
    for scraped in before.values():
        assert all(name in scraped for name in OZONE_NAMES)
    assert [n for n, s in before.items()
            if s["omha_metrics_ozone_manager_ha_leader_state"] == 1] == [leader]
    with harness.client(cluster) as om:
        om.create_volume("promvol")
        om.create_bucket("promvol", "bkt")
        for i in range(KEYS):
            om.put_key("promvol", "bkt", f"k{i}", 10)
        om.lookup_key("promvol", "bkt", "k0")
    after = scrape(addresses[leader])
    moved = {name: after[name] - before[leader][name] for name in OZONE_NAMES[:6]}
    assert moved == {"om_metrics_num_key_commits": KEYS, "om_metrics_num_key_commit_fails": 0,
                     "om_metrics_num_key_allocate": KEYS, "om_metrics_num_key_lookup": 1,
                     "om_metrics_num_volume_creates": 1, "om_metrics_num_linearizable_read": 1}
    assert after['om_requests_total{status="OK",type="CommitKey"}'] >= KEYS
    assert after["om_batch_requests_count"] > before[leader]["om_batch_requests_count"]
    assert after['om_request_duration_seconds_count{type="CommitKey"}'] >= KEYS
    assert after["om_applied_index"] >= after["om_raft_commit_index"] - 1
    assert journal_syncs(addresses[leader]) > 0
    # every cache a soak subtracts from a node's growth is exported (chaos/resources.py)
    assert all(name.split("{")[0] in after for name in ACCOUNTED), ACCOUNTED
    assert after["om_digest_leaf_cache_bytes"] > before[leader]["om_digest_leaf_cache_bytes"]


def journal_syncs(http_address: str, timeout_s: float = 10.0) -> float:
    """The journal syncs the Raft process reported (it reports about once a second)."""
    deadline = time.monotonic() + timeout_s
    syncs = 0.0
    while time.monotonic() < deadline and not syncs:
        syncs = scrape(http_address).get("om_journal_sync_duration_seconds_count", 0.0)
        time.sleep(0.2)
    return syncs


def test_prom_and_admin_metrics_read_one_registry(cluster: om_cluster.Cluster) -> None:
    leader = harness.leader_id(cluster)
    node = next(n for n in cluster.nodes if n.id == leader)
    printed = subprocess.run(om_command("admin", "metrics", "--om", node.address,
                                        *harness.tls_flags(cluster)),
                             capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    (admin,) = json.loads(printed.stdout)
    scraped = scrape(node.http_address)
    for name in OZONE_NAMES:
        assert admin["metrics"][name] == scraped[name]
    assert admin["http_address"] == node.http_address


def test_unknown_paths_are_not_found_and_metrics_is_an_alias(
        cluster: om_cluster.Cluster) -> None:
    address = cluster.nodes[0].http_address
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(f"http://{address}/nope", timeout=10)
    answer.value.close()
    assert answer.value.code == 404
    assert "om_raft_term" in scrape(address, "/metrics")


def dashboard_metric_names() -> set[str]:
    """The metric names every query of the dashboard reads."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 15
    words = {w for expr in exprs for w in re.findall(r"[a-z_][a-z0-9_]*", expr)}
    return {w for w in words if w.startswith(("om_", "omha_"))}


def test_every_metric_the_dashboard_queries_exists(cluster: om_cluster.Cluster) -> None:
    with harness.client(cluster) as om:   # a lock wait and a batch happen at least once
        om.create_volume("dashvol")
    names = dashboard_metric_names()
    assert "om_metrics_num_key_commits" in names
    served = {re.sub(r"\{.*", "", sample) for node in cluster.nodes
              for sample in scrape(node.http_address)}
    assert names - served == set()


def test_dashboard_is_importable_json() -> None:
    dashboard = json.loads(Path(DASHBOARD).read_text())
    assert dashboard["uid"]
    assert dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
