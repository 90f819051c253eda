"""``om bench --profile sweep`` (``bench/sweep.py``): its points, their order, the ratios at
each in-flight count and the table, on synthetic results; and each flow's label and
warning in the summary and the printed table."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import driver, sweep
from bench.bound import Stalls
from bench.machine_load import MachineLoad, OtherProcess
from bench.summary import FlowMeasurement, build_summary, render_table
from om.cli import bench as bench_cli
from om.cli import parser
from tests.test_bench_summary import result


def test_the_sweep_profile_runs_each_flow_at_each_count_counts_first(tmp_path: Path) -> None:
    args = parser().parse_args(["bench", "--profile", "sweep", "--out", str(tmp_path)])
    config = bench_cli.config_from(args)
    assert [f.name for f in config.flows] == [
        "leader@16", "replicated@16", "etcd@16", "leader@64", "replicated@64", "etcd@64",
        "leader@256", "replicated@256", "etcd@256"]
    assert [f.threads for f in config.flows] == [16] * 3 + [64] * 3 + [256] * 3
    assert not any(f.failover for f in config.flows)
    assert [f.execution for f in config.flows[:2]] == ["leader", "replicated"]
    assert config.flows[2].etcd
    assert config.profile.half_load_s > 0                   # the fixed-rate latency phase stays
    narrowed = bench_cli.config_from(parser().parse_args(
        ["bench", "--profile", "sweep", "--flows", "etcd,leader", "--out", str(tmp_path)]))
    assert [f.name for f in narrowed.flows[:2]] == ["leader@16", "etcd@16"]
    with pytest.raises(ValueError, match="sets its own in-flight counts"):
        bench_cli.config_from(parser().parse_args(
            ["bench", "--profile", "sweep", "--threads", "8", "--out", str(tmp_path)]))


def test_point_names() -> None:
    assert sweep.point_name("leader", 64) == "leader@64"
    assert sweep.split_name("leader@64") == ("leader", 64)
    assert sweep.split_name("leader-1node") is None
    assert sweep.split_name("leader@") is None
    with pytest.raises(AssertionError):
        sweep.point_name("leader", 0)


def _point(name: str, writes: int) -> FlowMeasurement:
    return FlowMeasurement(name, result(writes, 1.0, [5]),
                           stalls=Stalls(50.0, 0, 0.0, 6.0),
                           machine=MachineLoad(2, 1.0, 0.5, 0.5, 0.0))


def test_sweep_ratios_and_table_are_per_in_flight_count() -> None:
    points = [_point("leader@16", 1000), _point("etcd@16", 2000),
              _point("replicated@16", 500), _point("leader@64", 3000),
              _point("etcd@64", 2000), FlowMeasurement("replicated@64", None, error="boom")]
    summary = build_summary(points, {})
    ratios = summary["ratios"]
    assert ratios["leader_over_etcd_at_16"] == pytest.approx(0.5)
    assert ratios["leader_over_replicated_at_16"] == pytest.approx(2.0)
    assert ratios["leader_over_etcd_at_64"] == pytest.approx(1.5)
    assert ratios["leader_over_replicated_at_64"] is None
    lines = render_table(summary).splitlines()
    assert "leader_over_replicated_at_256" not in summary["ratios"]   # no 256 point ran
    assert not any(line.startswith("leader_over_etcd ") for line in lines)  # no "leader" flow
    assert "leader_over_replicated_at_64 -" in lines
    assert "leader_over_etcd_at_64       1.50x" in lines
    header = next(line for line in lines if line.startswith("write req/s (bound) at"))
    assert header.split("  ")[-1].strip() == "64 in flight"
    leader, replicated, etcd = lines[lines.index(header) + 1:lines.index(header) + 4]
    assert leader.startswith("leader ")
    assert "1,000 (cycle-bound)" in leader
    assert "3,000 (cycle-bound)" in leader
    assert replicated.startswith("replicated ")
    assert replicated.rstrip().endswith("ERROR")
    assert etcd.startswith("etcd ")
    assert sweep.render(build_summary([_point("leader", 10)], {})) == []


def test_each_flow_prints_its_label_and_a_busy_machine_warns_last() -> None:
    hog = OtherProcess(4242, "python3 -c hog", 0.40)
    busy = FlowMeasurement("leader", result(3000, 1.0, [5]),
                           machine=MachineLoad(2, 1.0, 0.95, 0.55, 0.0, (hog,)))
    quiet = _point("replicated", 1000)
    summary = build_summary([busy, quiet], {})
    assert summary["flows"]["leader"]["bound"]["label"] == "CPU-bound"
    assert summary["flows"]["replicated"]["bound"]["label"] == "cycle-bound"
    assert summary["flows"]["replicated"]["machine_load"]["warning"] is None
    assert len(summary["warnings"]) == 1
    assert summary["warnings"][0].startswith("leader: other processes used 40% of the machine")
    assert "'python3 -c hog' (pid 4242) 40%" in summary["warnings"][0]
    lines = render_table(summary).splitlines()
    assert lines[-1] == f"WARNING: {summary['warnings'][0]}"
    assert lines[0].split()[-2:] == ["bound", "failures"]
    row = next(line for line in lines if line.startswith("leader "))
    assert "CPU-bound" in row
    reasons = lines.index("what bound each measured run (bench/bound.py):")
    assert lines[reasons + 1].split()[:2] == ["leader", "CPU-bound"]
    assert "the machine's 2 cores were 95% busy (the bench's processes 55%, others 40%)" \
        in lines[reasons + 1]
    assert any(line.startswith("  stall-bound would move with") for line in lines)
    assert driver.PROFILES["sweep"].in_flight == sweep.IN_FLIGHT
