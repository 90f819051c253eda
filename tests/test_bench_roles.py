"""CPU per write by role, and one leader's projection to more cores (bench/roles.py)."""

from __future__ import annotations

import pytest

from bench import roles
from bench.summary import render_roles


def test_om_processes_map_to_their_roles() -> None:
    # 10 s, 20,000 writes: 1 % of a core is 5 µs a write
    cpu = {"om2": 80.0, "om2-raft": 12.0, "om2-w0": 10.0, "om2-w1": 6.0,
           "om1": 6.0, "om1-raft": 8.0, "om3": 4.0, "om3-raft": 6.0, "bench": 30.0}
    found = roles.per_role(cpu, "om2", 10.0, 20_000)
    assert found[roles.LEADER_SERVER] == pytest.approx(400.0)
    assert found[roles.LEADER_WORKERS] == pytest.approx(80.0)
    assert found[roles.LEADER_RAFT] == pytest.approx(60.0)
    assert found[roles.FOLLOWER_SERVER] == pytest.approx(25.0)   # mean of 30 and 20
    assert found[roles.FOLLOWER_RAFT] == pytest.approx(35.0)
    assert found[roles.LOAD_GENERATOR] == pytest.approx(150.0)
    assert found[roles.LEADER_SIDE] == pytest.approx(540.0)
    assert found[roles.ALL_SERVERS] == pytest.approx(5 * (80 + 12 + 10 + 6 + 6 + 8 + 4 + 6))


def test_etcd_members_map_to_leader_and_followers() -> None:
    found = roles.per_role({"e1": 40.0, "e2": 50.0, "e3": 30.0, "bench": 20.0}, "e2", 10.0,
                           20_000)
    assert found[roles.ETCD_LEADER] == pytest.approx(250.0)
    assert found[roles.ETCD_FOLLOWER] == pytest.approx(175.0)
    assert found[roles.LEADER_SIDE] == pytest.approx(250.0)
    assert roles.LEADER_SERVER not in found


def test_no_writes_no_roles() -> None:
    assert roles.per_role({"om1": 50.0}, "om1", 10.0, 0) == {}


def test_projection_names_the_binding_ceiling() -> None:
    costs = {roles.LEADER_SERVER: 100.0, roles.LEADER_RAFT: 40.0, roles.LEADER_WORKERS: 60.0,
             roles.LEADER_SIDE: 200.0}
    two = roles.project(costs, 2)
    assert two.writes_per_s == pytest.approx(10_000.0)
    assert two.bound_by == "the core process (one thread)"
    one = roles.project(costs, 1)
    assert one.writes_per_s == pytest.approx(5_000.0)
    assert one.bound_by == "the host's 1 cores"
    assert [p.cores for p in roles.projections(costs)] == list(roles.PROJECTED_CORES)
    assert all(p.writes_per_s <= 10_000.0 for p in roles.projections(costs))


def test_role_table_renders_om_and_etcd_rows() -> None:
    summary = {"flows": {
        "leader": {"cpu_us_per_write": roles.per_role({"om1": 50.0, "om1-raft": 10.0,
                                                       "bench": 20.0}, "om1", 10.0, 10_000),
                   "projection": [{"cores": 16, "writes_per_s": 20_000.0,
                                   "bound_by": "the core process (one thread)"}]},
        "etcd": {"cpu_us_per_write": roles.per_role({"e1": 40.0, "e2": 30.0, "bench": 10.0},
                                                    "e1", 10.0, 10_000)},
        "ceiling": {}}}
    lines = render_roles(summary)
    assert lines[0].startswith("CPU us per write")
    assert lines[1].split()[:2] == ["leader", "500"]
    assert lines[2].split()[:2] == ["etcd", "400"]
    assert "16 cores:" in lines[-1]
    assert "bound by the core process" in lines[-1]
