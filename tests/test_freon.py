"""``om freon`` against a real ``om serve``, and the engine in-process."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import freon
from bench.ceiling import InProcessCaller, in_process_node
from bench.session import RequestCaller
from bench.traces import client_request_problems, read_records
from om.client import OMClient
from om.client import requests as build
from tests.processes import REPO, ServerProcess, free_port, om_command


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path / "data", free_port())
    yield process
    process.kill()


def om_freon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(om_command("freon", *args), capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=False)


@pytest.mark.integration
def test_omkg_creates_keys_reports_and_traces(server: ServerProcess, tmp_path: Path) -> None:
    trace = tmp_path / "client.jsonl"
    done = om_freon("omkg", "-n", "200", "-t", "8", "--om", server.address, "-p", "pre",
                    "--trace", str(trace), "--flow", "leader", "--json", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    for line in ("key-create", "count = 200", "mean rate =", "median =", "99.9% <=",
                 "Total execution time (sec):", "Failures: 0", "Successful executions: 200"):
        assert line in done.stdout
    with OMClient([server.address]) as client:
        listed = client.list_keys("vol1", "bucket1", prefix="pre/", max_keys=1000)
    assert sorted(k.key_name for k in listed.key_info) == sorted(f"pre/{i}" for i in range(200))
    records = list(read_records(trace))
    assert len(records) == 400                    # CreateKey + CommitKey per key
    assert all(client_request_problems(r) == [] for r in records)
    assert {(r["op"], r["status"], r["flow"], r["write"]) for r in records} == {
        ("CreateKey", "OK", "leader", True), ("CommitKey", "OK", "leader", True)}
    assert json.loads((tmp_path / "r.json").read_text())["successes"] == 200


@pytest.mark.integration
def test_ockrw_and_ombg_and_total_failure(server: ServerProcess) -> None:
    assert om_freon("omkg", "-n", "20", "--om", server.address, "-p", "k").returncode == 0
    done = om_freon("ockrw", "-n", "100", "-t", "4", "--om", server.address, "-p", "k",
                    "--range", "20", "--percentage-read", "60", "--percentage-list", "20")
    assert done.returncode == 0, done.stderr
    assert "key-read-write-list" in done.stdout
    assert "Failures: 0" in done.stdout
    assert "LookupKey OK" in done.stdout
    assert "ListKeys OK" in done.stdout
    buckets = om_freon("ombg", "-n", "5", "--om", server.address, "-p", "bkt")
    assert buckets.returncode == 0
    assert "Successful executions: 5" in buckets.stdout
    # Every operation fails (bucket names may not hold '_'): exit 1.
    failing = om_freon("ombg", "-n", "5", "--om", server.address, "-p", "bad_")
    assert failing.returncode == 1
    assert "Failures: 5" in failing.stdout
    assert "CreateBucket INVALID_BUCKET_NAME: 5" in failing.stdout


def test_usage_errors_exit_2() -> None:
    assert om_freon("ockrw", "--percentage-read", "80", "--percentage-list", "30",
                    "--om", "127.0.0.1:1").returncode == 2
    assert om_freon("omkg", "-t", "0", "--om", "127.0.0.1:1").returncode == 2
    zero_rate = om_freon("omkg", "--rate", "0", "--om", "127.0.0.1:1")
    assert zero_rate.returncode == 2
    assert "--rate must be > 0" in zero_rate.stderr


async def test_engine_in_process_stops_at_count_and_at_duration(tmp_path: Path) -> None:
    async with in_process_node(tmp_path / "data", tmp_path / "server.jsonl", "ceiling") as node:
        def connect() -> RequestCaller:
            return InProcessCaller(node)

        counted = await freon.run(freon.FreonConfig(count=50, threads=8, prefix="c",
                                                    trace_path=tmp_path / "c.jsonl",
                                                    flow="ceiling"), connect)
        assert (counted.operations, counted.successes, counted.ok_writes) == (50, 50, 100)
        assert counted.latency.count == 50
        assert counted.requests == {("CreateKey", "OK"): 50, ("CommitKey", "OK"): 50}
        assert counted.start_ns < counted.end_ns
        timed = await freon.run(freon.FreonConfig(count=freon.UNBOUNDED_COUNT, threads=4,
                                                  duration_s=0.3, prefix="d"), connect)
        assert timed.operations > 0
        assert 0.3 <= timed.duration_s < 5.0
        assert timed.failures == 0
    records = list(read_records(tmp_path / "c.jsonl"))
    assert len(records) == 100
    servers = list(read_records(tmp_path / "server.jsonl"))
    assert {r["kind"] for r in servers} == {"server_request", "server_batch"}
    assert {r["flow"] for r in servers} == {"ceiling"}


async def test_rate_paces_operations_and_reports_each_op(tmp_path: Path) -> None:
    async with in_process_node(tmp_path / "data", None, "ceiling") as node:
        paced = await freon.run(freon.FreonConfig(count=60, threads=8, prefix="r", rate=300.0),
                                lambda: InProcessCaller(node))
    assert (paced.operations, paced.failures) == (60, 0)
    # The last operation is due at 59/300 s; loop timers may fire up to 1 ms early.
    assert paced.duration_s >= 59 / 300 - 0.002, "operations were not paced"
    assert paced.duration_s < 59 / 300 + 2.0
    summary = paced.as_dict()
    assert summary["target_rate"] == 300.0
    assert set(summary["op_latency_ms"]) == {"CreateKey", "CommitKey"}
    assert summary["op_latency_ms"]["CommitKey"]["count"] == 60
    report = freon.format_report(paced)
    assert "target rate = 300.00 calls/second" in report
    assert "CommitKey latency: median" in report


async def test_a_paced_run_ends_at_its_duration(tmp_path: Path) -> None:
    async with in_process_node(tmp_path / "data", None, "ceiling") as node:
        paced = await freon.run(freon.FreonConfig(count=freon.UNBOUNDED_COUNT, threads=50,
                                                  duration_s=0.3, prefix="d", rate=100.0),
                                lambda: InProcessCaller(node))
    assert 28 <= paced.operations <= 31, "only the operations due within 0.3 s run"
    assert paced.duration_s < 0.45, "workers do not sleep past the end for later slots"


def test_ockrw_without_a_bound_needs_a_range_and_no_server_exits_2() -> None:
    assert om_freon("ockrw", "--duration", "1", "--om", "127.0.0.1:1").returncode == 2
    unreachable = om_freon("omkg", "-n", "1", "--om", f"127.0.0.1:{free_port()}",
                           "--timeout", "0.5")
    assert unreachable.returncode == 2
    assert "CLIENT_ERROR" in unreachable.stderr


@pytest.mark.integration
def test_omfc_and_omdr_create_files_and_rename_directories(server: ServerProcess) -> None:
    files = om_freon("omfc", "-n", "60", "-t", "6", "--dirs", "6", "--om", server.address,
                     "-p", "f")
    assert files.returncode == 0, files.stderr
    assert "file-create" in files.stdout
    assert "Successful executions: 60" in files.stdout
    assert "CreateFile OK: 60" in files.stdout
    with OMClient([server.address]) as client:
        listed = client.call(build.list_status("vol1", "fsobucket", "f/d1"))
    assert len(listed.list_status.statuses) == 10, "file i in directory i mod 6"
    mix = om_freon("omdr", "-n", "80", "-t", "8", "--dirs", "4", "--percentage-rename", "50",
                   "--om", server.address, "-p", "m")
    assert mix.returncode == 0, mix.stderr
    assert "Failures: 0" in mix.stdout
    assert "RenameKey OK" in mix.stdout
    assert "CreateDirectory OK" in mix.stdout
    bad = om_freon("omdr", "--percentage-rename", "101", "--om", "127.0.0.1:1")
    assert bad.returncode == 2
    assert "--percentage-rename" in bad.stderr
