"""summary.json: the headline numbers of an analysis, as computed by the Spark job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_analysis.metrics import RATIO_FLOWS, ratio_name
from spark_analysis.results import Results
from spark_analysis.schema import SCHEMA_VERSION

SUMMARY_FILE = "summary.json"


def build_summary(results: Results) -> dict[str, Any]:
    """The summary as a JSON-ready dict.

    Layout: `runs[<label>]` holds the run's `path`, `flows[<flow>]` (the `flow_summary`
    columns other than run and flow: write_throughput_rps, write_latency_ms_p50/_p99/_max,
    requests_per_batch_mean, ...) and `ratios`, the write-throughput ratios
    (`leader_over_replicated`, `leader_over_ceiling`, `leader_over_leader_nobatch`,
    `leader_over_etcd`) whose two flows both exist in the run (null when the denominator
    is 0). `records` counts valid records per kind, `malformed` skipped lines per reason,
    `malformed_total` their sum.
    """
    runs: dict[str, Any] = {}
    for run in results.runs:
        flows = {
            row["flow"]: {key: value for key, value in row.items() if key not in ("run", "flow")}
            for row in results.flow_summary
            if row["run"] == run.label
        }
        ratio_rows = [row for row in results.throughput_ratios if row["run"] == run.label]
        ratios = {
            ratio_name(numerator, denominator): ratio_rows[0][ratio_name(numerator, denominator)]
            for numerator, denominator in RATIO_FLOWS
            if numerator in flows and denominator in flows
        }
        runs[run.label] = {"path": str(run.path), "flows": flows, "ratios": ratios}
    return {
        "trace_schema_version": SCHEMA_VERSION,
        "runs": runs,
        "records": results.records,
        "malformed": results.malformed,
        "malformed_total": sum(results.malformed.values()),
    }


def write_summary(results: Results, out_dir: Path) -> Path:
    """Write `build_summary(results)` to `out_dir/summary.json` (strict JSON, no NaN)."""
    path = out_dir / SUMMARY_FILE
    text = json.dumps(build_summary(results), indent=2, sort_keys=True, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path
