"""The command line: arguments, the Java check, then the job, the plots and the report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from spark_analysis.job import analyse
from spark_analysis.report import write_report
from spark_analysis.results import Results
from spark_analysis.runs import TRACE_GLOB, discover
from spark_analysis.sections import build_sections, report_title
from spark_analysis.session import java_problem, spark_session
from spark_analysis.summary import write_summary

EXIT_OK = 0
EXIT_USAGE = 2


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed arguments; exits with status 2 and a usage line when they are wrong."""
    parser = argparse.ArgumentParser(
        prog="spark_analysis",
        description="Analyse benchmark traces (docs/TRACES.md) into tables, plots and a report.",
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument(
        "--master",
        help="Spark master URL (default: the one spark-submit was given, else local[*])",
    )
    parser.add_argument(
        "--out", type=Path, help="report directory (default: the first RUN_DIR's report/)"
    )
    parser.add_argument(
        "--driver-host",
        default="127.0.0.1",
        help="address the Spark driver binds to and advertises (default: 127.0.0.1)",
    )
    return parser.parse_args(argv)


def output_dir(run_dirs: Sequence[Path], out: Path | None) -> Path:
    """Where the report goes: `out` when given, else the first run directory's report/."""
    return out if out is not None else run_dirs[0] / "report"


def write_outputs(results: Results, out_dir: Path) -> Path:
    """Write summary.json, the PNG plots, report.md and index.html; return index.html."""
    write_summary(results, out_dir)
    _, page = write_report(report_title(results), build_sections(results, out_dir), out_dir)
    return page


def main(argv: Sequence[str] | None = None) -> int:
    """Run the whole analysis; return the process exit status.

    Status 2, with one line on stderr, when Java is missing, a RUN_DIR is not a
    directory, or no RUN_DIR holds a trace file. Otherwise writes tables/*.parquet,
    summary.json, the PNG plots, report.md and index.html, prints where, and returns 0.
    """
    args = parse_args(argv)
    problem = java_problem()
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_USAGE
    try:
        runs = discover(args.run_dirs)
    except NotADirectoryError as error:
        print(f"spark_analysis: {error}", file=sys.stderr)
        return EXIT_USAGE
    if not any(run.files for run in runs):
        where = ", ".join(str(run.path / TRACE_GLOB) for run in runs)
        print(f"spark_analysis: no trace files match {where}", file=sys.stderr)
        return EXIT_USAGE
    out_dir = output_dir(args.run_dirs, args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with spark_session(args.master, args.driver_host) as spark:
        results = analyse(spark, runs, out_dir)
    page = write_outputs(results, out_dir)
    skipped = {reason: count for reason, count in results.malformed.items() if count}
    if skipped:
        counts = ", ".join(f"{reason}={count}" for reason, count in skipped.items())
        print(f"spark_analysis: skipped {sum(skipped.values())} lines ({counts})", file=sys.stderr)
    print(f"spark_analysis: report written to {page}")
    return EXIT_OK
