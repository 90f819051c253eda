"""The locustfile, headless for a few seconds against a real single-node ``om serve``, and
against a secure cluster."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.traces import client_request_problems, read_records
from om.cluster import lifecycle as om_cluster
from tests import cluster_harness as harness
from tests.processes import REPO, ServerProcess, free_port

pytestmark = pytest.mark.integration
LOCUSTFILE = REPO / "bench" / "locustfile.py"


def locust_command() -> list[str]:
    found = shutil.which("locust", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "locust"]


def test_locustfile_runs_headless_without_failures(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", free_port())
    try:
        env = {**os.environ, "OM_TRACE": str(tmp_path / "trace-{pid}.jsonl"),
               "OM_TRACE_FLOW": "locust"}
        env.pop("OM_ADDRESS", None)
        done = subprocess.run(
            [*locust_command(), "-f", str(LOCUSTFILE), "--headless", "-u", "4", "-r", "4",
             "-t", "10s", "--host", server.address, "--csv", str(tmp_path / "run"),
             "--only-summary", "--exit-code-on-error", "3"],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False)
    finally:
        server.kill()
    assert done.returncode == 0, done.stderr[-3000:]
    with (tmp_path / "run_stats.csv").open() as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    assert int(rows["Aggregated"]["Request Count"]) > 0
    assert int(rows["Aggregated"]["Failure Count"]) == 0
    assert {"CreateKey", "CommitKey", "LookupKey", "ListKeys"} <= set(rows)
    traces = list(tmp_path.glob("trace-*.jsonl"))
    assert traces
    records = [r for path in traces for r in read_records(path)]
    assert records
    assert all(client_request_problems(r) == [] for r in records)


def test_locustfile_finds_a_secure_clusters_certificate(tmp_path: Path) -> None:
    """Against a cluster secure by default: the certificate from ``$OM_CLUSTER_DIR``.
    Locust's clock runs from its start: each user's TLS set-up (the cluster's volume and
    bucket, three nodes' handshakes) took more than 3 s on a loaded two-core machine,
    and the run then counted no request at all; 12 s leaves room for it."""
    cluster = om_cluster.up(tmp_path / "cluster", 3, om_cluster.free_port_base(), "leader",
                            harness.FAST_RAFT, timeout_s=60, remember_it=False)
    try:
        assert cluster.client_tls() is not None
        env = {**os.environ, "OM_CLUSTER_DIR": str(cluster.directory)}
        for name in ("OM_ADDRESS", "OM_CERT", "OM_KEY", "OM_CA", "OM_TRACE"):
            env.pop(name, None)
        done = subprocess.run(
            [*locust_command(), "-f", str(LOCUSTFILE), "--headless", "-u", "2", "-r", "2",
             "-t", "12s", "--host", ",".join(cluster.addresses), "--csv",
             str(tmp_path / "run"), "--only-summary", "--exit-code-on-error", "3"],
            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60, check=False)
    finally:
        om_cluster.down(cluster)
    assert done.returncode == 0, done.stderr[-3000:]
    with (tmp_path / "run_stats.csv").open() as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    assert int(rows["Aggregated"]["Request Count"]) > 0
    assert int(rows["Aggregated"]["Failure Count"]) == 0
