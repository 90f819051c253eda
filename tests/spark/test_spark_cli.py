"""The command line's checks before Spark starts, and where it puts the report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_analysis.cli import main, output_dir
from spark_analysis.runs import discover
from spark_analysis.session import JAVA_MISSING

from .tracegen import MS, T0, client, traces_dir, write_records

REPO = Path(__file__).resolve().parents[2]


def _env_without_java() -> dict[str, str]:
    """This environment minus JAVA_HOME and every PATH entry that holds a `java`."""
    env = {key: value for key, value in os.environ.items() if key != "JAVA_HOME"}
    env["PATH"] = os.pathsep.join(
        entry
        for entry in env.get("PATH", "").split(os.pathsep)
        if entry and not (Path(entry) / "java").exists()
    )
    return env


def _run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_analysis", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _run_dir(tmp_path: Path) -> Path:
    write_records(traces_dir(tmp_path, "leader") / "client-0.jsonl", [client("leader", T0, MS)])
    return tmp_path


def test_missing_java_is_one_line_and_status_2(tmp_path: Path) -> None:
    result = _run_cli([str(_run_dir(tmp_path))], _env_without_java())
    assert result.returncode == 2
    assert result.stderr.splitlines() == [JAVA_MISSING]
    assert result.stdout == ""
    assert not (tmp_path / "report").exists()


def test_java_home_without_java_is_one_line_and_status_2(tmp_path: Path) -> None:
    env = _env_without_java()
    env["JAVA_HOME"] = str(tmp_path / "no-jdk")
    result = _run_cli([str(_run_dir(tmp_path))], env)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"spark_analysis: JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java")


def test_not_a_directory_is_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"spark_analysis: {tmp_path / 'missing'} is not a directory"


def test_no_trace_files_is_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "leader" / "traces").mkdir(parents=True)
    assert main([str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("spark_analysis: no trace files match ")


def test_script_mode_finds_its_package(tmp_path: Path) -> None:
    """`spark-submit spark_analysis/__main__.py` runs the file as a plain script."""
    result = subprocess.run(
        [sys.executable, str(REPO / "spark_analysis" / "__main__.py"), str(tmp_path / "none")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"spark_analysis: {tmp_path / 'none'} is not a directory"]


def test_report_goes_to_the_first_run_unless_out_is_given(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    assert output_dir([first, second], None) == first / "report"
    assert output_dir([first, second], tmp_path / "out") == tmp_path / "out"


def test_runs_are_labelled_uniquely(tmp_path: Path) -> None:
    one, two = tmp_path / "x" / "run", tmp_path / "y" / "run"
    for run_dir in (one, two):
        _run_dir(run_dir)
    (one / "manifest.json").write_text('{"git": "abc"}', encoding="utf-8")
    (two / "manifest.json").write_text("[not an object]", encoding="utf-8")
    first, second = discover([one, two])
    assert (first.label, second.label) == (str(one), str(two))
    assert first.files == (one / "leader" / "traces" / "client-0.jsonl",)
    assert (first.manifest, second.manifest) == ({"git": "abc"}, None)
    (single,) = discover([one])
    assert single.label == "run"
