"""Chaos runs against real clusters: clean under faults, and red when they must be."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from om.chaos import checkers, fs_checkers, mpu_checkers, snap_checkers
from om.chaos.fs_checkers import FsEntry
from om.chaos.history import F, History, Op, Outcome
from om.chaos.nemesis import DISK_STALLS, MEMBERSHIP, RESTARTS
from om.chaos.runner import ChaosConfig, run
from om.chaos.workload import WorkloadConfig
from om.cli.chaos import PROFILES, ops_budget

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The old flow's retry cache was in memory only (as Ratis's is), so restart_all made
# duplicates; its apply now also writes the reply rows (docs/FLOW_SWITCH.md step 1),
# and restart_all is among its faults (one every 3 s, so 25 s see all five).
OLD_FLOW_FAULTS = ("kill_leader", "pause_leader", "kill_follower", "pause_followers",
                   "restart_all")


@pytest.mark.parametrize("execution", ["leader", "replicated"])
def test_quick_profile_finds_no_violation(tmp_path: Path, execution: str) -> None:
    faults = OLD_FLOW_FAULTS if execution == "replicated" else ChaosConfig.faults
    duration = PROFILES["quick"] if execution == "leader" else 25.0
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=duration, execution=execution,
                             faults=faults, fault_interval_s=4.0 if execution == "leader" else 3.0,
                             workload=WorkloadConfig(ops_per_worker_max=ops_budget(duration))))
    assert result["violations"] == []
    assert result["faults_injected"] >= len(faults)
    assert set(result["faults"]) == set(faults)
    assert result["retries"] > 0, "no retry was exercised: the run proves nothing"
    assert result["ops"]["ok"] > 1000
    assert result["verify"]["result"] == "clean"
    assert set(result["resources"]["nodes"]) == {"om1", "om2", "om3"}
    assert (tmp_path / "chaos" / "result.json").exists()
    assert History.from_jsonl((tmp_path / "chaos" / "history.jsonl").read_text())


def test_red_checkers_fail_when_they_must(tmp_path: Path) -> None:
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=8.0, faults=(),
                             workload=WorkloadConfig(duplicate_send=0.5),
                             unsafe_disable_retry_cache=True))
    kinds = {(v["checker"], v["kind"]) for v in result["violations"]}
    assert (checkers.EXACTLY_ONCE, "duplicate") in kinds, "a disabled retry cache went unseen"

    history = History.from_jsonl((tmp_path / "chaos" / "history.jsonl").read_text())
    assert checkers.check_linearizability(history) == []
    read = next(op for op in history if op.f is F.GET and op.outcome is Outcome.OK)
    forged = dataclasses.replace(read, value=10**12)  # a value nobody ever wrote
    bad = History(tuple(forged if op is read else op for op in history))
    assert any(v.kind == "nonlinearizable" for v in checkers.check_linearizability(bad))

    put = next(op for op in history if op.f is F.PUT and op.outcome is Outcome.OK)
    ghost = Op(process=999, op_id=10**9, f=F.PUT, key=put.key, value=10**12 + 1,
               invoke_ns=put.invoke_ns, complete_ns=put.invoke_ns + 1, outcome=Outcome.OK)
    lost = History((*history.ops, ghost))
    final = {op.key: None for op in lost if op.f is F.PUT}
    assert checkers.check_no_lost_writes(lost, final), "an acknowledged write went missing"


def test_membership_nemesis_finds_no_violation(tmp_path: Path) -> None:
    """Transfers, maintenance and a node added then decommissioned, during the workload:
    nothing acknowledged lost, nothing applied twice, every voter's digest equal."""
    duration = 35.0
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=duration, faults=MEMBERSHIP,
                             fault_interval_s=2.0,
                             workload=WorkloadConfig(ops_per_worker_max=ops_budget(duration))))
    assert result["violations"] == []
    done = {e["action"] for e in _events(tmp_path) if e.get("outcome") == "done"}
    assert {"member_transfer", "member_maintenance", "member_maintenance_end", "member_add",
            "member_decommission"} <= done
    assert result["ops"]["ok"] > 500


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    faults = tmp_path / "chaos" / "leader" / "traces" / "faults.jsonl"
    return [json.loads(line) for line in faults.read_text().splitlines()]


