"""The report of a real (smoke-sized) ``om bench`` run: every section, real numbers."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from spark_analysis import sections
from spark_analysis.report import HTML_FILE

from .conftest import Report

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]   # the smoke bench


def test_report_of_a_real_bench_run_has_every_section(smoke_run: Path,
                                                      smoke_report: Report) -> None:
    out, report = smoke_run, smoke_report
    page = (report.out_dir / HTML_FILE).read_text(encoding="utf-8")
    for title in sections.SECTION_TITLES:
        assert re.search(rf'<h2 id="[^"]+">{re.escape(html.escape(title))}</h2>', page), title
    bench_summary = json.loads((out / "summary.json").read_text())
    (run,) = report.summary["runs"].values()
    leader = run["flows"]["leader"]
    assert leader["write_throughput_rps"] > 0
    assert leader["write_throughput_rps"] == pytest.approx(
        bench_summary["flows"]["leader"]["write_requests_per_s"], rel=0.05)
    assert set(run["ratios"]) >= {"leader_over_replicated", "leader_over_ceiling"}
    assert report.summary["malformed_total"] == 0
    label = bench_summary["flows"]["leader"]["bound"]["label"]
    assert html.escape(f"om bench labelled its measured run {label}: ") in page
