"""``run_bench`` in-process: a failing flow is recorded and the others still run."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

from bench import driver
from bench.progress import StepLog


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