def test_a_soak_cycle_with_disk_stalls_stays_clean_and_bounded(tmp_path: Path) -> None:
    """The soak's shape, shortened: calm phases (no restarts) and storms, disk stalls
    among the faults, each node's memory and descriptors sampled, om admin verify at
    the end."""
    duration = 40.0
    faults = (*DISK_STALLS, "kill_follower", "pause_leader")
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=duration, faults=faults,
                             fault_interval_s=2.0, fault_hold_s=1.5, calm_s=16.0, storm_s=8.0,
                             sample_interval_s=1.0,
                             workload=WorkloadConfig(ops_per_worker_max=ops_budget(duration))))
    assert result["violations"] == []
    assert result["verify"]["result"] == "clean"
    events = _events(tmp_path)
    assert {e["action"] for e in events} >= {*DISK_STALLS, "kill_follower"}
    first = events[0]["t_ns"] - 2_000_000_000      # the first fault comes one interval in
    for event in events:
        if event["action"] in RESTARTS:
            into_cycle = ((event["t_ns"] - first) / 1e9) % 24.0
            assert into_cycle >= 16.0 - 1.0, f"a restart in a calm phase: {event}"
    nodes = result["resources"]["nodes"]
    assert set(nodes) == {"om1", "om2", "om3"}
    assert all(n["fds_max"] > 0 and n["rss_max_mib"] > 0 for n in nodes.values())
    assert sum(n["lifetimes"] for n in nodes.values()) > 3, "the kills started new lifetimes"
    assert (tmp_path / "chaos" / "resources.jsonl").read_text().count("\n") > 30


def test_fso_workload_under_kills_and_partitions_finds_no_violation(tmp_path: Path) -> None:
    """mkdir, create, directory rename and rm -r on an FSO bucket under a leader kill, a
    minority leader and a restart of every node: the tree, its quota and every node's
    audit agree with the history; a tree that lost a file or gained one is red."""
    duration = 20.0
    faults = ("kill_leader", "partition_leader", "restart_all")
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=duration, faults=faults,
                             fault_interval_s=3.0,
                             workload=WorkloadConfig(register_workers=0, add_workers=0,
                                                     fs_workers=3,
                                                     ops_per_worker_max=ops_budget(duration))))
    assert result["violations"] == []
    assert result["faults_injected"] >= len(faults)
    assert result["workloads"] == ["fso"]
    by_function = result["ops_by_function"]
    assert all(by_function[f]["ok"] > 0 for f in ("mkdir", "create", "rename", "rmr"))
    fso = result["fso"]
    assert fso["quota_check"] == "done"
    assert len(fso["audited_nodes"]) == 3
    assert fso["files"] > 0

    history = History.from_jsonl((tmp_path / "chaos" / "history.jsonl").read_text())
    created = [op for op in history if op.f is F.CREATE and op.outcome is Outcome.OK]
    entries = [FsEntry(op.key, False) for op in created]
    ghost = Op(process=999, op_id=10**9, f=F.CREATE, key="f999999999", value=1,
               invoke_ns=0, complete_ns=1, outcome=Outcome.FAIL)
    red = fs_checkers.check_fs_tree(History((*history.ops, ghost)),
                                    [*entries, FsEntry("f999999999", False)])
    assert ("unexplained_entry", "f999999999") in {(v.kind, v.key) for v in red}


def test_multipart_and_snapshot_workloads_hold_under_restarts(tmp_path: Path) -> None:
    """The mpu and snap workloads against a real cluster under kills and pauses: no
    violation, and each did the work its checker judges (completes, aborts, snapshot
    reads); then the run's own observation, with one completed key removed and one
    deleted snapshot listed, must be reported (red)."""
    duration = 25.0
    faults = ("kill_leader", "pause_leader", "kill_follower")
    result = run(ChaosConfig(out=tmp_path / "chaos", duration_s=duration, faults=faults,
                             fault_interval_s=3.0,
                             workload=WorkloadConfig(register_workers=2, add_workers=0,
                                                     mpu_workers=2, snap_workers=1,
                                                     ops_per_worker_max=ops_budget(duration))))
    assert result["violations"] == []
    by_f = result["ops_by_function"]
    assert by_f["mpu_complete"]["ok"] > 10
    assert by_f["mpu_abort"]["ok"] > 0
    assert by_f["snap_create"]["ok"] > 0
    assert by_f["snap_read"]["ok"] > 5
    assert result["mpu"]["keys"] >= by_f["mpu_complete"]["ok"]
    assert result["snapshots_listed"] > 0

    history = History.from_jsonl((tmp_path / "chaos" / "history.jsonl").read_text())
    completed = next(op for op in history if op.f is F.MPU_COMPLETE and op.outcome is Outcome.OK)
    deleted = next(op for op in history if op.f is F.SNAP_DELETE and op.outcome is Outcome.OK)
    lost = mpu_checkers.MpuObservation({}, frozenset())
    assert any(v.kind == "lost_complete" and v.key == completed.key
               for v in mpu_checkers.check_mpu(history, lost))
    assert any(v.kind == "deleted_snapshot_listed"
               for v in snap_checkers.check_snapshots(history, [deleted.key]))
