"""``om bench``: every flow under the same load, each on a fresh cluster, with traces.

For each flow in order (``leader``, ``replicated``, ``leader-nobatch``, the
in-process ``ceiling``, then ``etcd``, a 3-member etcd under the same load
shape: ``bench/etcd``), the driver:

1. replaces ``OUT/<flow>/`` and starts a fresh 3-node cluster in
   ``OUT/<flow>/cluster`` on free 127.0.0.1 ports, secure as ``om cluster up``
   makes it (Raft secret, TLS with the cluster's client certificate; neither with
   ``--insecure``, like the etcd flow), each node tracing to
   ``OUT/<flow>/raw-traces/server-<id>.jsonl`` (the ceiling instead runs the
   same ``Node`` in-process on a store in ``OUT/ceiling/data``);
2. with ``keys``, starts every node on a copy of one generated database
   holding ``keys`` keys (``seed_flow``), before the nodes first start;
3. warms up (untraced ``omkg``), then measures the same ``omkg`` load for the
   same time, tracing ``client_request`` records to
   ``OUT/<flow>/traces/client-freon.jsonl``; in the ``full`` profile a mixed
   ``ockrw`` phase follows, traced as flow ``<flow>-mixed``;
4. reads the OM processes' RSS, stops the cluster (always, in ``finally``);
   for the leader flow, measures failover on a fresh cluster
   (``bench/failover``: kill -9 of the leader under light load, repeated),
   and copies the server records of the measured window to
   ``OUT/<flow>/traces/server-<id>.jsonl`` (warm-up stays out);
5. writes freon's report (``freon-measure.txt``/``.json``).

The FSO flows (``--profile fso``: ``fso`` and ``fso-bucket``, one ``[fso]
lock_plan`` apart) replace step 3 with ``run_fso_phases`` (``bench/fso.py``) and start
from their own seed, ``OUT/seed-fso/db``: the ``keys`` namespace if any and the
directory of ``fso_files_big`` files the rename measurement renames.

After each flow, ``bench/bound.py`` labels its measured run CPU-bound,
cycle-bound or stall-bound from the machine's CPU, the busiest thread's demand,
the server phases of the window's traces and the client's completions, and
``bench/machine_load.py`` says whether other processes took more than 10 % of the
machine meanwhile (both in the step log, the table and ``summary.json``). The
``sweep`` profile runs the leader, replicated and etcd flows at 16, 64 and 256 in
flight, each point a flow of its own on a fresh cluster (``bench/sweep.py`` argues
why, and the order). The ``scaling`` profile runs the leader at S = 1, 2 and 4 shards,
the load and preload over 64 buckets, each flow three times in rounds
(``bench/shard_scaling.py``).

Then ``summary.json`` and ``manifest.json``. A flow that fails is recorded with
its error and the others still run; the etcd flow is recorded as skipped, with
the reason, where etcd or Go cannot be had (Ctrl-C stops the run; clusters are still
stopped). Every phase is bounded in time, every cluster start by a timeout.

The preloaded namespace is generated once per run, offline, into
``OUT/seed/db`` (``om freon generate``: the real handlers, apply's write, one
write batch per chunk; ``om/cluster/preload.py``), and every node of every OM flow
starts on a byte-identical copy of it, so nodes agree before their first Raft
entry. The seed's applied position is 0, so each fresh cluster's Raft log,
which starts empty, is applied in full over it. (It used to be loaded over
RPC, by a high-concurrency ``omkg``: 1M keys took ~250 s.)
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import uvloop

from bench import bound, etcd, failover, freon, shard_scaling, sweep
from bench import fso as fso_flows
from bench.ceiling import InProcessCaller, in_process_node
from bench.clusters import traced_cluster
from bench.etcd import EtcdUnavailable
from bench.failover import FailoverResult
from bench.freon import FreonConfig, FreonResult
from bench.fso import FsoResults
from bench.generators import BUCKETS_MAX, bucket_names
from bench.machine import CpuMeter, children, command_line, rss_mb
from bench.machine_load import MachineLoad
from bench.manifest import build_manifest, write_json
from bench.progress import StepLog
from bench.session import PooledCaller, RequestCaller, RoutedClient
from bench.summary import (
    CLIENT_PROCESS,
    IN_PROCESS,
    FlowMeasurement,
    Redirects,
    bound_inputs,
    build_summary,
)
from bench.traces import batch_sizes, completion_times, copy_window, write_phase_means
from om import config as om_config
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.cluster import preload
from om.config import ServerConfig

POLICY = RetryPolicy(deadline_s=30.0, attempt_timeout_s=10.0)
SHARD_MODULE = "om.node.shard_process"   # a shard process's module (om/node/shard_pool.py)
USER = "bench"
Connect = Callable[[], RequestCaller]


@dataclass(frozen=True)
class Profile:
    """How long and how hard each flow is driven."""

    name: str
    warmup_s: float
    measure_s: float
    threads: int
    mixed_s: float = 0.0
    half_load_s: float = 0.0
    nodes: int = 3
    mixed_read_pct: int = 70
    mixed_list_pct: int = 10
    failover_trials: int = 0   # kill -9 of the leader, after the leader flow's phases
    connections: int = 1       # client connections per node the load is spread over
    flows: tuple[str, ...] = ()  # the flows run by default (empty: every flow but scaling's
    #                              and the FSO flows')
    # The FSO flows (bench/fso.py): files in the seeded directory that is renamed against
    # one of fso_files_small; renames of each; renames in the rename/create mix (%).
    fso_files_big: int = 100_000
    fso_files_small: int = 10
    fso_renames: int = 30
    fso_rename_pct: int = 25
    in_flight: tuple[int, ...] = ()   # a sweep: each flow at each of these (bench/sweep.py)
    buckets: int = 1   # the omkg load and the preload spread over this many buckets
    runs: int = 1      # each flow this many times, in rounds (bench/shard_scaling.py)

    def __post_init__(self) -> None:
        assert 1 <= self.buckets <= BUCKETS_MAX
        assert 1 <= self.runs <= shard_scaling.RUNS_MAX
        assert self.buckets == 1 or not self.mixed_s, "the mixed phase writes one bucket"


PROFILES: dict[str, Profile] = {
    "quick": Profile("quick", warmup_s=2.0, measure_s=15.0, threads=64, half_load_s=8.0,
                     failover_trials=10),
    "full": Profile("full", warmup_s=5.0, measure_s=60.0, threads=256, mixed_s=30.0,
                    half_load_s=30.0, failover_trials=10),
    # For tests: a couple of seconds per flow.
    "smoke": Profile("smoke", warmup_s=0.3, measure_s=1.5, threads=8, mixed_s=0.5,
                     half_load_s=0.5, failover_trials=1, fso_files_big=200, fso_renames=3),
    # File-system buckets: OBS keys, files, a rename/create mix and rename scaling, with
    # the object-id locks and with Ozone mainline's bucket lock (bench/fso.py).
    "fso": Profile("fso", warmup_s=2.0, measure_s=15.0, threads=64, mixed_s=15.0,
                   flows=("fso", "fso-bucket")),
    # What shards buy: one node at S = 1 and 2, three nodes at S = 1, 2 and 4, the load
    # and the preload spread over 64 buckets (16 a shard at S = 4: the hash spreads these
    # names evenly at S = 2 and 4, 16 would put 10 and 6 at S = 2) and 8 connections, each
    # flow three times, S against S = 1 by the medians (bench/shard_scaling.py).
    "scaling": Profile("scaling", warmup_s=2.0, measure_s=12.0, threads=64, connections=8,
                       buckets=64, runs=3,
                       flows=("leader-1node-s1", "leader-1node-s2", "leader-s1", "leader-s2",
                              "leader-s4")),
    # The leader, the old flow and etcd at 16, 64 and 256 in flight, each point on a fresh
    # cluster, as long as the quick profile's (bench/sweep.py).
    "sweep": Profile("sweep", warmup_s=2.0, measure_s=15.0, threads=64, half_load_s=8.0,
                     flows=sweep.FLOWS, in_flight=sweep.IN_FLIGHT),
}


@dataclass(frozen=True)
class FlowSpec:
    """One flow: how its cluster is configured, or in-process."""

    name: str
    execution: str = "leader"
    extra_toml: str = ""
    in_process: bool = False
    etcd: bool = False          # not an OM: a 3-member etcd (bench/etcd)
    failover: bool = False      # measure failover on its cluster (bench/failover)
    nodes: int = 0              # 0: the profile's
    shards: int = 1             # shard processes per node (`shards = N`, docs/SHARDS.md)
    fso: bool = False           # the file-system phases (bench/fso.py) instead of omkg's
    threads: int = 0            # requests in flight (0: the profile's; a sweep point's own)

    def __post_init__(self) -> None:
        assert 1 <= self.shards <= om_config.SHARDS_MAX
        assert self.shards == 1 or not (self.in_process or self.etcd or self.fso), \
            "shards are for the leader flow's clusters"


FLOWS: tuple[FlowSpec, ...] = (
    FlowSpec("leader", failover=True),
    FlowSpec("replicated", execution="replicated"),
    # One request per Raft entry, pipelined as Ratis pipelines the old flow's
    # entries: with batching off, one entry in flight would only measure round trips.
    FlowSpec("leader-nobatch",
             extra_toml="\n[batch]\nenabled = false\ninflight_batches_max = 256\n"),
    FlowSpec("ceiling", in_process=True),
    FlowSpec("etcd", etcd=True),
    # the scaling profile's (bench/shard_scaling.py)
    FlowSpec("leader-1node-s1", nodes=1),
    FlowSpec("leader-1node-s2", nodes=1, shards=2),
    FlowSpec("leader-s1"),
    FlowSpec("leader-s2", shards=2),
    FlowSpec("leader-s4", shards=4),
    # the fso profile's: one setting apart ([fso] lock_plan, om/config.py)
    FlowSpec("fso", fso=True, extra_toml='\n[fso]\nlock_plan = "object-id"\n'),
    FlowSpec("fso-bucket", fso=True, extra_toml='\n[fso]\nlock_plan = "bucket"\n'),
)
FLOW_NAMES = tuple(f.name for f in FLOWS)
SCALING_FLOWS = PROFILES["scaling"].flows
FSO_FLOWS = PROFILES["fso"].flows
DEFAULT_FLOWS = tuple(name for name in FLOW_NAMES
                      if name not in SCALING_FLOWS and name not in FSO_FLOWS)


@dataclass(frozen=True)
class BenchConfig:
    """A whole run."""

    out: Path
    profile: Profile
    keys: int = 0
    flows: tuple[FlowSpec, ...] = FLOWS
    volume: str = "vol1"
    bucket: str = "bucket1"
    secure: bool = True   # OM clusters with a Raft secret and client TLS (the default)
    traces: bool = True   # server and client traces (off: as production runs, no phases)

    def describe(self) -> dict[str, Any]:
        """The run's parameters, as recorded in both JSON files."""
        return {"profile": asdict(self.profile), "keys": self.keys,
                "flow_names": [f.name for f in self.flows], "secure": self.secure,
                "traces": self.traces}


