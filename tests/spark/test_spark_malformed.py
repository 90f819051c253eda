"""Malformed lines are skipped and counted per reason, and the report is still written.

The run goes through the command line's `main()` in-process: it reuses the test session.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis import sections
from spark_analysis.cli import main
from spark_analysis.report import MARKDOWN_FILE

from .tracegen import MS, T0, batch, client, traces_dir, write_lines

pytestmark = pytest.mark.spark


def _without(record: dict[str, object], field: str) -> dict[str, object]:
    return {key: value for key, value in record.items() if key != field}


@dataclass(frozen=True)
class CommandRun:
    """What one `main()` call wrote and printed."""

    run_dir: Path
    out_dir: Path
    summary: dict[str, Any]
    status: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def malformed_report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> CommandRun:
    run_dir = tmp_path_factory.mktemp("malformed-run")
    good = [client("leader", T0 + i * MS, MS) for i in range(3)]
    lines = [json.dumps(record) for record in good]
    lines += [
        # A mistyped optional field is read as absent: valid, but not a write.
        json.dumps({**client("leader", T0, MS), "write": "yes"}),
        "",  # blank lines are not records
        "not json at all",
        json.dumps(client("leader", T0, MS))[:40],  # truncated
        "[1, 2]",  # JSON, but not an object
        json.dumps({**client("leader", T0, MS), "v": 2}),
        json.dumps(_without(client("leader", T0, MS), "v")),
        json.dumps(_without(client("leader", T0, MS), "latency_ns")),
        json.dumps(_without(batch("leader", T0, 1, 1, 10), "bytes")),
        json.dumps({**client("leader", T0, MS), "t_ns": "yesterday"}),
        json.dumps({**client("leader", T0, MS), "kind": "bogus"}),
    ]
    write_lines(traces_dir(run_dir, "leader") / "client-0.jsonl", lines)
    out_dir = run_dir.parent / f"{run_dir.name}-out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        status = main([str(run_dir), "--out", str(out_dir)])
    return CommandRun(
        run_dir=run_dir,
        out_dir=out_dir,
        summary=json.loads((out_dir / "summary.json").read_text(encoding="utf-8")),
        status=status,
        stdout=stdout.getvalue(),
        stderr=stderr.getvalue(),
    )


def test_command_line_reports_where_and_what_it_skipped(malformed_report: CommandRun) -> None:
    assert malformed_report.status == 0
    page = malformed_report.out_dir / "index.html"
    assert malformed_report.stdout.splitlines() == [f"spark_analysis: report written to {page}"]
    assert malformed_report.stderr.splitlines() == [
        "spark_analysis: skipped 9 lines (invalid_json=3, wrong_version=1, missing_field=3, "
        "bad_type=1, unknown_kind=1)"
    ]
    assert (malformed_report.out_dir / "tables" / "flow_summary.parquet").is_dir()
    assert not (malformed_report.run_dir / "report").exists()  # --out was honoured


def test_skipped_lines_are_counted_per_reason(malformed_report: CommandRun) -> None:
    assert malformed_report.summary["malformed"] == {
        "invalid_json": 3,
        "wrong_version": 1,
        "missing_field": 3,
        "bad_type": 1,
        "unknown_kind": 1,
    }
    assert malformed_report.summary["malformed_total"] == 9
    assert malformed_report.summary["records"]["client_request"] == 4


def test_valid_records_are_still_analysed(malformed_report: CommandRun) -> None:
    (run,) = malformed_report.summary["runs"].values()
    leader = run["flows"]["leader"]
    assert (leader["requests"], leader["ok_requests"], leader["ok_writes"]) == (4, 4, 3)
    assert run["ratios"] == {}  # no second flow to compare with


def test_report_says_what_was_skipped_and_what_is_absent(malformed_report: CommandRun) -> None:
    markdown = (malformed_report.out_dir / MARKDOWN_FILE).read_text(encoding="utf-8")
    assert "9 malformed lines were skipped." in markdown
    assert "| invalid_json | 3 |" in markdown
    for absent in (
        "No successful server_request records, so no phase breakdown.",
        "No server_batch records, so no batch sizes.",
        "No flow has both successful writes and server_batch records, so nothing to compare.",
        "No fault records in the input, so no failover gaps.",
    ):
        assert absent in markdown
    for title in sections.SECTION_TITLES:
        assert f"## {title}\n" in markdown
    assert not list(Path(malformed_report.out_dir).glob("phases.png"))
