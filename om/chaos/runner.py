"""A chaos run: a real 3-node cluster, concurrent clients, a nemesis, and the checkers.

The run writes ``OUT/result.json`` (``faults_injected``, ``ops.{ok,fail,info}``,
``retries``, ``resources``, ``verify``, ``violations``: empty when clean),
``OUT/history.jsonl`` (one ``Op`` per line), ``OUT/resources.jsonl`` (each
node's RSS and descriptors, sampled: ``om/chaos/resources.py``),
``OUT/<flow>/traces/faults.jsonl`` (the faults, as trace records) and the
cluster's logs under ``OUT/cluster``. After the load it heals every fault,
waits until the replicas converge, reads the final state and the bucket
usage, has ``om admin verify`` compare every replica's Merkle trees at one log
position (anything but ``clean`` is a violation), stops the cluster and
compares the replicas' tables.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from om.chaos import checkers, resources, workload
from om.chaos.checkers import Usage, Violation
from om.chaos.history import History, Outcome
from om.chaos.links import LinkProxies
from om.chaos.nemesis import DISK_STALLS, FAULTS, PARTITIONS, Nemesis
from om.client import OMClient
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster

RAFT_SETTINGS = """
[raft]
election_timeout_min_s = 0.4
election_timeout_max_s = 0.8
leader_fallback_timeout_s = 1.5
"""
SETTLE_S = 3.0
VERIFY = "verify"
VERIFY_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class ChaosConfig:
    """What to run, how long, against which flow, with which faults."""

    out: Path
    duration_s: float = 40.0
    execution: str = "leader"
    faults: Sequence[str] = FAULTS
    fault_interval_s: float = 4.0
    fault_hold_s: float = 2.0
    workload: workload.WorkloadConfig = field(default_factory=workload.WorkloadConfig)
    port_base: int = 0
    unsafe_disable_retry_cache: bool = False
    calm_s: float = 0.0               # a soak: calm phases without restarts (nemesis.py)
    storm_s: float = 0.0
    resource_bounds: resources.Bounds = field(default_factory=resources.Bounds)
    sample_interval_s: float = 5.0

    def __post_init__(self) -> None:
        assert self.duration_s > 0
        assert self.execution in ("leader", "replicated")


def _run_load(cluster: om_cluster.Cluster, config: ChaosConfig, links: LinkProxies | None,
              sampler: resources.Sampler
              ) -> tuple[workload.Recorder, list[workload.Worker], Nemesis]:
    recorder = workload.Recorder()
    stop = threading.Event()
    workers: list[workload.Worker] = []
    threads: list[threading.Thread] = []
    spec = config.workload
    for process in range(spec.register_workers + spec.add_workers):
        worker = workload.Worker(process, cluster.addresses, recorder, spec, stop,
                                 cluster.client_tls())
        step = worker.register_step if process < spec.register_workers else worker.add_step
        workers.append(worker)
        threads.append(threading.Thread(target=worker.run, args=(step,), daemon=True))
    nemesis = Nemesis(cluster, config.faults, config.fault_interval_s, config.fault_hold_s,
                      links, calm_s=config.calm_s, storm_s=config.storm_s)
    nemesis_thread = threading.Thread(target=nemesis.run, args=(stop,), daemon=True)
    sampler_thread = threading.Thread(target=sampler.run, args=(stop,), daemon=True)
    for thread in [*threads, nemesis_thread, sampler_thread]:
        thread.start()
    stop.wait(config.duration_s)
    stop.set()
    nemesis_thread.join(timeout=60)
    sampler_thread.join(timeout=60)
    for thread in threads:
        thread.join(timeout=spec.deadline_s * 3)
        assert not thread.is_alive(), "a chaos worker did not stop"
    assert all(w.ops < spec.ops_per_worker_max for w in workers), \
        "a worker spent its operation budget before the run ended: raise ops_per_worker_max"
    nemesis.heal()
    return recorder, workers, nemesis


def _observe(cluster: om_cluster.Cluster, keys: int
             ) -> tuple[dict[str, int | None], dict[str, Usage], list[tuple[str, int]]]:
    """The final value of every register key (None: absent), the exactly-once buckets'
    usage, and the object ids of the volume and buckets."""
    with OMClient(cluster.addresses, policy=RetryPolicy(deadline_s=60),
                  tls=cluster.client_tls()) as client:
        final: dict[str, int | None] = {workload.register_key(i): None for i in range(keys)}
        start = ""
        while True:
            page = client.list_keys(workload.VOLUME, workload.REGISTER_BUCKET, start_key=start,
                                    max_keys=1000)
            final.update((k.key_name, k.data_size) for k in page.key_info)
            if not page.truncated:
                break
            start = page.key_info[-1].key_name
        usage = {}
        ids = [("volume", client.info_volume(workload.VOLUME).object_id)]
        for bucket in (workload.REGISTER_BUCKET, *workload.ADD_BUCKETS):
            info = client.info_bucket(workload.VOLUME, bucket)
            ids.append((f"bucket:{bucket}", info.object_id))
            if bucket in workload.ADD_BUCKETS:
                usage[bucket] = Usage(info.used_bytes, info.used_namespace)
    return final, usage, ids


def _verify(cluster: om_cluster.Cluster) -> tuple[dict[str, Any], list[Violation]]:
    """``om admin verify`` over the healed cluster, as an operator runs it (report only):
    its verdict, and a violation unless every replica matched at one position."""
    done = subprocess.run(
        [sys.executable, "-m", "om", "admin", "verify", "--dir", str(cluster.directory),
         "--json", "--no-mark", "--timeout", str(VERIFY_TIMEOUT_S)],
        capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S + 60, check=False)
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = {"result": "no report", "stderr": done.stderr[-2000:]}
    verdict = {"result": report.get("result"), "position": report.get("position"),
               "exit": done.returncode}
    if done.returncode == 0 and report.get("result") == "clean":
        return verdict, []
    return verdict, [Violation(VERIFY, "replicas_differ", f"om admin verify: {verdict}; "
                               f"{done.stderr.strip()[-500:]}")]


def _sampled_nodes(cluster: om_cluster.Cluster) -> list[tuple[str, int | None]]:
    return [(node.id, cluster.pid(node.id)) for node in cluster.nodes]


def _acked_ids(history: History) -> list[tuple[str, int]]:
    return [(ack.source, ack.object_id) for ack in checkers.id_acks_from_history(history)]


def _write(out: Path, config: ChaosConfig, history: History, nemesis: Nemesis,
           workers: list[workload.Worker], recorder: workload.Recorder,
           violations: list[Violation], elapsed_s: float,
           observed: dict[str, Any]) -> dict[str, Any]:
    (out / "history.jsonl").write_text(history.to_jsonl())
    traces = out / config.execution / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    (traces / "faults.jsonl").write_text("".join(
        json.dumps({"v": 1, "kind": "fault", "flow": config.execution, **event}) + "\n"
        for event in nemesis.events))
    outcomes = [op.outcome for op in history]
    result: dict[str, Any] = {
        "execution": config.execution, "duration_s": round(elapsed_s, 1),
        "faults_injected": len(nemesis.events),
        "faults": sorted({e["action"] for e in nemesis.events}),
        "ops": {o.value: outcomes.count(o) for o in Outcome},
        "retries": sum(op.retries for op in history),
        "duplicate_sends": recorder.duplicate_sends,
        "client_resends": sum(w.retries for w in workers),
        **observed,
        "violations": [asdict(v) for v in violations],
        "history": str(out / "history.jsonl"),
        "unsafe_disable_retry_cache": config.unsafe_disable_retry_cache,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def run(config: ChaosConfig) -> dict[str, Any]:
    """Runs one chaos experiment; returns (and writes) its result."""
    config.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    port_base = config.port_base or om_cluster.free_port_base()
    flag = "unsafe_disable_retry_cache = true" if config.unsafe_disable_retry_cache else ""
    links = None
    raft = RAFT_SETTINGS
    if set(config.faults) & set(DISK_STALLS):
        raft += "unsafe_journal_stall = true\n"
    if set(config.faults) & set(PARTITIONS):
        links = LinkProxies(om_cluster.node_addresses(3, port_base))
        links.start()
        raft += links.links_toml()
    try:
        cluster = om_cluster.up(config.out / "cluster", 3, port_base, config.execution, raft,
                                timeout_s=60, remember_it=False, top_level_toml=flag)
    except BaseException:
        if links is not None:
            links.stop()
        raise
    sampler = resources.Sampler(lambda: _sampled_nodes(cluster), config.sample_interval_s)
    try:
        workload.set_up(cluster.addresses, cluster.client_tls())
        recorder, workers, nemesis = _run_load(cluster, config, links, sampler)
        cluster.wait_for_leader(timeout_s=60)
        time.sleep(SETTLE_S)
        final, usage, ids = _observe(cluster, config.workload.register_keys)
        cluster.wait_converged(timeout_s=60)
        verified, unverified = _verify(cluster)
    finally:
        om_cluster.down(cluster)
        if links is not None:
            links.stop()
    history = recorder.history()
    violations = checkers.run_all(history, final_state=final, observed_usage=usage,
                                  digests=cluster.stopped_digests(),
                                  object_ids=ids + _acked_ids(history))
    samples = sampler.snapshot()
    violations += unverified + resources.check(samples, config.resource_bounds)
    (config.out / "resources.jsonl").write_text("".join(
        json.dumps(asdict(sample)) + "\n" for sample in samples))
    observed = {"resources": resources.summarize(samples, config.resource_bounds),
                VERIFY: verified}
    return _write(config.out, config, history, nemesis, workers, recorder, violations,
                  time.monotonic() - started, observed)