@dataclass(frozen=True)
class FlowDirs:
    """Where one flow's files go."""

    root: Path
    mixed: Path

    @classmethod
    def of(cls, out: Path, flow: str) -> FlowDirs:
        return cls(out / flow, out / f"{flow}-mixed")

    @property
    def cluster(self) -> Path:
        return self.root / "cluster"

    @property
    def failover(self) -> Path:
        return self.root / "failover-cluster"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def node_dirs(self, flow: FlowSpec, nodes: int) -> list[Path]:
        """Each node's data directory (``ServerConfig.node_data_dir``: ``data_dir/<id>`` in
        a cluster, ``data_dir`` for one node); its shard 0's RocksDB is the ``db`` in it,
        shard k's ``shard-k/db`` (``om.config.shard_data_dir``)."""
        if flow.in_process:
            return [self.data]
        data_dir = self.cluster.resolve() / "data"   # om.cluster.lifecycle.write_config's data_dir
        return [data_dir / node.id for node in om_cluster.node_addresses(nodes, 0)]

    @property
    def raw(self) -> Path:
        return self.root / "raw-traces"

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    def reset(self) -> None:
        """Removes what an earlier run left for this flow."""
        for path in (self.root, self.mixed):
            if path.exists():
                shutil.rmtree(path)
        self.traces.mkdir(parents=True)


