"""``python -m bench.figures``: the shared runner's pure parts and the command line.

No cluster is started: the figures' runs are replaced by fakes where a test
reaches them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import uvloop

from bench.figures import (
    cli,
    core_cpu,
    integrity,
    repair_scale,
    runner,
    scale,
    snapshot_latency,
    wipe_catch_up,
)
from bench.figures.figure import Figure
from om.protocol import om_pb2
from om.statemachine.store import Store

PY_OM = [sys.executable, "-m", "om"]


def test_om_command_runs_this_interpreters_om() -> None:
    assert runner.om_command("admin", "roles") == [*PY_OM, "admin", "roles"]


def test_freon_omkg_command_by_directory_with_a_trace() -> None:
    command = runner.freon_omkg_command(32, 600, cluster_dir=Path("/c"), volume="vol",
                                        bucket="bkt", prefix="load", trace=Path("/c/load.jsonl"))
    assert command == [*PY_OM, "freon", "omkg", "-t", "32", "--duration", "600", "--dir", "/c",
                       "-v", "vol", "-b", "bkt", "-p", "load", "--trace", "/c/load.jsonl"]


def test_freon_omkg_command_by_addresses_with_json() -> None:
    command = runner.freon_omkg_command(64, 15, addresses=["127.0.0.1:1", "127.0.0.1:2"],
                                        json_path=Path("/d/f.json"))
    assert command == [*PY_OM, "freon", "omkg", "-t", "64", "--duration", "15",
                       "--om", "127.0.0.1:1,127.0.0.1:2", "--json", "/d/f.json"]


@pytest.mark.parametrize("target", [
    {},                                                     # neither
    {"addresses": ["127.0.0.1:1"], "cluster_dir": Path("/c")},   # both
])
def test_freon_omkg_command_names_the_cluster_exactly_one_way(target: dict[str, object]) -> None:
    with pytest.raises(AssertionError):
        runner.freon_omkg_command(1, 1, **target)  # type: ignore[arg-type]


def test_generate_command_copies_to_the_other_nodes() -> None:
    command = runner.generate_command([Path("/d/om1"), Path("/d/om2"), Path("/d/om3")],
                                      100_000, "vol", "bkt")
    assert command == [*PY_OM, "freon", "generate", "--data-dir", "/d/om1",
                       "--copy-to", "/d/om2", "/d/om3",
                       "--keys", "100000", "-v", "vol", "-b", "bkt"]
    assert "--copy-to" not in runner.generate_command([Path("/d/om1")], 5, "v", "b")


def test_ok_completion_times_counts_successful_client_requests_only() -> None:
    lines = [json.dumps(r) for r in (
        {"kind": "client_request", "status": "OK", "t_ns": 1_000_000_000,
         "latency_ns": 500_000_000},
        {"kind": "client_request", "status": "TIMEOUT", "t_ns": 2_000_000_000, "latency_ns": 1},
        {"kind": "server_request", "status": "OK", "t_ns": 3_000_000_000, "latency_ns": 1},
        {"kind": "client_request", "status": "OK", "t_ns": 4_000_000_000, "latency_ns": 0},
    )]
    assert runner.ok_completion_times(lines) == [1.5, 4.0]


def test_rate_between_counts_a_half_open_window() -> None:
    ends = [10.0, 10.5, 11.0, 11.9, 12.0]
    assert runner.rate_between(ends, 10.0, 12.0) == 2.0      # 12.0 falls outside
    assert runner.rate_between(ends, 11.0, 11.0) == 0.0      # empty window, no division by 0
    assert runner.rate_between(ends, 10.0, 13.0) == pytest.approx(1.7)


def test_percentile_ms_takes_the_sample_at_its_rank() -> None:
    seconds = [i / 1000 for i in range(1, 301)]               # 1 .. 300 ms, shuffled below
    shuffled = seconds[::2] + seconds[1::2]
    assert runner.percentile_ms(shuffled, 0.5) == 150.0
    assert runner.percentile_ms(shuffled, 0.99) == 297.0
    assert runner.percentile_ms([0.00123], 0.99) == 1.2     # one sample is every percentile
    with pytest.raises(AssertionError):
        runner.percentile_ms([], 0.5)


def test_replicas_equal_compares_every_nodes_digests() -> None:
    same = {"keyTable": "a", "bucketTable": "b"}
    assert runner.replicas_equal({"om1": same, "om2": dict(reversed(same.items()))})
    assert not runner.replicas_equal({"om1": same, "om2": {**same, "keyTable": "x"}})


def test_write_rate_reads_freons_json(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text(json.dumps({"write_requests_per_s": 2357.4}))
    assert runner.write_rate(tmp_path / "f.json") == 2357.4


def test_caught_up_needs_a_following_node_within_the_slack() -> None:
    leader = om_pb2.NodeInfo(role="LEADER", applied_index=1000)

    def node(role: str, applied: int) -> om_pb2.NodeInfo:
        return om_pb2.NodeInfo(role=role, applied_index=applied)

    assert wipe_catch_up.caught_up(node("FOLLOWER", 800), leader)
    assert not wipe_catch_up.caught_up(node("FOLLOWER", 799), leader)
    assert not wipe_catch_up.caught_up(node("UNREACHABLE", 1000), leader)
    assert not wipe_catch_up.caught_up(node("FOLLOWER", 0), om_pb2.NodeInfo(applied_index=0))


def _database(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "CURRENT").write_text("MANIFEST-000001\n")
    return path


def test_every_figure_is_a_command() -> None:
    help_text = cli.build_parser().format_help()
    assert [f.name for f in cli.FIGURES] == ["integrity", "scale", "wipe-catch-up",
                                           "core-cpu", "snapshot-latency", "repair", "docs"]
    for figure in cli.FIGURES:
        assert figure.name in help_text


def test_integrity_defaults() -> None:
    args = cli.build_parser().parse_args(["integrity"])
    assert (args.keys, args.threads, args.dir, args.window) == (100_000, 32, None, 150)
    assert (args.interval, args.scrub_rows_per_s) == (60, 20_000)
    assert (args.seed_db, args.no_audit) == (None, False)
    assert args.run is integrity.run
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["integrity", "--scrub-rows-per-s", "-1"])


def test_scale_takes_two_databases_their_sizes_and_rounds(tmp_path: Path) -> None:
    small, large = _database(tmp_path / "s" / "db"), _database(tmp_path / "l" / "db")
    args = cli.build_parser().parse_args(["scale", str(small), "100000", str(large),
                                          "10000000", "2"])
    assert (args.small_db, args.small_keys, args.large_db, args.large_keys, args.rounds) == (
        small, 100_000, large, 10_000_000, 2)
    assert args.run is scale.run


def test_wipe_catch_up_takes_a_seed(tmp_path: Path) -> None:
    seed = _database(tmp_path / "db")
    args = cli.build_parser().parse_args(["wipe-catch-up", str(seed)])
    assert args.seed_db == seed
    assert args.run is wipe_catch_up.run


@pytest.mark.parametrize("argv", [
    [],                                              # no figure
    ["nonesuch"],
    ["integrity", "--keys", "0"],
    ["integrity", "--threads", "-1"],
    ["integrity", "--verify-rows-per-s", "-5"],
    ["integrity", "--keys", "many"],
    ["wipe-catch-up"],                               # no seed
    ["scale", "DB", "100", "DB", "1000"],            # no rounds
    ["core-cpu", "--writes", "0"],
    ["core-cpu", "--group", "-4"],
    ["snapshot-latency", "--rate", "0"],
    ["snapshot-latency", "--rounds", "-1"],
])
def test_usage_errors_exit_2_and_run_nothing(argv: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv, figures=[dataclasses.replace(f, run=_must_not_run) for f in cli.FIGURES])
    assert exited.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_a_seed_that_is_no_database_is_a_usage_error(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["wipe-catch-up", str(tmp_path)])
    assert exited.value.code == 2
    assert "not a RocksDB database" in capsys.readouterr().err


def _must_not_run(args: argparse.Namespace) -> int:
    raise AssertionError(f"a usage error must run nothing: {args}")


def _fake(name: str, calls: list[argparse.Namespace], status: int = 0) -> Figure:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--keys", type=int, default=7)

    def run(args: argparse.Namespace) -> int:
        calls.append(args)
        return status

    return Figure(name, "a fake", "a fake figure", add_arguments, run)


def test_main_runs_the_figure_named_and_returns_its_status() -> None:
    calls: list[argparse.Namespace] = []
    figures = [_fake("one", calls, status=3), _fake("two", calls)]
    assert cli.main(["one", "--keys", "5"], figures=figures) == 3
    assert [(a.figure, a.keys) for a in calls] == [("one", 5)]


def test_core_cpu_measures_the_core_in_process() -> None:
    found = uvloop.run(core_cpu.measure(writes=400, group=32))
    assert found["writes"] == 400
    assert found["writes_per_s"] > 0
    assert found["cpu_us_per_write"] > 0


def test_snapshot_latency_defaults_and_its_summary() -> None:
    args = cli.build_parser().parse_args(["snapshot-latency"])
    assert (args.rounds, args.rate) == (3, 500)
    assert args.run is snapshot_latency.run
    ops = {op: {"p50": 9.0, "p99": p99, "max": 30.0}
           for op, p99 in (("CreateKey", 13.0), ("CommitKey", 12.0))}
    freon = {"operations_per_s": 499.6, "failures": 0, "op_latency_ms": ops}
    plain = snapshot_latency.summarize("plain", freon, [])
    assert plain == {"mode": "plain", "operations_per_s": 500, "failures": 0,
                     "CreateKey": {"p50": 9.0, "p99": 13.0, "max": 30.0},
                     "CommitKey": {"p50": 9.0, "p99": 12.0, "max": 30.0}}
    slowed = {op: {**q, "p99": q["p99"] * 2} for op, q in ops.items()}
    snap = snapshot_latency.summarize("snapshots", {**freon, "op_latency_ms": slowed},
                                      [60.0, 58.0, 80.0])
    assert snap["create_snapshot_ms"] == {"count": 3, "median": 60.0, "max": 80.0}
    compared = snapshot_latency.compare([plain, snap])
    assert compared["CreateKey"] == {"p99_median_ms": {"plain": 13.0, "snapshots": 26.0},
                                     "snapshots_over_plain": 2.0}


def test_repair_changes_rows_spread_over_every_bucket(tmp_path: Path) -> None:
    runner.run_load([*runner.generate_command([tmp_path / "om1"], 3000, "vol", "bkt"),
                     "--buckets", "3"])
    db = tmp_path / "om1" / "db"
    before = _rows(db)
    assert repair_scale.change_rows(db, 60) == 60
    after = _rows(db)
    changed = [key for key in before if before[key] != after[key]]
    assert len(changed) == 60
    assert after.keys() == before.keys()
    assert {key.split(b"/")[2] for key in changed} == {b"bkt-0", b"bkt-1", b"bkt-2"}
    for key in changed:
        was, now = (om_pb2.KeyInfo.FromString(rows[key]) for rows in (before, after))
        assert now.data_size == was.data_size + 1


def test_repair_defaults(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(["repair", str(_database(tmp_path / "db"))])
    assert (args.rows, args.run) == (1000, repair_scale.run)


def _rows(db: Path) -> dict[bytes, bytes]:
    store = Store(db, read_only=True)
    try:
        return dict(store.iterate(om_pb2.KEY))
    finally:
        store.close()
