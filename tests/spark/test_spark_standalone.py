"""The analysis on a real Spark standalone cluster (``spark_analysis.standalone``).

One master and one worker on 127.0.0.1, started the supported way; the job runs
on them over the session's real smoke bench run, as the command line runs it, and
its report must hold the figures the local-mode report holds. Afterwards no process
of the cluster may be left.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_analysis import standalone
from spark_analysis.report import HTML_FILE
from spark_analysis.summary import SUMMARY_FILE
from tests.processes import REPO, free_port

from .conftest import Report

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow,
              pytest.mark.timeout(600)]


def test_the_job_on_a_standalone_cluster_reports_what_local_mode_reports(
        smoke_run: Path, smoke_report: Report, tmp_path: Path) -> None:
    directory = tmp_path / "spark"
    cluster = standalone.up(directory, free_port(), free_port(), free_port(), timeout_s=120)
    try:
        assert standalone.alive_workers(standalone.master_state(cluster.json_url)) == 1
        out = tmp_path / "report"
        done = subprocess.run(
            [sys.executable, "-m", "spark_analysis", str(smoke_run), "--master",
             cluster.master_url, "--out", str(out)],
            capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        state = standalone.master_state(cluster.json_url)
        assert state is not None
        (app,) = state["completedapps"]
        assert (app["name"], app["state"], app["cores"]) == ("spark_analysis", "FINISHED", 1)
    finally:
        standalone.down(directory)
    assert standalone.group_members(cluster.master_pid) == []
    assert standalone.group_members(cluster.worker_pid) == []
    assert (out / HTML_FILE).is_file()
    on_cluster = _figures(json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8")))
    local = _figures(smoke_report.summary)
    assert on_cluster.keys() == local.keys()
    numbers = {k for k, v in local.items() if isinstance(v, int | float) and v is not True
               and v is not False}
    assert {k: on_cluster[k] for k in numbers} == pytest.approx(
        {k: local[k] for k in numbers}, rel=1e-9)
    assert {k: on_cluster[k] for k in local.keys() - numbers} == {
        k: local[k] for k in local.keys() - numbers}


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    """Every figure of a summary.json, flattened to ``path -> value`` (pytest.approx
    compares flat mappings only)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}/{key}", inner)
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(f"{prefix}/{index}", inner)
        else:
            flat[prefix] = value

    walk("", summary)
    return flat


def test_down_without_a_cluster_is_a_no_op_and_status_says_so(tmp_path: Path) -> None:
    standalone.down(tmp_path)
    assert standalone.main(["status", "--dir", str(tmp_path)]) == 1


def test_up_refuses_a_port_in_use_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(standalone.StandaloneError, match=f"ports in use.*{taken}"):
            standalone.up(tmp_path, free_port(), taken, free_port())
    assert not (tmp_path / standalone.STATE_FILE).exists()
    assert not (tmp_path / "master.log").exists()