@dataclass
class Phases:
    """What the phases of one flow measured; CPU is over the measured phase."""

    measure: FreonResult
    mixed: FreonResult | None = None
    half_load: FreonResult | None = None
    rss_mb: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    machine: MachineLoad | None = None   # the whole machine over the measured phase
    failover: FailoverResult | None = None
    elections: int | None = None   # terms that began while the load ran (0: none)
    fso: FsoResults | None = None  # an FSO flow's other phases (bench/fso.py)
    redirects: Redirects | None = None   # WRONG_SHARD answers over the flow's clients


def select_flows(names: list[str]) -> tuple[FlowSpec, ...]:
    """The flows named, in the driver's order; ValueError for an unknown name."""
    unknown = set(names) - set(FLOW_NAMES)
    if unknown:
        raise ValueError(f"unknown flows {sorted(unknown)}: choose from {list(FLOW_NAMES)}")
    return tuple(f for f in FLOWS if f.name in names)


def sweep_points(flows: tuple[FlowSpec, ...], in_flight: tuple[int, ...]) -> tuple[FlowSpec, ...]:
    """Each flow at each in-flight count, ordered by count, then flow (``bench/sweep.py``);
    a point measures no failover (the quick profile does)."""
    assert all(count > 0 for count in in_flight)
    return tuple(replace(flow, name=sweep.point_name(flow.name, count), threads=count,
                         failover=False)
                 for count in in_flight for flow in flows)


