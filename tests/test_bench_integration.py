"""A very short real ``om bench`` run: every flow, and the files it must leave."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.bound import LABELS, MOVES
from bench.traces import client_request_problems, read_records
from tests.processes import REPO, BenchRun, om_command

pytestmark = pytest.mark.integration
FLOWS = ("leader", "replicated", "leader-nobatch", "ceiling")


@pytest.mark.slow
def test_smoke_run_writes_manifest_summary_and_traces(smoke_bench: BenchRun) -> None:
    out, done = smoke_bench.out, smoke_bench
    assert "leader_over_replicated" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["flows"]) == {*FLOWS, "etcd"}
    assert {"cpu_count", "memory_total_mb", "python", "platform"} <= set(manifest["machine"])
    assert {"protobuf", "pysyncobj", "rocksdict", "uvloop", "locust"} <= set(manifest["versions"])
    assert "revision" in manifest["git"]
    assert 'enabled = false' in manifest["flows"]["leader-nobatch"]["cluster_toml"]
    assert manifest["secure"] is True
    assert all("[tls]" in manifest["flows"][name]["cluster_toml"] for name in FLOWS[:3])
    assert "OM clusters: secure" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    for name in FLOWS:
        flow = summary["flows"][name]
        assert "error" not in flow, flow
        assert flow["write_requests_per_s"] > 0
        assert {"p50", "p99", "max"} <= set(flow["latency_ms"])
        assert flow["requests_per_batch"] >= 1.0
        assert flow["om_rss_mb"] > 0
        half = flow["half_load"]
        assert half["target_operations_per_s"] == pytest.approx(flow["operations_per_s"] / 2)
        assert half["op_latency_ms"]["CommitKey"]["count"] > 0
        assert half["failures"] == 0
        clients = list(read_records(out / name / "traces" / "client-freon.jsonl"))
        assert clients
        assert all(client_request_problems(r) == [] for r in clients)
        assert {r["flow"] for r in clients} == {name}
        servers = [r for path in (out / name / "traces").glob("server-*.jsonl")
                   for r in read_records(path)]
        assert {r["flow"] for r in servers} == {name}
        start, end = flow["window_ns"]
        assert all(start <= r["t_ns"] <= end for r in servers)
        _check_bound_and_load(flow)
    assert summary["flows"]["leader-nobatch"]["requests_per_batch"] == 1.0
    failover = summary["flows"]["leader"]["failover"]
    assert failover["trials"] == 1
    assert 0 < failover["median_s"] == failover["max_s"] < 30
    assert "failover (leader)" in done.stdout
    assert all(isinstance(summary["flows"][name]["elections_during_load"], int)
               for name in ("leader", "replicated", "leader-nobatch"))
    assert all(summary["flows"][name]["durable"] is (name != "ceiling") for name in FLOWS)
    _check_etcd(summary["flows"]["etcd"], out)
    assert set(summary["ratios"]) >= {"leader_over_replicated", "leader_over_ceiling",
                                      "leader_over_etcd"}
    assert all(value > 0 for name, value in summary["ratios"].items()
               if name != "leader_over_etcd" or "skipped" not in summary["flows"]["etcd"])
    for name in ("leader", "ceiling"):
        assert (out / f"{name}-mixed" / "traces" / "client-freon.jsonl").exists()
        assert "Successful executions" in (out / name / "freon-measure.txt").read_text()
        assert "target rate =" in (out / name / "freon-half-load.txt").read_text()
    assert not list(out.glob("*/cluster/*.pid"))          # every node was stopped


def _check_bound_and_load(flow: dict[str, Any]) -> None:
    """Every measured flow is labelled from real evidence, and the machine's load counts
    every metered process (the nodes, their Raft processes and workers, etcd's members,
    the load generator) as the bench's own, none as others'."""
    found = flow["bound"]
    assert found["label"] in LABELS
    assert found["reason"]
    assert found["moves_it"] == MOVES[found["label"]]
    assert 0.0 < found["machine_busy_share"] <= 1.0
    assert found["busiest_thread"]["demand_percent"] >= found["busiest_thread"]["run_percent"]
    assert found["stalls"]["gap_ms_min"] >= 50.0
    load = flow["machine_load"]
    assert load["own_processes"] >= len(flow["cpu_percent"])
    own_percent = 100.0 * load["own_share"] * load["cores"]   # in % of one core, as cpu_percent
    assert own_percent >= sum(flow["cpu_percent"].values()) - 15.0, (load, flow["cpu_percent"])
    assert load["busy_share"] >= load["own_share"] - 0.02


def _check_etcd(flow: dict[str, Any], out: Path) -> None:
    """etcd is measured like the OM flows, or skipped with the reason where it is missing."""
    if shutil.which("etcd") is None:
        assert "not installed" in str(flow["skipped"])
        return
    assert "error" not in flow, flow
    assert flow["durable"] is True
    assert isinstance(flow["write_requests_per_s"], float)
    assert flow["write_requests_per_s"] > 0
    _check_bound_and_load(flow)
    assert flow["bound"]["latency_split_ms"] == {}          # etcd traces no server phases
    records = list(read_records(out / "etcd" / "traces" / "client-etcdbench.jsonl"))
    assert records
    assert all(client_request_problems(r) == [] for r in records)
    assert {(r["flow"], r["op"]) for r in records} == {("etcd", "Put")}


@pytest.mark.slow
def test_insecure_runs_the_om_clusters_plain_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(om_command("bench", "--profile", "smoke", "--out", str(out),
                                     "--duration", "1", "--flows", "leader", "--insecure"),
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "INSECURE: no Raft secret, no TLS" in done.stderr   # the step log
    assert "OM clusters: INSECURE" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["secure"] is False
    toml = manifest["flows"]["leader"]["cluster_toml"]
    assert "[tls]" not in toml
    assert "raft_secret_file" not in toml
    summary = json.loads((out / "summary.json").read_text())
    assert summary["secure"] is False
    assert summary["flows"]["leader"]["write_requests_per_s"] > 0
