"""Where the cores go: CPU per acknowledged write by role, and one leader's projection.

``per_role`` turns the CPU meter's shares of a core (``bench.machine.CpuMeter``,
labels ``om1``, ``om1-raft``, ``om1-s1``..., ``om1-w0``..., ``e1``..., ``bench``) over
the measured window into microseconds of CPU per acknowledged write request, for
each role a storage engineer sizes a host for:

* OM clusters: the leader's server (its core process, shard 0: execution, group
  commit, apply), the leader's other shard processes (``om1-s1``...: shards 1..S-1,
  together), the leader's front workers (TLS, framing, parsing, reply encoding),
  the leader's Raft process, each follower's server with its shards and workers and
  its Raft process (their mean), and the load generator;
* etcd: its leader, each follower (their mean), and its load generator.

``project`` answers "where would one leader with S shards stop on a host of N
cores?" from those costs alone, for a leader host that runs only the leader's
processes (followers and clients elsewhere, as in production). Three ceilings, the
lowest wins:

* the executors: S one-thread processes sharing the writes evenly (the load spreads
  over many buckets), ``S * 1e6 / (leader server + leader shards µs)``; at S = 1 the
  core process, ``1e6 / leader server µs``;
* the Raft process is one thread: ``1e6 / leader Raft µs``;
* the host's cores: ``cores * 1e6 / (all leader-side µs)``, workers spread
  over the cores left.

So what S buys on a bigger host is read from a run at that S (its own costs, the
merging and routing included); projecting to another S than the run's assumes each
shard's cost per write stays what it was measured, which the issue's target (≤ 1.1x
S = 1's per shard) is there to check.

The measured per-write costs are taken as they are; at a higher rate batches
grow, so the Raft process's and apply's per-write cost can only fall: the
projection is conservative on those terms, and it knows nothing of the disk or
the network (both far from saturated at these rates).
"""

from __future__ import annotations

from dataclasses import dataclass

LEADER_SERVER = "leader server"
LEADER_WORKERS = "leader workers"
LEADER_SHARDS = "leader shards 1..S-1"
LEADER_RAFT = "leader Raft"
FOLLOWER_SERVER = "follower server (each)"
FOLLOWER_RAFT = "follower Raft (each)"
LOAD_GENERATOR = "load generator"
ETCD_LEADER = "etcd leader"
ETCD_FOLLOWER = "etcd follower (each)"
LEADER_SIDE = "leader side (all leader processes)"
ALL_SERVERS = "all servers"
CLIENT_LABEL = "bench"
PROJECTED_CORES = (2, 4, 8, 16, 32, 64)
# Issue 35's target host: S = 8 on 16 cores (>= 6x S = 1's there), projected from a run
# at a smaller S by ``project(roles, TARGET_CORES, TARGET_SHARDS)``.
TARGET_SHARDS = 8
TARGET_CORES = 16


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def per_role(cpu_percent: dict[str, float], leader: str, duration_s: float, writes: int,
             client_label: str = CLIENT_LABEL) -> dict[str, float]:
    """Microseconds of CPU per acknowledged write by role (empty without writes).

    ``leader`` is the leading node's label (``om2``, ``e1``); an etcd run is told by
    its member labels (``e1``..), an OM run by its ``-raft`` processes."""
    if writes <= 0 or duration_s <= 0:
        return {}
    us = {label: share / 100.0 * duration_s * 1e6 / writes
          for label, share in cpu_percent.items()}
    client = us.pop(client_label, 0.0)
    etcd = not any(label.endswith("-raft") for label in us) and leader.startswith("e")
    if etcd:
        members = [v for label, v in us.items() if label != leader]
        roles = {ETCD_LEADER: us.get(leader, 0.0), ETCD_FOLLOWER: _mean(members),
                 LOAD_GENERATOR: client}
        roles[ALL_SERVERS] = sum(us.values())
        roles[LEADER_SIDE] = roles[ETCD_LEADER]
        return roles
    nodes = {label for label in us if "-" not in label}
    followers = sorted(nodes - {leader})

    def helpers(node: str, kind: str) -> float:
        return sum(v for label, v in us.items() if label.startswith(f"{node}-{kind}"))

    roles = {LEADER_SERVER: us.get(leader, 0.0), LEADER_SHARDS: helpers(leader, "s"),
             LEADER_WORKERS: helpers(leader, "w"),
             LEADER_RAFT: us.get(f"{leader}-raft", 0.0),
             FOLLOWER_SERVER: _mean([us[f] + helpers(f, "s") + helpers(f, "w")
                                     for f in followers]),
             FOLLOWER_RAFT: _mean([us.get(f"{f}-raft", 0.0) for f in followers]),
             LOAD_GENERATOR: client}
    roles[LEADER_SIDE] = (roles[LEADER_SERVER] + roles[LEADER_SHARDS] + roles[LEADER_WORKERS]
                          + roles[LEADER_RAFT])
    roles[ALL_SERVERS] = sum(us.values())
    return roles


@dataclass(frozen=True)
class Projection:
    """One leader with ``shards`` shards on a host of ``cores`` cores: its write rate and
    what binds it."""

    cores: int
    writes_per_s: float
    bound_by: str
    shards: int = 1


def project(roles: dict[str, float], cores: int, shards: int = 1) -> Projection:
    """The write rate one leader with ``shards`` shards would reach on ``cores`` cores
    (module docstring)."""
    assert cores > 0
    assert shards > 0
    executors = roles.get(LEADER_SERVER, 0.0) + roles.get(LEADER_SHARDS, 0.0)
    executing = ("the core process (one thread)" if shards == 1 else
                 f"the {shards} shard processes (one thread each)")
    rates = {executing: shards * 1e6 / executors} if executors > 0 else {}
    if roles.get(LEADER_RAFT, 0.0) > 0:
        rates["the Raft process (one thread)"] = 1e6 / roles[LEADER_RAFT]
    side = roles.get(LEADER_SIDE, 0.0)
    if side > 0:
        rates[f"the host's {cores} cores"] = cores * 1e6 / side
    if not rates:
        return Projection(cores, 0.0, "nothing measured", shards)
    bound = min(rates, key=lambda name: rates[name])
    return Projection(cores, rates[bound], bound, shards)


def projections(roles: dict[str, float], cores: tuple[int, ...] = PROJECTED_CORES,
                shards: int = 1) -> list[Projection]:
    """``project`` for each core count, at ``shards`` shards."""
    return [project(roles, n, shards) for n in cores]