def repeated(flows: tuple[FlowSpec, ...], runs: int) -> tuple[FlowSpec, ...]:
    """Each flow ``runs`` times, in rounds (``bench/shard_scaling.py``); one run keeps the
    flows' names."""
    assert 1 <= runs <= shard_scaling.RUNS_MAX
    if runs == 1:
        return flows
    return tuple(replace(flow, name=shard_scaling.run_name(flow.name, run), failover=False)
                 for run in range(1, runs + 1) for flow in flows)


def run_bench(config: BenchConfig, log: StepLog) -> dict[str, Any]:
    """Runs every flow and writes manifest.json and summary.json; returns the summary."""
    config.out.mkdir(parents=True, exist_ok=True)
    flow_configs = {f.name: {**asdict(f), "nodes": _nodes(config, f)} for f in config.flows}
    write_json(config.out / "manifest.json", build_manifest(config.describe(), flow_configs))
    seeds = {shards: generate_seed(config, log, shards)
             for shards in sorted({f.shards for f in config.flows if not f.fso})}
    fso_seed = generate_fso_seed(config, log)
    measurements: list[FlowMeasurement] = []
    for number, flow in enumerate(config.flows, 1):
        log.step(f"flow {number}/{len(config.flows)}: {flow.name}")
        measurements.append(run_flow(config, flow, log,
                                     fso_seed if flow.fso else seeds[flow.shards]))
        cluster_toml = FlowDirs.of(config.out, flow.name).cluster / "cluster.toml"
        if cluster_toml.exists():
            flow_configs[flow.name]["cluster_toml"] = cluster_toml.read_text()
    run = config.describe()
    seeded = [seed for seed in seeds.values() if seed is not None]
    if seeded:
        run["preload"] = {**seeded[0].describe(), "shards": [seed.shards for seed in seeded]}
    if fso_seed is not None:
        run["fso_preload"] = fso_seed.describe()
    summary = build_summary(measurements, run)
    write_json(config.out / "summary.json", summary)
    write_json(config.out / "manifest.json", build_manifest(config.describe(), flow_configs))
    return summary


@dataclass(frozen=True)
class Seed:
    """The generated stores every OM node of the run's flows with ``shards`` shards
    starts from: a node data directory (shard 0's store in ``db``, shard k's in
    ``shard-k/db``), copied into each node's."""

    node_dir: Path
    result: preload.GenerateResult
    shards: int = 1

    def describe(self) -> dict[str, Any]:
        """How the namespace was preloaded, as recorded in summary.json."""
        return {"method": "om freon generate", "keys": self.result.keys,
                "buckets": self.result.buckets, "seconds": round(self.result.seconds, 3),
                "keys_per_s": round(self.result.keys_per_s, 1)}


def generate_seed(config: BenchConfig, log: StepLog, shards: int = 1) -> Seed | None:
    """Generates ``config.keys`` keys once into ``OUT/seed`` (``OUT/seed-s<S>`` for S >
    1, each shard's part in its store: ``preload.generate_shards``); None without keys.

    The keys are ``preload/<i>`` in the buckets the load uses (the profile's
    ``buckets``, named as the load names them), as the RPC preload named them, owned
    by the bench's user."""
    if not config.keys:
        return None
    root = config.out / ("seed" if shards == 1 else f"seed-s{shards}")
    if root.exists():
        shutil.rmtree(root)
    namespace = preload.Namespace(keys=config.keys, volume=config.volume,
                                  bucket=config.bucket, buckets=config.profile.buckets,
                                  prefix="preload", user=USER, shards=shards)
    log.step(f"preload: generating {config.keys:,} keys in {namespace.buckets} bucket(s), "
             f"{shards} shard(s), into {root} (offline)")
    bar = log.bar(f"[seed S={shards}] generate", config.keys, None)
    results = preload.generate_shards(root, namespace, progress=lambda done: bar.update(done, 0))
    result = _added(results)
    bar.close(result.keys, 0)
    log.step(f"preload: {result.keys:,} keys in {result.seconds:.1f} s "
             f"({result.keys_per_s:,.0f} keys/s, {result.batches} write batches)")
    return Seed(root, result, shards)


def _added(results: list[preload.GenerateResult]) -> preload.GenerateResult:
    """The shards' results as one: keys, batches and seconds add up; volumes and buckets
    are the most any shard holds (their rows are in every shard)."""
    assert results
    return preload.GenerateResult(
        max(r.volumes for r in results), max(r.buckets for r in results),
        sum(r.keys for r in results),
        sum(r.batches for r in results), max(r.managed_index for r in results),
        sum(r.seconds for r in results))


