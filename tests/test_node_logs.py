"""tests/node_logs.py: a failed test's report carries its nodes' log tails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.node_logs import node_logs, tail
from tests.processes import REPO

A_CLUSTER_TEST = '''
def write_logs(directory):
    (directory / "cluster").mkdir()
    for node in ("om1", "om2"):
        lines = [f"{node} line {i}" for i in range(100)]
        (directory / "cluster" / f"{node}.log").write_text("\\n".join(lines))
    (directory / "cluster" / "audit.log").write_text("not a node log")

def test_fails(tmp_path):
    write_logs(tmp_path)
    assert False, "the nodes did something"

def test_passes(tmp_path):
    write_logs(tmp_path)
'''


def test_a_failed_test_reports_each_node_log_tail_and_a_passing_one_nothing(
        tmp_path: Path) -> None:
    test_file = tmp_path / "test_a_cluster.py"
    test_file.write_text(A_CLUSTER_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.node_logs", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-q", "-rN", str(test_file), f"--basetemp={tmp_path / 't'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert out.count("node log cluster/om1.log (last 40 lines)") == 1, out
    assert out.count("node log cluster/om2.log (last 40 lines)") == 1, out
    assert "om1 line 99" in out
    assert "om1 line 60" in out
    assert "om1 line 59" not in out
    assert "not a node log" not in out


def test_node_logs_are_named_omN_and_bounded(tmp_path: Path) -> None:
    for name in ("om1.log", "om12.log", "omx.log", "audit.log", "om1.log.1"):
        (tmp_path / name).write_text("x")
    for n in range(20, 30):
        (tmp_path / f"om{n}.log").write_text("x")
    found = [p.name for p in node_logs(tmp_path)]
    assert found[:2] == ["om1.log", "om12.log"]
    assert len(found) == 6
    assert "omx.log" not in found
    assert "audit.log" not in found


def test_an_unreadable_log_says_why(tmp_path: Path) -> None:
    assert tail(tmp_path / "om1.log").startswith("(unreadable: ")
