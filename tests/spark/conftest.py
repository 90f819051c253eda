"""Fixtures of the Spark tests: one local[1] session and small runs with known answers.

The bench run has five flows, each in its own second of wall clock:

* leader (from T0): 100 CreateKey writes, write i sent at T0 + 10i ms taking (i + 1) ms;
  10 LookupKey reads of 2 ms (k sent at T0 + 5 + 100k ms; even k omit `write`);
  5 CreateKey writes failing QUOTA_EXCEEDED. Window 1.09 s. Server records and 5 batches
  of 1, 2, 3, 4, 10 requests and 100, 200, 300, 400, 1000 bytes.
* replicated (T0 + 10 s): 50 writes of 4 ms every 20 ms; window 0.984 s; 3 batches of 1.
* ceiling (T0 + 20 s): 100 writes of 1 ms every 5 ms; window 0.496 s; no server records.
* leader-nobatch (T0 + 40 s): 40 writes of 2 ms every 25 ms; window 0.977 s; 2 batches
  of 1.
* leader-chaos (T0 + 30 s): requests of 1 ms every 10 ms: 30 OK writes from +0 ms, 50
  NOT_LEADER from +300 ms, then 20 OK writes from +2000 ms (so second 1 has none);
  faults at +400 ms, +2100 ms and +3500 ms (after the last request). Window 2.191 s.

`smoke_run` is a real `om bench --profile smoke` run, made once per test session and
shared by every test that needs one (it starts clusters, so those tests are marked
integration); `smoke_report` is its analysis.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_analysis.cli import write_outputs
from spark_analysis.job import analyse
from spark_analysis.results import Results
from spark_analysis.runs import discover
from spark_analysis.session import spark_session
from tests.processes import BenchRun

from .tracegen import MS, T0, S, batch, client, fault, server, traces_dir, write_records


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one Spark session (and JVM) of the whole test run."""
    with spark_session(master="local[1]") as session:
        yield session


@dataclass(frozen=True)
class Report:
    """An analysed run: its report directory, its results and its summary.json."""

    out_dir: Path
    results: Results
    summary: dict[str, Any]


def run_analysis(spark: SparkSession, run_dir: Path) -> Report:
    """Analyse `run_dir` as the command line does, into `run_dir/report`."""
    out_dir = run_dir / "report"
    out_dir.mkdir()
    results = analyse(spark, discover([run_dir]), out_dir)
    write_outputs(results, out_dir)
    summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    return Report(out_dir=out_dir, results=results, summary=summary)


def _write_leader(run_dir: Path) -> None:
    flow = "leader"
    clients = [client(flow, T0 + i * 10 * MS, (i + 1) * MS) for i in range(100)]
    clients += [
        client(
            flow,
            T0 + (5 + 100 * k) * MS,
            2 * MS,
            op="LookupKey",
            write=None if k % 2 == 0 else False,
        )
        for k in range(10)
    ]
    clients += [
        client(flow, T0 + (3 + 100 * j) * MS, MS, status="QUOTA_EXCEEDED") for j in range(5)
    ]
    clients[0]["unknown_extra_field"] = {"ignored": True}
    servers = [server(flow, T0, (lock, 2, 3, 4, 5, 6)) for lock in (1, 2, 3, 4)]
    servers.append(server(flow, T0, (100,) * 6, status="QUOTA_EXCEEDED"))
    servers += [
        server(flow, T0, (0, execute, 0, 0, 0, 0), op="LookupKey", batch_id=0) for execute in (1, 3)
    ]
    batches = [
        batch(flow, T0 + index * MS, index + 1, requests, size)
        for index, (requests, size) in enumerate(
            [(1, 100), (2, 200), (3, 300), (4, 400), (10, 1000)]
        )
    ]
    write_records(traces_dir(run_dir, flow) / "client-0.jsonl", clients)
    write_records(traces_dir(run_dir, flow) / "server-om1.jsonl", servers + batches)


def _write_replicated(run_dir: Path) -> None:
    flow, start = "replicated", T0 + 10 * S
    write_records(
        traces_dir(run_dir, flow) / "client-0.jsonl",
        [client(flow, start + i * 20 * MS, 4 * MS) for i in range(50)],
    )
    write_records(
        traces_dir(run_dir, flow) / "server-om1.jsonl",
        [server(flow, start, (1, 3, 0, 5, 0, 1))]
        + [batch(flow, start + index * MS, index + 1, 1, 50) for index in range(3)],
    )


def _write_ceiling(run_dir: Path) -> None:
    flow, start = "ceiling", T0 + 20 * S
    write_records(
        traces_dir(run_dir, flow) / "client-0.jsonl",
        [client(flow, start + i * 5 * MS, MS) for i in range(100)],
    )


def _write_nobatch(run_dir: Path) -> None:
    flow, start = "leader-nobatch", T0 + 40 * S
    write_records(
        traces_dir(run_dir, flow) / "client-0.jsonl",
        [client(flow, start + i * 25 * MS, 2 * MS) for i in range(40)],
    )
    write_records(
        traces_dir(run_dir, flow) / "server-om1.jsonl",
        [batch(flow, start + index * MS, index + 1, 1, 60) for index in range(2)],
    )


def _write_chaos(run_dir: Path) -> None:
    flow, start = "leader-chaos", T0 + 30 * S
    clients = [client(flow, start + k * 10 * MS, MS) for k in range(30)]
    clients += [client(flow, start + k * 10 * MS, MS, status="NOT_LEADER") for k in range(30, 80)]
    clients += [client(flow, start + (2000 + m * 10) * MS, MS) for m in range(20)]
    write_records(traces_dir(run_dir, flow) / "client-0.jsonl", clients)
    write_records(
        traces_dir(run_dir, flow) / "faults.jsonl",
        [
            fault(flow, start + 400 * MS, "kill_leader", "om1"),
            fault(flow, start + 2100 * MS, "kill_follower", "om2"),
            fault(flow, start + 3500 * MS, "restart_all", ""),
        ],
    )


@pytest.fixture(scope="session")
def bench_report(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Report:
    """The bench run described in the module docstring, analysed once per test session."""
    run_dir = tmp_path_factory.mktemp("bench-run")
    (run_dir / "manifest.json").write_text('{"git": "abc123", "nodes": 3}', encoding="utf-8")
    _write_leader(run_dir)
    _write_replicated(run_dir)
    _write_ceiling(run_dir)
    _write_nobatch(run_dir)
    _write_chaos(run_dir)
    return run_analysis(spark, run_dir)


@pytest.fixture(scope="session")
def smoke_run(smoke_bench: BenchRun) -> Path:
    """The run directory of the session's real `om bench --profile smoke`."""
    return smoke_bench.out


@pytest.fixture(scope="session")
def smoke_report(spark: SparkSession, smoke_run: Path) -> Report:
    """`smoke_run` analysed once per test session, into `smoke_run/report`."""
    return run_analysis(spark, smoke_run)