def generate_fso_seed(config: BenchConfig, log: StepLog) -> Seed | None:
    """The seed of the FSO flows (None when none runs): the ``--keys`` namespace if
    any, and ``fso_files_big`` files in one directory of an FSO bucket, the directory
    the rename measurement renames (``bench/fso.py``)."""
    files = config.profile.fso_files_big
    if not any(flow.fso for flow in config.flows) or not files:
        return None
    root = config.out / "seed-fso"
    if root.exists():
        shutil.rmtree(root)
    big = fso_flows.rename_namespace(files, USER)
    namespaces = [big]
    if config.keys:
        namespaces.insert(0, preload.Namespace(keys=config.keys, volume=config.volume,
                                               bucket=config.bucket, prefix="preload",
                                               user=USER))
    log.step(f"FSO preload: {files:,} files in /{big.volume}/{big.bucket}/{big.prefix}"
             f"{f' and {config.keys:,} keys' if config.keys else ''} into {root / 'db'}")
    result = preload.generate_into(root / "db", namespaces[0], more=namespaces[1:])
    log.step(f"FSO preload: {result.keys:,} keys and files in {result.seconds:.1f} s")
    return Seed(root, result)


def seed_flow(seed: Seed, flow: FlowSpec, dirs: FlowDirs, nodes: int) -> list[Path]:
    """Copies the seed's stores (each shard's) into every node data directory of the
    flow, before the nodes start; returns the directories. Copies are byte-identical
    (``preload.copy_shards``)."""
    assert seed.shards == flow.shards
    node_dirs = dirs.node_dirs(flow, nodes)
    preload.copy_shards(seed.node_dir, node_dirs, seed.shards)
    return node_dirs


def run_flow(config: BenchConfig, flow: FlowSpec, log: StepLog,
             seed: Seed | None = None) -> FlowMeasurement:
    """One flow from a fresh start to collected traces; failures become ``error``."""
    dirs = FlowDirs.of(config.out, flow.name)
    dirs.reset()
    leader = IN_PROCESS
    try:
        if seed is not None and not flow.etcd:
            nodes = _nodes(config, flow)
            seed_flow(seed, flow, dirs, nodes)
            log.step(f"{flow.name}: {nodes} node(s) seeded with {seed.result.keys:,} keys")
        if flow.in_process:
            phases = uvloop.run(_in_process(config, flow, dirs, log))
        elif flow.etcd:
            phases, leader = _on_etcd(config, flow, dirs, log)
        else:
            phases, leader = _on_cluster(config, flow, dirs, log)
    except EtcdUnavailable as reason:
        log.step(f"{flow.name}: SKIPPED: {reason}")
        return FlowMeasurement(flow.name, None, skipped=str(reason))
    except Exception as error:  # one flow's failure must not lose the others' results
        log.step(f"{flow.name}: FAILED: {type(error).__name__}: {error}")
        return FlowMeasurement(flow.name, None, error=f"{type(error).__name__}: {error}")
    sizes = _collect_traces(dirs, phases.measure) if config.traces else None
    _write_reports(dirs, phases)
    preloaded = seed.result.keys if seed is not None and not flow.etcd else 0
    measured = FlowMeasurement(flow.name, phases.measure, phases.mixed, sizes, phases.rss_mb,
                               preloaded, leader, cpu=phases.cpu,
                               half_load=phases.half_load, durable=_durable(config, flow),
                               failover=phases.failover, elections=phases.elections,
                               fso=phases.fso, machine=phases.machine,
                               phases_ms=write_phase_means(sorted(dirs.traces.glob(
                                   "server-*.jsonl"))),
                               stalls=_stalls(dirs, phases.measure),
                               shards=flow.shards, redirects=phases.redirects,
                               buckets_per_shard=_spread(config, flow))
    found = bound.classify(bound_inputs(measured))
    log.step(f"{flow.name}: {phases.measure.write_requests_per_s:,.0f} write req/s, "
             f"{phases.measure.failures} failed operations; {found.label}: {found.reason}")
    warning = None if phases.machine is None else phases.machine.warning
    if warning:
        log.step(f"{flow.name}: WARNING: {warning}")
    return measured


def _spread(config: BenchConfig, flow: FlowSpec) -> list[int]:
    """How many of the load's buckets each shard of the flow owns (empty at S = 1)."""
    if flow.shards == 1:
        return []
    buckets = bucket_names(config.bucket, config.profile.buckets)
    return shard_scaling.buckets_per_shard(config.volume, buckets, flow.shards)


