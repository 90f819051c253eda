"""``python -m bench.figures docs``: README's figures block from a main job's summary.

A small summary of the shape ``bench/summary.py`` writes (two OM flows and etcd) is
cut to facts and rendered; the command rewrites only the block between the markers
and ``--check`` tells a block that matches its facts from one edited by hand. The
README's committed block must be exactly what docs/figures/main-job.json renders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.figures import cli, docs

ROOT = Path(__file__).resolve().parent.parent


def _flow(rate: float, p50: float, p99: float, batch: float, busy: float,
          cpu: dict[str, float] | None, commit_p99: float | None) -> dict[str, Any]:
    return {
        "durable": True,
        "write_requests_per_s": rate,
        "latency_ms": {"p50": p50, "p99": p99, "max": p99 * 2},
        "requests_per_batch": batch,
        "half_load": ({"op_latency_ms": {"CommitKey": {"p99": commit_p99}}}
                      if commit_p99 is not None else None),
        "bound": {"label": "CPU-bound", "reason": "the machine's 2 cores were busy",
                  "machine_busy_share": busy},
        "machine_load": {"others_share": 0.02},
        "cpu_us_per_write": cpu,
        "projection": [{"cores": 2, "writes_per_s": 4_152.7}] if cpu else [],
    }


def small_summary() -> dict[str, Any]:
    leader = _flow(2_797.2, 22.39, 36.0, 31.27, 0.83,
                   {"leader server": 240.8, "leader Raft": 51.1, "follower server (each)": 74.9,
                    "follower Raft (each)": 35.6, "load generator": 72.7, "all servers": 513.0},
                   69.21)
    leader["bound"] = {"label": "CPU-bound", "reason": "one thread: om2's busiest thread ...",
                       "machine_busy_share": 0.83,
                       "busiest_thread": {"process": "om2", "demand_percent": 93.7}}
    leader["failover"] = {"trials": 10, "median_s": 0.09106, "max_s": 0.876, "unavailable_s": []}
    etcd = _flow(3_480.4, 15.0, 78.2, 1.0, 0.81,
                 {"etcd leader": 124.7, "etcd follower (each)": 108.0, "load generator": 88.7,
                  "all servers": 340.7}, None)
    etcd["bound"] = {"label": "cycle-bound", "reason": "...", "machine_busy_share": 0.81,
                     "stalls": {"gaps": 5, "longest_gap_ms": 380.6}}
    return {
        "profile": {"name": "quick", "threads": 64, "measure_s": 15.0, "half_load_s": 8.0,
                    "nodes": 3},
        "secure": True,
        "flows": {"leader": leader,
                  "replicated": _flow(1_551.7, 39.3, 82.6, 1.0, 0.92, None, 61.28),
                  "etcd": etcd},
        "ratios": {"leader_over_etcd": 0.8037, "leader_over_replicated": 1.8027},
    }


def test_a_summary_renders_the_tables_ratios_and_failover() -> None:
    block = docs.render(docs.facts(small_summary(), "32315a90c647", "2026-11-27"))
    lines = block.splitlines()
    assert "| leader | yes | 2,797 | 22.4 | 36.0 | 31.3 | 69.2 ms | CPU: om2's busiest thread, " \
           "94 % of the window |" in lines
    assert "| replicated (old flow) | yes | 1,552 | 39.3 | 82.6 | 1 | 61.3 ms | CPU: the machine " \
           "92 % busy |" in lines
    assert "| etcd, 3 members | yes | 3,480 | 15.0 | 78.2 | - | - | cycle-bound (longest stall " \
           "381 ms) |" in lines
    assert "| leader | 241 | 51 | 75 | 36 | 73 | 513 |" in lines
    assert "| etcd | 125 (leader) |  | 108 |  | 89 | 341 |" in lines
    text = " ".join(lines)
    assert "at `32315a9`, 2026-11-27" in text
    assert "leader / etcd 0.80x, leader / replicated 1.80x;" in text
    assert "failover median **0.091 s**, max 0.876 s over 10 `kill -9` trials" in text
    assert "~4,150 write req/s" in text
    assert all(len(line) <= 88 for line in lines if not line.startswith("|"))


def test_a_soak_result_adds_its_line() -> None:
    soak = {"execution": "switchable", "duration_s": 1200.4, "faults_injected": 217,
            "ops": {"ok": 467_092, "fail": 0, "info": 0}, "violations": [],
            "verify": {"result": "clean"}}
    block = docs.render(docs.facts(small_summary(), "32315a9", "2026-11-27", soak))
    assert ("The soak (switchable): 1200 s, 217 faults, 467,092 acknowledged operations, 0 "
            "violations; verify clean.") in " ".join(block.splitlines())


def test_only_the_block_between_the_markers_is_replaced() -> None:
    begin, end = docs.BEGIN, docs.END
    text = f"# Title\n\nbefore\n{begin}\nold figures\n{end}\nafter\n"
    assert docs.replace_block(text, "new") == f"# Title\n\nbefore\n{begin}\nnew\n{end}\nafter\n"
    for broken in ("no markers", f"{end}\n{begin}", f"{begin}{begin}{end}"):
        with pytest.raises(ValueError, match="must hold"):
            docs.replace_block(broken, "new")


def test_the_command_writes_facts_and_block_and_check_catches_a_hand_edit(tmp_path: Path) -> None:
    run_dir = tmp_path / "bench-out" / "quick-1"
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(small_summary()))
    (run_dir / "manifest.json").write_text(json.dumps(
        {"git": {"revision": "abcdef0123456789"}, "created_at": "2026-11-28T01:02:03+00:00"}))
    readme = tmp_path / "README.md"
    readme.write_text(f"# om\n\n{docs.BEGIN}\nstale block\n{docs.END}\n\nkept\n")
    facts = tmp_path / "docs" / "figures" / "main-job.json"
    where = ["--readme", str(readme), "--facts", str(facts)]

    assert cli.main(["docs", str(run_dir / "summary.json"), *where]) == 0
    assert json.loads(facts.read_text())["commit"] == "abcdef0123456789"
    text = readme.read_text()
    assert "at `abcdef0`, 2026-11-28" in text
    assert text.endswith(f"{docs.END}\n\nkept\n")
    assert "stale block" not in text
    assert cli.main(["docs", "--check", *where]) == 0

    readme.write_text(text.replace("2,797", "2,900"))   # a figure edited by hand
    assert cli.main(["docs", "--check", *where]) == 1


def test_readmes_block_is_what_the_committed_facts_render() -> None:
    facts = json.loads((ROOT / "docs" / "figures" / "main-job.json").read_text())
    assert docs.current_block((ROOT / "README.md").read_text()) == docs.render(facts)
