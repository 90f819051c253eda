"""The scaling profile's parts (bench/shard_scaling.py): the load spread over buckets,
runs in rounds, each S against S = 1 by the medians; and a tiny scaling run at S = 2 on
real three-node clusters, end to end."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from bench import driver, freon, roles, shard_scaling
from bench.ceiling import InProcessCaller, in_process_node
from bench.generators import bucket_names
from bench.progress import StepLog
from bench.summary import render_table
from om.cli import bench as bench_cli
from om.cli import parser
from om.client import requests as build
from om.cluster import preload
from om.protocol import om_pb2


async def test_omkg_spreads_its_keys_over_every_bucket(tmp_path: Path) -> None:
    """Red: keys written into one bucket leave the other three empty."""
    buckets = bucket_names("spread", 4)
    assert buckets == ("spread-0", "spread-1", "spread-2", "spread-3")
    async with in_process_node(tmp_path / "data", None, "ceiling") as node:
        caller = InProcessCaller(node)
        done = await freon.run(freon.FreonConfig(count=40, threads=8, prefix="k",
                                                 bucket="spread", buckets=4),
                               lambda: InProcessCaller(node))
        assert (done.operations, done.failures) == (40, 0)
        listed = {}
        for bucket in buckets:
            answer, _ = await caller.call_raw(build.list_keys("vol1", bucket, "k/",
                                                              max_keys=100))
            assert answer.status == om_pb2.OK
            listed[bucket] = sorted(int(k.key_name.removeprefix("k/"))
                                    for k in answer.list_keys.key_info)
    assert {bucket: len(keys) for bucket, keys in listed.items()} == dict.fromkeys(buckets, 10)
    assert all(index % 4 == number for number, bucket in enumerate(buckets)
               for index in listed[bucket])


def test_the_load_writes_into_the_buckets_the_preload_seeds() -> None:
    namespace = preload.Namespace(bucket="bucket1", buckets=16, keys=32)
    assert bucket_names("bucket1", 16) == tuple(b for _, b in namespace.bucket_names())
    assert bucket_names("bucket1", 1) == ("bucket1",)


def test_another_generator_than_omkg_refuses_several_buckets() -> None:
    with pytest.raises(ValueError, match="ockrw writes into one bucket"):
        freon.make_generator(freon.FreonConfig(generator="ockrw", buckets=2), "p")


def test_the_scaling_profile_sweeps_shards_over_many_buckets_in_rounds() -> None:
    profile = driver.PROFILES["scaling"]
    flows = driver.select_flows(list(profile.flows))
    assert {(f.name, f.shards, f.nodes or profile.nodes) for f in flows} == {
        ("leader-1node-s1", 1, 1), ("leader-1node-s2", 2, 1), ("leader-s1", 1, 3),
        ("leader-s2", 2, 3), ("leader-s4", 4, 3)}
    owned = {s: shard_scaling.buckets_per_shard("vol1", bucket_names("bucket1", profile.buckets),
                                                 s) for s in (2, 4)}
    assert owned == {2: [32, 32], 4: [16, 16, 16, 16]}, "several buckets a shard, evenly"
    assert not any(name.startswith("leader-w") for name in driver.FLOW_NAMES)
    runs = driver.repeated(flows[-2:], 3)
    assert [f.name for f in runs] == ["leader-s2#1", "leader-s4#1", "leader-s2#2",
                                      "leader-s4#2", "leader-s2#3", "leader-s4#3"]
    assert driver.repeated(flows, 1) == flows
    config = bench_cli.config_from(parser().parse_args(
        ["bench", "--profile", "scaling", "--flows", "leader-s1,leader-s2", "--out", "x"]))
    assert [f.name for f in config.flows] == [
        "leader-s1#1", "leader-s2#1", "leader-s1#2", "leader-s2#2", "leader-s1#3",
        "leader-s2#3"]
    with pytest.raises(AssertionError):
        driver.FlowSpec("ceiling-s2", in_process=True, shards=2)


def _run(rate: float | None, redirects: int = 0, clients: int = 8) -> dict[str, Any]:
    if rate is None:
        return {"error": "ClusterError: no leader"}
    return {"write_requests_per_s": rate, "bound": {"label": "CPU-bound"},
            "redirects": {"clients": clients, "redirects": redirects}}


def test_a_few_buckets_spread_unevenly_and_the_busiest_shares_says_how_much() -> None:
    owned = shard_scaling.buckets_per_shard("vol1", bucket_names("bucket1", 16), 2)
    assert owned == [10, 6]
    assert shard_scaling.busiest_share(owned) == pytest.approx(1.25)
    assert shard_scaling.busiest_share([16, 16, 16, 16]) == 1.0


def test_each_s_is_reported_against_s1_by_the_medians_of_its_runs() -> None:
    """Red: a mean (the S = 2 outlier) or the last run instead of the median."""
    flows = {"leader-s1#1": _run(1000.0),
             "leader-s2#1": {**_run(1500.0, 8), "buckets_per_shard": [10, 6]},
             "leader-s4#1": _run(None),
             "leader-s1#2": _run(1200.0), "leader-s2#2": _run(9000.0, 8),
             "leader-s4#2": _run(800.0, 8),
             "leader-s1#3": _run(1100.0), "leader-s2#3": _run(1650.0, 8),
             "leader-s4#3": _run(1000.0, 9),
             "leader-1node-s1": _run(2000.0), "leader-1node-s2": _run(2500.0, 8),
             "leader": _run(3000.0)}
    found = shard_scaling.ratios(flows)
    assert found == {"leader_s2_over_leader_s1": pytest.approx(1650.0 / 1100.0),
                     "leader_s4_over_leader_s1": pytest.approx(900.0 / 1100.0),
                     "leader_1node_s2_over_leader_1node_s1": pytest.approx(1.25)}
    assert shard_scaling.parse("leader-s2#3") == shard_scaling.ScalingFlow("leader", 2, 3)
    assert shard_scaling.parse("leader@64") is None
    assert shard_scaling.parse("leader-s2#x") is None
    lines = shard_scaling.render({"flows": flows})
    assert lines[0].startswith("shards (median of runs)")
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["leader-s2"].split()[1:4] == ["1,650", "1.50x", "1.00"]
    assert "1.25x" in rows["leader-s2"].split()
    assert "1,500 CPU-bound, 9,000 CPU-bound, 1,650 CPU-bound" in rows["leader-s2"]
    assert rows["leader-s4"].split()[1:4] == ["900", "0.82x", "1.06"]
    assert "ERROR, 800 CPU-bound" in rows["leader-s4"]
    assert rows["leader-s1"].split()[1:4] == ["1,100", "1.00x", "0.00"]
    assert shard_scaling.ratios({"leader-s2": _run(1.0)}) == {"leader_s2_over_leader_s1": None}


def test_shard_processes_are_a_role_and_the_projection_spreads_writes_over_them() -> None:
    # 10 s, 10,000 writes: 1 % of a core is 10 µs a write
    cpu = {"om1": 40.0, "om1-s1": 30.0, "om1-raft": 10.0, "om2": 20.0, "om2-s1": 10.0,
           "om2-raft": 5.0, "bench": 20.0}
    found = roles.per_role(cpu, "om1", 10.0, 10_000)
    assert found[roles.LEADER_SERVER] == pytest.approx(400.0)
    assert found[roles.LEADER_SHARDS] == pytest.approx(300.0)
    assert found[roles.FOLLOWER_SERVER] == pytest.approx(300.0)
    assert found[roles.LEADER_SIDE] == pytest.approx(800.0)
    two = roles.project(found, 64, shards=2)
    assert two.writes_per_s == pytest.approx(2e6 / 700.0)
    assert two.bound_by == "the 2 shard processes (one thread each)"
    assert roles.project(found, 1, shards=2).bound_by == "the host's 1 cores"
    assert roles.project(found, 64, shards=8).bound_by == "the Raft process (one thread)"
    assert roles.project(found, 64).writes_per_s == pytest.approx(1e6 / 700.0)


@pytest.mark.integration
def test_a_tiny_scaling_run_at_s2_runs_end_to_end_and_names_the_ratio(tmp_path: Path) -> None:
    """Three nodes at S = 1 and at S = 2, both seeded (per shard at S = 2), the load over 8
    buckets (4 a shard): the summary holds the S ratio and each client was redirected once at S = 2
    (red: clients that never learn S are redirected on every request to shard 1), none
    at S = 1; the shard processes are metered as roles of their own."""
    profile = dataclasses.replace(driver.PROFILES["smoke"], warmup_s=0.3, measure_s=1.5,
                                  threads=8, mixed_s=0.0, half_load_s=0.0, connections=2,
                                  buckets=8)
    flows = driver.select_flows(["leader-s1", "leader-s2"])
    log = io.StringIO()
    summary = driver.run_bench(driver.BenchConfig(out=tmp_path, profile=profile, keys=40,
                                                  flows=flows), StepLog(log))
    assert summary["preload"]["shards"] == [1, 2]
    assert (tmp_path / "leader-s2" / "cluster" / "data" / "om3" / "shard-1" / "db").is_dir()
    for name, shards in (("leader-s1", 1), ("leader-s2", 2)):
        flow = summary["flows"][name]
        assert "error" not in flow, (flow, log.getvalue()[-3000:])
        assert (flow["shards"], flow["failures"], flow["preloaded_keys"]) == (shards, 0, 40)
        assert flow["write_requests_per_s"] > 0
        redirects = flow["redirects"]
        assert redirects["clients"] == 2 * 2        # warm-up and measure, 2 connections each
        assert redirects["redirects"] == (redirects["clients"] if shards > 1 else 0), redirects
        assert flow["bound"]["label"]
    assert summary["flows"]["leader-s2"]["buckets_per_shard"] == [4, 4]
    leader = summary["flows"]["leader-s2"]["leader"]
    assert f"{leader}-s1" in summary["flows"]["leader-s2"]["cpu_percent"]
    assert summary["flows"]["leader-s2"]["cpu_us_per_write"][roles.LEADER_SHARDS] > 0
    assert summary["ratios"]["leader_s2_over_leader_s1"] > 0
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(
        json.dumps(summary))
    table = render_table(summary)
    assert "leader_s2_over_leader_s1" in table
    assert "shards (median of runs)" in table
    assert "one leader at S = 2 on more cores" in table
    target = summary["flows"]["leader-s2"]["projection_target"]
    assert (target["shards"], target["cores"]) == (roles.TARGET_SHARDS, roles.TARGET_CORES)
    assert target["writes_per_s"] > 0
    assert "and at S = 8 on 16 cores" in table
    assert "projection_target" not in summary["flows"]["leader-s1"]