def _stalls(dirs: FlowDirs, measure: FreonResult) -> bound.Stalls | None:
    """The gaps in the measured window's client completions (``bench/bound.py``)."""
    completions = sorted(t for path in sorted(dirs.traces.glob("client-*.jsonl"))
                         for t in completion_times(path))
    p50_ms = measure.write_latency.summary().p50 if measure.ok_writes else 0.0
    return bound.stalls(completions, p50_ms, measure.duration_s)


def _durable(config: BenchConfig, flow: FlowSpec) -> bool:
    """Whether the flow acknowledged only writes on stable storage (etcd always does)."""
    if flow.etcd:
        return True
    if flow.in_process:
        return False  # bench/ceiling.py: the executor's ceiling syncs nothing
    toml = FlowDirs.of(config.out, flow.name).cluster / "cluster.toml"
    return om_config.load(toml).raft.fsync if toml.exists() else ServerConfig().raft.fsync


def _on_etcd(config: BenchConfig, flow: FlowSpec, dirs: FlowDirs,
             log: StepLog) -> tuple[Phases, str]:
    """A 3-member etcd under the same load shape: in flight, warm-up and measured time.
    There is no preload, half-load or mixed phase: etcd has no OM requests."""
    profile = config.profile
    threads = flow.threads or profile.threads
    log.step(f"{flow.name}: {etcd.MEMBERS} members in {dirs.cluster}; etcdbench, "
             f"{threads} in flight, {profile.warmup_s:g} s warm-up, "
             f"{profile.measure_s:g} s measured")
    run = etcd.run_etcd(dirs.cluster, dirs.traces / "client-etcdbench.jsonl", threads,
                        profile.warmup_s, profile.measure_s, om_cluster.free_port_base())
    return (Phases(run.result, rss_mb=run.rss_mb, cpu=run.cpu, machine=run.machine),
            run.leader or "etcd")


def _nodes(config: BenchConfig, flow: FlowSpec) -> int:
    return 1 if flow.in_process else flow.nodes or config.profile.nodes


def _helpers(pids: dict[str, int]) -> dict[str, int]:
    """Each node's child processes by label: ``om1-raft`` (its Raft process),
    ``om1-s1``, ``om1-s2``... (its shard processes k >= 1; shard 0 is the node's own)
    and ``om1-w0``, ``om1-w1``... (its front workers)."""
    labels: dict[str, int] = {}
    for node, pid in pids.items():
        workers = 0
        for child in children(pid):
            line = command_line(child)
            argv = line.split()
            if "pysyncobj" in line:
                labels[f"{node}-raft"] = child
            elif SHARD_MODULE in argv:
                # python -m om.node.shard_process FD K
                labels[f"{node}-s{argv[argv.index(SHARD_MODULE) + 2]}"] = child
            else:
                labels[f"{node}-w{workers}"] = child
                workers += 1
    return labels


def _on_cluster(config: BenchConfig, flow: FlowSpec, dirs: FlowDirs,
                log: StepLog) -> tuple[Phases, str]:
    security = "secure" if config.secure else "INSECURE: no Raft secret, no TLS"
    nodes = _nodes(config, flow)
    log.step(f"{flow.name}: starting {nodes} node(s) "
             f"(execution={flow.execution}, shards={flow.shards}, {security}) "
             f"in {dirs.cluster}")
    extra = flow.extra_toml
    with traced_cluster(dirs.cluster, nodes, flow.execution, extra,
                        dirs.raw if config.traces else None, flow.name,
                        secure=config.secure, shards=flow.shards) as cluster:
        first = cluster.wait_for_leader()
        leader = first.node_id
        log.step(f"{flow.name}: leader {leader}")
        if flow.shards > 1:
            cluster.wait_converged()   # every shard of every node serves
        addresses, tls = cluster.addresses, cluster.client_tls()
        connections = config.profile.connections
        clients: list[RoutedClient] = []

        def connect() -> RequestCaller:
            # the nodes' addresses: each client routes by shard itself (RoutedClient);
            # with TLS the user is the certificate's: claiming another one is refused
            made = [RoutedClient(addresses, user=None if tls else USER, policy=POLICY, tls=tls)
                    for _ in range(connections)]
            clients.extend(made)
            return PooledCaller(list(made))

        pids = {n.id: pid for n in cluster.nodes if (pid := cluster.pid(n.id)) is not None}
        meter = CpuMeter({**pids, **_helpers(pids), CLIENT_PROCESS: os.getpid()})
        phases = uvloop.run(run_phases(config, flow, dirs, connect, log, meter))
        phases.redirects = Redirects(len(clients), sum(c.redirects for c in clients))
        log.step(f"{flow.name}: {phases.redirects.redirects} WRONG_SHARD redirects over "
                 f"{phases.redirects.clients} clients")
        phases.elections = cluster.wait_for_leader().term - first.term
        for node in cluster.nodes:
            pid = cluster.pid(node.id)
            sizes = [rss_mb(p) for p in ([pid, *children(pid)] if pid is not None else [])]
            if sizes and None not in sizes:
                phases.rss_mb[node.id] = sum(size for size in sizes if size is not None)
        log.step(f"{flow.name}: stopping the cluster")
    if flow.failover and config.profile.failover_trials:
        phases.failover = _failover(config, flow, dirs, log)
    return phases, leader


