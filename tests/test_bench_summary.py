"""The summary and ratio computation of ``om bench``, and its options, on synthetic inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import driver
from bench.failover import FailoverResult
from bench.freon import FreonResult
from bench.fso import FsoResults, RenameTimes
from bench.stats import LatencyRecorder
from bench.summary import FlowMeasurement, build_summary, ratios, render_table
from om.cli import parser


def result(ok_writes: int, duration_s: float, write_ms: list[int],
           failures: int = 0) -> FreonResult:
    made = FreonResult("omkg", "key-create", "leader", "bench", 64,
                       operations=ok_writes // 2 + failures, failures=failures,
                       duration_s=duration_s, start_ns=1_000, end_ns=2_000)
    made.write_latency.extend(ms * 1_000_000 for ms in write_ms)
    made.write_latency.extend([1_000_000] * (ok_writes - len(write_ms)))
    made.latency.extend([2_000_000] * made.operations)
    return made


def measurements() -> list[FlowMeasurement]:
    return [
        FlowMeasurement("leader", result(3000, 1.5, [1, 2, 3, 100]), batch_sizes=[10, 20, 30],
                        rss_mb={"om1": 100.0, "om2": 50.0, "om3": 50.0},
                        cpu={"om1": {"cpu": 95.0, "loop_demand": 99.0, "thread_demand": 99.0},
                             "om2": {"cpu": 30.0, "loop_demand": 31.0, "thread_demand": 40.0},
                             "om3": {"cpu": 28.0, "loop_demand": 29.0, "thread_demand": 29.0},
                             "bench": {"cpu": 60.0, "loop_demand": 70.0, "thread_demand": 70.0}},
                        leader="om1"),
        FlowMeasurement("replicated", result(1000, 1.0, [5])),
        FlowMeasurement("leader-nobatch", result(1500, 1.0, [5]), batch_sizes=[1, 1, 1]),
        FlowMeasurement("ceiling", result(8000, 1.0, [1]), rss_mb={"bench": 80.0}),
        FlowMeasurement("etcd", result(2500, 1.0, [4]), durable=True),
    ]


def test_flow_headlines() -> None:
    summary = build_summary(measurements(), {"profile": {"name": "quick"}, "keys": 0})
    leader = summary["flows"]["leader"]
    assert leader["write_requests_per_s"] == pytest.approx(2000.0)
    assert leader["ok_writes"] == 3000
    assert leader["latency_ms"]["max"] == pytest.approx(100.0)
    assert leader["latency_ms"]["p50"] == pytest.approx(1.0)
    assert leader["requests_per_batch"] == pytest.approx(20.0)
    assert leader["batches"] == 3
    assert leader["om_rss_mb"] == pytest.approx(200.0)
    assert leader["cpu_percent"]["om1"] == 95.0
    assert leader["loop_demand_percent"]["bench"] == 70.0
    assert leader["thread_demand_percent"]["om2"] == 40.0
    assert summary["flows"]["replicated"]["requests_per_batch"] == 1.0   # no batch records
    assert summary["flows"]["replicated"]["om_rss_mb"] is None
    assert summary["profile"] == {"name": "quick"}


def test_a_flow_run_without_traces_has_no_batch_size_rather_than_one() -> None:
    """--no-traces leaves the batch sizes unknown: the table says "-", never 1.0."""
    untraced = FlowMeasurement("leader", result(3000, 1.5, [1]), batch_sizes=None)
    summary = build_summary([untraced], {"profile": {"name": "quick"}, "keys": 0})
    assert summary["flows"]["leader"]["requests_per_batch"] is None
    assert summary["flows"]["leader"]["batches"] is None
    row = next(line for line in render_table(summary).splitlines()
               if line.startswith("leader "))
    assert " 1.0 " not in row
    assert " - " in row


def test_ratios_divide_write_throughputs() -> None:
    summary = build_summary(measurements(), {})
    assert summary["ratios"] == {
        "leader_over_replicated": pytest.approx(2.0),
        "leader_over_ceiling": pytest.approx(0.25),
        "leader_over_leader_nobatch": pytest.approx(2000 / 1500),
        "leader_over_etcd": pytest.approx(2000 / 2500),
    }


def test_ratios_are_none_for_missing_or_failed_flows() -> None:
    failed = FlowMeasurement("replicated", None, error="ClusterError: no leader")
    summary = build_summary([measurements()[0], failed], {})
    assert summary["flows"]["replicated"]["error"] == "ClusterError: no leader"
    assert summary["ratios"] == {"leader_over_replicated": None, "leader_over_ceiling": None,
                                 "leader_over_leader_nobatch": None, "leader_over_etcd": None}
    assert ratios({"leader": {"write_requests_per_s": 5.0},
                   "ceiling": {"write_requests_per_s": 0.0}})["leader_over_ceiling"] is None


def test_table_lists_every_flow_and_ratio() -> None:
    summary = build_summary([*measurements(), FlowMeasurement("replicated", None, error="x")],
                            {})
    table = render_table(summary)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["flow", "durable", "write", "req/s"]
    assert next(line for line in lines if line.startswith("etcd")).split()[1] == "yes"
    leader = next(line for line in lines if line.startswith("leader "))
    assert "2,000" in leader
    assert "95+30+28" in leader
    assert "om1 99%" in leader
    assert "ERROR" in next(line for line in lines if line.startswith("replicated"))
    assert any(line.startswith("leader_over_ceiling") and "0.25x" in line for line in lines)


def test_half_load_reports_its_target_and_commit_key_latency() -> None:
    paced = result(1000, 2.0, [4])
    paced.target_rate = 250.0
    paced.op_latency["CommitKey"] = LatencyRecorder()
    paced.op_latency["CommitKey"].extend([3_000_000, 7_000_000])
    leader = measurements()[0]
    leader.half_load = paced
    summary = build_summary([leader, *measurements()[1:]], {})
    half = summary["flows"]["leader"]["half_load"]
    assert half["target_operations_per_s"] == 250.0
    assert half["write_requests_per_s"] == pytest.approx(500.0)
    assert half["op_latency_ms"]["CommitKey"]["max"] == pytest.approx(7.0)
    assert "half_load" not in summary["flows"]["replicated"]
    lines = render_table(summary).splitlines()
    assert "CommitKey p99 ms at half load" in lines[0]
    p99 = f"{half['op_latency_ms']['CommitKey']['p99']:.2f}"
    assert p99 in next(line for line in lines if line.startswith("leader "))


def test_bench_options(tmp_path: Path) -> None:
    from om.cli import bench as bench_cli
    args = parser().parse_args(["bench", "--profile", "smoke", "--out", str(tmp_path),
                                "--flows", "ceiling,leader", "--duration", "3",
                                "--keys", "10"])
    config = bench_cli.config_from(args)
    assert [f.name for f in config.flows] == ["leader", "ceiling"]
    assert config.profile.measure_s == 3.0
    assert config.keys == 10
    with pytest.raises(ValueError, match="unknown flows"):
        driver.select_flows(["leader", "nope"])
    assert parser().parse_args(["bench"]).profile == "quick"


def test_failover_is_summarised_and_printed() -> None:
    leader = measurements()[0]
    leader.failover = FailoverResult([0.3, 0.1, 0.2])
    summary = build_summary([leader], {})
    assert summary["flows"]["leader"]["failover"] == {
        "trials": 3, "median_s": 0.2, "max_s": 0.3, "unavailable_s": [0.3, 0.1, 0.2]}
    line = next(line for line in render_table(summary).splitlines()
                if line.startswith("failover (leader)"))
    assert "median 0.200 s, max 0.300 s" in line


def _cpu(leader_percent: float) -> dict[str, dict[str, float]]:
    use = {"om1": leader_percent, "om2": 10.0, "om3": 10.0, "om1-raft": 5.0, "om2-raft": 2.0,
           "om3-raft": 2.0, "bench": 40.0}
    return {label: {"cpu": cpu, "loop_demand": cpu, "thread_demand": cpu}
            for label, cpu in use.items()}


def test_fso_flows_ratios_and_leader_cpu_per_write() -> None:
    """files / OBS keys uses the mean of the two OBS phases; the leader's CPU per write
    in them (from their own CPU windows) against the files phase's; object ids over
    the bucket lock; the rename medians."""
    obs, after = result(2000, 1.0, []), result(1000, 1.0, [])
    renames = RenameTimes(100_000, 10, [4.0, 5.0, 6.0], [4.0, 4.0, 5.0])
    flows = [
        FlowMeasurement("fso", result(1350, 1.0, []), cpu=_cpu(90.0), leader="om1",
                        fso=FsoResults(obs, after, result(1200, 1.0, []), renames,
                                       obs_cpu=[_cpu(60.0), _cpu(30.0)])),
        FlowMeasurement("fso-bucket", result(150, 1.0, []), cpu=_cpu(20.0), leader="om1",
                        fso=FsoResults(obs, after, result(100, 1.0, []), renames,
                                       obs_cpu=[_cpu(60.0), _cpu(30.0)])),
    ]
    summary = build_summary(flows, {})
    fso = summary["flows"]["fso"]["fso"]
    assert fso["obs_keys_write_requests_per_s"] == pytest.approx(1500.0)
    assert fso["files_over_obs_keys"] == pytest.approx(0.9)
    assert fso["leader_cpu_us_per_write"]["obs_keys"] == pytest.approx(300.0)
    assert fso["leader_cpu_us_per_write"]["files"] == pytest.approx(900_000 / 1350)
    assert fso["files_over_obs_keys_by_leader_cpu"] == pytest.approx(300.0 / (900_000 / 1350))
    assert fso["rename"]["big_over_small"] == pytest.approx(5.0 / 4.0)
    found = summary["ratios"]
    assert found["fso_over_fso_bucket_files"] == pytest.approx(9.0)
    assert found["fso_over_fso_bucket_mix"] == pytest.approx(12.0)
    assert found["fso_files_over_obs_keys"] == pytest.approx(0.9)
    assert found["fso_bucket_rename_big_over_small"] == pytest.approx(1.25)
    assert "leader server CPU per write: OBS keys 300 us" in render_table(summary)
