"""``run_bench`` in-process: a failing flow is recorded and the others still run."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

from bench import driver, etcd
from bench.progress import StepLog
from bench.summary import render_table
from om.cli import bench as bench_cli
from om.cli import parser


def test_a_failing_flow_is_recorded_and_the_ceiling_still_runs(tmp_path: Path) -> None:
    profile = dataclasses.replace(driver.PROFILES["smoke"], warmup_s=0.1, measure_s=0.3,
                                  mixed_s=0.0)
    broken = driver.FlowSpec("broken", extra_toml="\n[no_such_section]\nx = 1\n")
    ceiling = next(f for f in driver.FLOWS if f.in_process)
    config = driver.BenchConfig(out=tmp_path, profile=profile, keys=30,
                                flows=(broken, ceiling))
    log = io.StringIO()
    summary = driver.run_bench(config, StepLog(log))
    assert "ConfigError" in summary["flows"]["broken"]["error"]
    assert "write_requests_per_s" not in summary["flows"]["broken"]
    flow = summary["flows"]["ceiling"]
    assert flow["write_requests_per_s"] > 0
    assert flow["preloaded_keys"] == 30
    assert flow["requests_per_batch"] >= 1.0
    assert set(flow["cpu_percent"]) == {"bench"}
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(
        json.dumps(summary))
    assert "broken: FAILED" in log.getvalue()
    assert (tmp_path / "ceiling" / "freon-measure.txt").exists()


def test_the_etcd_flow_is_skipped_with_the_reason_where_etcd_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.etcd.shutil.which", lambda name: None)
    flow = next(f for f in driver.FLOWS if f.etcd)
    profile = dataclasses.replace(driver.PROFILES["smoke"], warmup_s=0.1, measure_s=0.3)
    log = io.StringIO()
    summary = driver.run_bench(driver.BenchConfig(out=tmp_path, profile=profile,
                                                  flows=(flow,)), StepLog(log))
    assert summary["flows"]["etcd"] == {"skipped": "etcd is not installed "
                                                   f"({etcd.INSTALL_HINT})"}
    assert summary["ratios"]["leader_over_etcd"] is None
    assert "etcd: SKIPPED: etcd is not installed" in log.getvalue()
    assert "SKIPPED" in render_table(summary)


def test_etcdbench_records_become_a_freon_result(tmp_path: Path) -> None:
    trace = tmp_path / "client-etcdbench.jsonl"
    lines = [{"v": 1, "kind": "client_request", "flow": "etcd", "t_ns": 1_000 + i,
              "op": "Put", "latency_ns": 2_000_000 * (i + 1), "status": "OK", "retries": 0,
              "write": True} for i in range(4)]
    lines.append({**lines[0], "status": "CLIENT_ERROR"})
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = etcd.read_result(trace, threads=8, measure_s=2.0)
    assert (result.operations, result.failures, result.ok_writes) == (5, 1, 4)
    assert result.write_requests_per_s == 2.0
    assert result.write_latency.summary().max == 8.0
    assert result.failure_statuses == {"CLIENT_ERROR": 1}
    assert result.requests[("Put", "OK")] == 4


def test_the_fso_flows_write_their_phases_and_ratios(tmp_path: Path) -> None:
    """The fso profile's two flows, in-process (the same leader flow, its lock plan
    set by the flow's TOML): each runs OBS keys, files, the rename/create mix and the
    rename measurement on the seeded directory; summary.json holds them and the ratios."""
    profile = dataclasses.replace(driver.PROFILES["smoke"], warmup_s=0.1, measure_s=0.4,
                                  mixed_s=0.4, threads=4, fso_files_big=50,
                                  fso_files_small=3, fso_renames=2)
    flows = tuple(dataclasses.replace(f, in_process=True) for f in driver.FLOWS
                  if f.name in driver.FSO_FLOWS)
    assert [f.name for f in flows] == ["fso", "fso-bucket"]
    log = io.StringIO()
    summary = driver.run_bench(driver.BenchConfig(out=tmp_path, profile=profile, flows=flows),
                               StepLog(log))
    assert summary["fso_preload"]["keys"] == 50
    for name in ("fso", "fso-bucket"):
        flow = summary["flows"][name]
        assert "error" not in flow, flow.get("error")
        assert flow["generator"] == "omfc"
        assert flow["failures"] == 0
        assert flow["write_requests_per_s"] > 0
        fso = flow["fso"]
        assert fso["obs_keys"]["generator"] == "omkg"
        assert fso["obs_keys"]["ok_writes"] > 0
        assert fso["obs_keys_after"]["ok_writes"] > 0
        assert fso["files_over_obs_keys"] == pytest.approx(
            flow["write_requests_per_s"] / fso["obs_keys_write_requests_per_s"])
        assert fso["mix"]["generator"] == "omdr"
        assert fso["mix"]["failures"] == 0
        assert any(request.startswith("RenameKey OK") for request in fso["mix"]["requests"])
        rename = fso["rename"]
        assert (rename["files_big"], rename["files_small"], rename["renames_each"]) == (50, 3, 2)
        assert rename["failures"] == {}
        assert rename["big_over_small"] > 0
    ratios = summary["ratios"]
    for name in ("fso_over_fso_bucket_files", "fso_over_fso_bucket_mix",
                 "fso_files_over_obs_keys", "fso_bucket_rename_big_over_small"):
        assert (ratios[name] or 0) > 0, name
    node_toml = (tmp_path / "fso-bucket" / "node.toml").read_text()
    assert 'lock_plan = "bucket"' in node_toml
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(
        json.dumps(summary))
    table = render_table(summary)
    assert "fso-bucket: OBS keys" in table
    assert "rename of a directory of 50 files" in table


def test_the_fso_flows_are_not_in_the_default_run() -> None:
    assert not set(driver.FSO_FLOWS) & set(driver.DEFAULT_FLOWS)
    assert driver.select_flows(["fso-bucket", "fso"])[0].name == "fso"


def test_no_traces_turns_off_the_servers_and_the_load_generators_traces(
        tmp_path: Path) -> None:
    traced = bench_cli.config_from(parser().parse_args(["bench", "--out", str(tmp_path)]))
    quiet = bench_cli.config_from(parser().parse_args(
        ["bench", "--no-traces", "--out", str(tmp_path)]))
    assert traced.traces
    assert not quiet.traces
    assert quiet.describe()["traces"] is False
    assert driver.client_trace_path(traced, tmp_path) == tmp_path / "client-freon.jsonl"
    assert driver.client_trace_path(quiet, tmp_path) is None