def _failover(config: BenchConfig, flow: FlowSpec, dirs: FlowDirs,
              log: StepLog) -> FailoverResult:
    """kill -9 trials on a fresh cluster of the flow (the measured one keeps its traces)."""
    trials = config.profile.failover_trials
    log.step(f"{flow.name}: failover, {trials} trials of kill -9 of the leader, "
             f"on a fresh cluster in {dirs.failover}")
    nodes = _nodes(config, flow)
    cluster = om_cluster.up(dirs.failover, nodes,
                            om_cluster.free_port_base(nodes, shards=flow.shards),
                            flow.execution, flow.extra_toml, remember_it=False,
                            secure=config.secure, shards=flow.shards)
    try:
        result = uvloop.run(failover.measure(cluster, trials))
    finally:
        om_cluster.down(cluster)
    found = result.summary()
    log.step(f"{flow.name}: failover median {found['median_s']:.3f} s, "
             f"max {found['max_s']:.3f} s")
    return result


async def _in_process(config: BenchConfig, flow: FlowSpec, dirs: FlowDirs,
                      log: StepLog) -> Phases:
    log.step(f"{flow.name}: in-process node (no RPC, no Raft) in {dirs.data}")
    server_config = None
    if flow.extra_toml:   # as a cluster node would read it, RocksDB not synced
        toml = dirs.root / "node.toml"
        toml.write_text(flow.extra_toml)
        loaded = om_config.load(toml)
        server_config = replace(loaded, raft=replace(loaded.raft, fsync=False))
    async with in_process_node(dirs.data,
                               dirs.raw / "server-om1.jsonl" if config.traces else None, flow.name,
                               server_config) as node:
        meter = CpuMeter({CLIENT_PROCESS: os.getpid()})
        phases = await run_phases(config, flow, dirs, lambda: InProcessCaller(node), log, meter)
        rss = rss_mb(os.getpid())
        if rss is not None:
            phases.rss_mb[CLIENT_PROCESS] = rss
        return phases


async def run_phases(config: BenchConfig, flow: FlowSpec, dirs: FlowDirs, connect: Connect,
                     log: StepLog, meter: CpuMeter) -> Phases:
    """Warm-up, measured omkg, half load (optional), mixed ockrw
    (optional).

    The half-load phase paces omkg at half the measured operation rate
    (``freon --rate``), untraced, for the latency a cluster gives when it is
    not saturated: Ozone users size clusters by that, not by peak p99.
    """
    profile = config.profile
    base = FreonConfig(generator="omkg", count=freon.UNBOUNDED_COUNT,
                       threads=flow.threads or profile.threads,
                       volume=config.volume, bucket=config.bucket,
                       buckets=profile.buckets, flow=flow.name)
    if flow.fso:
        return await run_fso_phases(config, flow, dirs, connect, log, meter, base)
    if profile.warmup_s > 0:
        await _phase(replace(base, duration_s=profile.warmup_s, prefix="warmup"),
                     connect, log, flow.name, "warm-up")
    meter.start()
    measure = await _phase(replace(base, duration_s=profile.measure_s, prefix="bench",
                                   trace_path=client_trace_path(config, dirs.traces)),
                           connect, log, flow.name, "measure")
    window = meter.stop()
    half_load = None
    if profile.half_load_s > 0 and measure.rate > 0:
        half_load = await _phase(replace(base, duration_s=profile.half_load_s, prefix="half",
                                         rate=measure.rate / 2),
                                 connect, log, flow.name, "half load")
    mixed = None
    if profile.mixed_s > 0:
        mixed_config = replace(
            base, generator="ockrw", duration_s=profile.mixed_s, prefix="bench",
            key_range=max(measure.successes, 1), percentage_read=profile.mixed_read_pct,
            percentage_list=profile.mixed_list_pct, flow=f"{flow.name}-mixed",
            trace_path=client_trace_path(config, dirs.mixed / "traces"))
        mixed = await _phase(mixed_config, connect, log, flow.name, "mixed")
    return Phases(measure, mixed, half_load, cpu=window.processes, machine=window.machine)


