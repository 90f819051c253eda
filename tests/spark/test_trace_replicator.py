"""The trace replicator (`python -m spark_analysis.replicate`): K back-to-back copies of
a run, whose analysis is the source's with every count multiplied by K."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis import replicate
from spark_analysis.replicate import ReplicateError

from .conftest import Report, run_analysis
from .tracegen import MS, T0, batch, client, fault, server, traces_dir, write_lines, write_records

FACTOR = 3


def _small_run(run_dir: Path) -> Path:
    """One leader flow: 20 writes of 1-20 ms every 10 ms, 2 batches, a fault, and three
    lines the reader skips (a blank one, invalid JSON, a record without t_ns)."""
    flow = "leader"
    clients = [client(flow, T0 + i * 10 * MS, (i + 1) * MS) for i in range(20)]
    write_lines(traces_dir(run_dir, flow) / "client-0.jsonl",
                [json.dumps(record) for record in clients] + ["", "{not json",
                                                             '{"v": 1, "kind": "fault"}'])
    write_records(traces_dir(run_dir, flow) / "server-om1.jsonl", [
        server(flow, T0, (1, 2, 3, 4, 5, 6), batch_id=1),
        server(flow, T0 + MS, (1, 2, 3, 4, 5, 6), batch_id=2),
        server(flow, T0 + 2 * MS, (0, 1, 0, 0, 0, 0), op="LookupKey", batch_id=0),
        batch(flow, T0, 1, 1, 100),
        batch(flow, T0 + MS, 2, 1, 100),
    ])
    write_records(traces_dir(run_dir, flow) / "faults.jsonl",
                  [fault(flow, T0 + 50 * MS, "kill_leader", "om1")])
    (run_dir / "manifest.json").write_text('{"git": "abc123"}', encoding="utf-8")
    (run_dir / "summary.json").write_text('{"flows": {}}', encoding="utf-8")
    return run_dir


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _records(path: Path) -> list[dict[str, Any]]:
    found = []
    for line in _lines(path):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record.get("t_ns"), int):
            found.append(record)
    return found


def test_every_file_holds_k_copies_the_first_verbatim_and_malformed_lines_kept(
        tmp_path: Path) -> None:
    source = _small_run(tmp_path / "src")
    replica = replicate.replicate(source, tmp_path / "dst", FACTOR)
    total = 0
    for path in sorted(source.glob("*/traces/*.jsonl")):
        original = _lines(path)
        copied = _lines(tmp_path / "dst" / path.relative_to(source))
        assert len(copied) == FACTOR * len(original)
        assert copied[:len(original)] == original
        for skipped in ("", "{not json", '{"v": 1, "kind": "fault"}'):
            assert copied.count(skipped) == FACTOR * original.count(skipped)
        total += len(original)
    assert (replica.factor, replica.source_lines, replica.lines) == (FACTOR, total,
                                                                     FACTOR * total)


def test_copies_are_shifted_by_the_flow_period_and_never_overlap(tmp_path: Path) -> None:
    source = _small_run(tmp_path / "src")
    replicate.replicate(source, tmp_path / "dst", FACTOR)
    clients = _records(tmp_path / "dst/leader/traces/client-0.jsonl")
    per_copy = len(clients) // FACTOR
    # The flow spans from T0 to the last client's completion, T0 + 190 + 20 ms.
    period = 211 * MS
    for copy in range(FACTOR):
        for original, shifted in zip(clients[:per_copy],
                                     clients[copy * per_copy:(copy + 1) * per_copy],
                                     strict=True):
            assert shifted == {**original, "t_ns": original["t_ns"] + copy * period}
    ends = [max(r["t_ns"] + r["latency_ns"] for r in clients[c * per_copy:(c + 1) * per_copy])
            for c in range(FACTOR)]
    starts = [min(r["t_ns"] for r in clients[c * per_copy:(c + 1) * per_copy])
              for c in range(FACTOR)]
    assert all(ends[c] < starts[c + 1] for c in range(FACTOR - 1))
    (fault_record, *others) = _records(tmp_path / "dst/leader/traces/faults.jsonl")
    assert [r["t_ns"] - fault_record["t_ns"] for r in others] == [period, 2 * period]


def test_batch_ids_stay_unique_and_requests_name_their_copy_s_batch(tmp_path: Path) -> None:
    source = _small_run(tmp_path / "src")
    replicate.replicate(source, tmp_path / "dst", FACTOR)
    records = _records(tmp_path / "dst/leader/traces/server-om1.jsonl")
    batches = [r["batch_id"] for r in records if r["kind"] == "server_batch"]
    requests = [r["batch_id"] for r in records if r["kind"] == "server_request"]
    assert batches == [1, 2, 4, 5, 7, 8]
    assert requests == [1, 2, 0, 4, 5, 0, 7, 8, 0]


def test_manifest_names_the_source_and_summary_is_copied(tmp_path: Path) -> None:
    source = _small_run(tmp_path / "src")
    replicate.replicate(source, tmp_path / "dst", FACTOR)
    manifest = json.loads((tmp_path / "dst/manifest.json").read_text(encoding="utf-8"))
    assert manifest["git"] == "abc123"
    assert manifest["replicated"] == {"from": str(source.resolve()), "factor": FACTOR,
                                      "by": "python -m spark_analysis.replicate",
                                      "period_ns": {"leader": 211 * MS}}
    assert (tmp_path / "dst/summary.json").read_bytes() == (source / "summary.json").read_bytes()


def test_records_picks_the_smallest_factor_that_reaches_them(tmp_path: Path) -> None:
    source = _small_run(tmp_path / "src")
    lines = sum(len(_lines(path)) for path in source.glob("*/traces/*.jsonl"))
    assert replicate.factor_for(source, lines) == 1
    assert replicate.factor_for(source, lines + 1) == 2
    assert replicate.factor_for(source, 10 * lines) == 10


@pytest.mark.parametrize("problem", ["factor_zero", "factor_too_big", "destination_not_empty",
                                     "no_traces", "no_space"])
def test_a_refused_replica_writes_nothing(tmp_path: Path, problem: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source = _small_run(tmp_path / "src")
    destination = tmp_path / "dst"
    factor = FACTOR
    if problem == "factor_zero":
        factor = 0
    elif problem == "factor_too_big":
        factor = replicate.FACTOR_MAX + 1
    elif problem == "destination_not_empty":
        destination.mkdir()
        (destination / "mine").write_text("keep", encoding="utf-8")
    elif problem == "no_traces":
        source = tmp_path / "empty"
        source.mkdir()
    else:
        monkeypatch.setattr(replicate, "FREE_SPACE_MARGIN", 1e15)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ReplicateError):
        replicate.replicate(source, destination, factor)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_write_that_fails_midway_removes_the_replica(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _small_run(tmp_path / "src")
    real = replicate._write_copies
    calls = []

    def fill_the_disk(*args: Any) -> int:
        calls.append(args)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*args)

    monkeypatch.setattr(replicate, "_write_copies", fill_the_disk)
    with pytest.raises(ReplicateError, match="No space left on device"):
        replicate.replicate(source, tmp_path / "dst", FACTOR)
    assert not (tmp_path / "dst").exists()
    assert len(calls) == 2


def test_the_command_line_reports_what_it_wrote_and_refusals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _small_run(tmp_path / "src")
    assert replicate.main([str(source), str(tmp_path / "dst"), "--records", "50"]) == 0
    assert "2 copies" in capsys.readouterr().out
    assert replicate.main([str(source), str(tmp_path / "dst"), "--factor", "2"]) == 1
    assert "not an empty directory" in capsys.readouterr().err


@pytest.mark.spark
@pytest.mark.slow
def test_the_analysis_of_a_replica_is_the_source_s_k_times_over(
        spark: SparkSession, bench_report: Report, tmp_path: Path) -> None:
    destination = tmp_path / "replica"
    replicate.replicate(bench_report.out_dir.parent, destination, FACTOR)
    replica = run_analysis(spark, destination)
    periods = json.loads((destination / "manifest.json").read_text(
        encoding="utf-8"))["replicated"]["period_ns"]
    source = bench_report.summary
    assert replica.summary["records"] == {kind: FACTOR * count
                                          for kind, count in source["records"].items()}
    assert replica.summary["malformed"] == {reason: FACTOR * count
                                            for reason, count in source["malformed"].items()}
    (flows,) = (run["flows"] for run in source["runs"].values())
    (replica_flows,) = (run["flows"] for run in replica.summary["runs"].values())
    assert replica_flows.keys() == flows.keys()
    for flow, figures in flows.items():
        copied = replica_flows[flow]
        assert (copied["requests"], copied["ok_writes"]) == (
            FACTOR * figures["requests"], FACTOR * figures["ok_writes"]), flow
        assert copied["write_latency_ms_max"] == figures["write_latency_ms_max"], flow
        assert copied["write_latency_ms_p50"] == pytest.approx(
            figures["write_latency_ms_p50"], rel=0.05), flow
        assert copied["requests_per_batch_mean"] == pytest.approx(
            figures["requests_per_batch_mean"]), flow
        assert copied["start_ns"] == figures["start_ns"], flow
        assert copied["end_ns"] == figures["end_ns"] + (FACTOR - 1) * periods[flow], flow
        seconds = (copied["end_ns"] - copied["start_ns"]) / 1e9
        assert copied["throughput_rps"] == pytest.approx(copied["ok_requests"] / seconds), flow
        if flow != "leader-chaos":  # its last fault comes 1.3 s after its last request
            assert copied["throughput_rps"] == pytest.approx(figures["throughput_rps"],
                                                             rel=0.01), flow