async def run_fso_phases(config: BenchConfig, flow: FlowSpec, dirs: FlowDirs,
                         connect: Connect, log: StepLog, meter: CpuMeter,
                         base: FreonConfig) -> Phases:
    """An FSO flow (``bench/fso.py``): warm-up (keys, then files), OBS keys (``omkg``)
    for half the measured time, files (``omfc``, one directory per operation in
    flight; the headline, traced and metered), OBS keys for the other half, the
    rename/create mix (``omdr``), then rename scaling."""
    profile = config.profile
    files = replace(base, generator="omfc", volume=fso_flows.VOLUME, bucket=fso_flows.BUCKET,
                    buckets=1, dirs=profile.threads)
    if profile.warmup_s > 0:
        await _phase(replace(base, duration_s=profile.warmup_s, prefix="warmup"),
                     connect, log, flow.name, "warm-up (keys)")
        await _phase(replace(files, duration_s=profile.warmup_s, prefix="warmup"),
                     connect, log, flow.name, "warm-up (files)")
    obs_cpu = []
    meter.start()
    obs_keys = await _phase(replace(base, duration_s=profile.measure_s / 2,
                                    prefix="bench-obs"), connect, log, flow.name, "OBS keys")
    obs_cpu.append(meter.stop().processes)
    meter.start()
    measure = await _phase(replace(files, duration_s=profile.measure_s, prefix="bench",
                                   trace_path=client_trace_path(config, dirs.traces)),
                           connect, log, flow.name, "FSO files")
    window = meter.stop()
    found = FsoResults(obs_keys, obs_cpu=obs_cpu)
    meter.start()
    found.obs_keys_after = await _phase(
        replace(base, duration_s=profile.measure_s / 2, prefix="bench-obs-after"),
        connect, log, flow.name, "OBS keys again")
    obs_cpu.append(meter.stop().processes)
    mix_s = profile.mixed_s or profile.measure_s
    found.mix = await _phase(replace(files, generator="omdr", duration_s=mix_s, prefix="mix",
                                     percentage_rename=profile.fso_rename_pct),
                             connect, log, flow.name, "rename/create mix")
    if profile.fso_files_big and profile.fso_renames:
        log.step(f"{flow.name}: rename scaling, {profile.fso_renames} renames each of a "
                 f"directory of {profile.fso_files_big:,} files and of "
                 f"{profile.fso_files_small:,}")
        found.renames = await fso_flows.measure_renames(
            connect, profile.fso_files_big, profile.fso_files_small, profile.fso_renames)
        rename = found.renames.summary()
        log.step(f"{flow.name}: rename medians {rename['big_median_ms']} ms (big) and "
                 f"{rename['small_median_ms']} ms (small)")
    return Phases(measure, cpu=window.processes, machine=window.machine, fso=found)


async def _phase(config: FreonConfig, connect: Connect, log: StepLog, flow: str,
                 phase: str) -> FreonResult:
    count = None if config.count >= freon.UNBOUNDED_COUNT else config.count
    log.step(f"{flow}: {phase} ({config.generator}, {config.threads} in flight, "
             f"{'' if count is None else f'{count} operations, '}{config.duration_s:g} s max)")
    result = await freon.run(config, connect, log.bar(f"[{flow}] {phase}", count,
                                                      config.duration_s))
    return result


def client_trace_path(config: BenchConfig, directory: Path) -> Path | None:
    """Where the load generator traces its requests (None with traces off)."""
    return directory / "client-freon.jsonl" if config.traces else None


def _collect_traces(dirs: FlowDirs, measure: FreonResult) -> list[int]:
    """Copies the measured window of each server trace; the window's batch sizes."""
    copied = []
    for raw in sorted(dirs.raw.glob("server-*.jsonl")):
        target = dirs.traces / raw.name
        copy_window(raw, target, measure.start_ns, measure.end_ns)
        copied.append(target)
    return batch_sizes(copied)


def _write_reports(dirs: FlowDirs, phases: Phases) -> None:
    for directory, name, result in ((dirs.root, "freon-measure", phases.measure),
                                    (dirs.root, "freon-half-load", phases.half_load),
                                    (dirs.mixed, "freon-mixed", phases.mixed)):
        if result is None:
            continue
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.txt").write_text(freon.format_report(result) + "\n")
        write_json(directory / f"{name}.json", result.as_dict())
