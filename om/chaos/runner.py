"""A chaos run: a real 3-node cluster, concurrent clients, a nemesis, and the checkers.

The run writes ``OUT/result.json`` (``faults_injected``, ``ops.{ok,fail,info}``,
``retries``, ``resources``, ``verify``, ``violations``: empty when clean),
``OUT/history.jsonl`` (one ``Op`` per line), ``OUT/resources.jsonl`` (each
node's RSS and descriptors, sampled: ``om/chaos/resources.py``),
``OUT/<flow>/traces/faults.jsonl`` (the faults, as trace records) and the
cluster's logs under ``OUT/cluster``. After the load it heals every fault,
waits until the replicas converge, reads the final state and the bucket
usage, has ``om admin verify`` compare every replica's Merkle trees at one log
position (anything but ``clean`` is a violation), prepares the cluster (``om
admin om prepare``: no write, nor sweep, after it), stops it and compares the
replicas' tables. With the file-system workload (``fs_workers``)
it also waits for the leader's purge to drain, lists the FSO bucket's whole
tree on the leader, reads its usage and has every node audit its store
(AuditReplica) before stopping the cluster; the ``fso`` entry of
``result.json`` summarizes what was read.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from om.chaos import (
    checkers,
    fs_checkers,
    fs_workload,
    mpu_checkers,
    mpu_workload,
    node_logs,
    resources,
    snap_checkers,
    snap_workload,
    workload,
)
from om.chaos.checkers import Usage, Violation
from om.chaos.fs_checkers import FsEntry, FsObservation
from om.chaos.history import History, Outcome
from om.chaos.links import LinkProxies
from om.chaos.mpu_checkers import MpuObservation
from om.chaos.nemesis import DISK_STALLS, FAULTS, FLOW_SWITCH, PARTITIONS, Nemesis
from om.client import OMClient, OMConnectionError
from om.client import requests as build
from om.client.retry_policy import RetryPolicy
from om.cluster import lifecycle as om_cluster
from om.protocol import om_pb2

RAFT_SETTINGS = """
[raft]
election_timeout_min_s = 0.4
election_timeout_max_s = 0.8
leader_fallback_timeout_s = 1.5
"""
# A purge step empties one deleted directory (its nested ones become tombstones of
# their own), one step an interval: at the default 1 s, the hundreds of subtrees a
# run removes took minutes to drain. Faster here, so purges also run under the load.
PURGE_SETTINGS = """
[purge]
interval_s = 0.1
"""
SETTLE_S = 3.0
VERIFY = "verify"
VERIFY_TIMEOUT_S = 180.0
PREPARE_TIMEOUT_S = 120.0
PURGE_WAIT_S = 180.0
PURGE_METRIC = "om_purge_pending_directories"
AUDIT_ANSWER_S = 300.0
LIST_PAGES_MAX = 10_000      # of 1,000 entries: far above what a run writes


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
        assert self.execution in ("leader", "replicated", "switchable")
        assert FLOW_SWITCH not in self.faults or self.execution == "switchable", \
            "the flow switch needs switchable OMs"


def _run_load(cluster: om_cluster.Cluster, config: ChaosConfig, links: LinkProxies | None,
              sampler: resources.Sampler
              ) -> tuple[workload.Recorder, list[workload.Worker], Nemesis]:
    recorder = workload.Recorder()
    stop = threading.Event()
    workers: list[workload.Worker] = []
    worker: workload.Worker
    step: Callable[[], None]
    threads: list[threading.Thread] = []
    spec = config.workload
    namespace = fs_workload.Namespace()
    others = spec.register_workers + spec.add_workers + spec.fs_workers
    for process in range(others + spec.mpu_workers + spec.snap_workers):
        if process >= others + spec.mpu_workers:
            snap_worker = snap_workload.SnapWorker(process, cluster.addresses, recorder, spec,
                                                   stop, cluster.client_tls())
            worker = snap_worker
            step = snap_worker.snap_step
        elif process >= others:
            mpu_worker = mpu_workload.MpuWorker(process, cluster.addresses, recorder, spec,
                                                stop, cluster.client_tls())
            worker = mpu_worker
            step = mpu_worker.mpu_step
        elif process >= spec.register_workers + spec.add_workers:
            fs_worker = fs_workload.FsWorker(process, cluster.addresses, recorder, spec, stop,
                                             namespace, cluster.client_tls())
            worker = fs_worker
            step = fs_worker.fs_step
        else:
            worker = workload.Worker(process, cluster.addresses, recorder, spec, stop,
                                     cluster.client_tls())
            step = worker.register_step if process < spec.register_workers else worker.add_step
        workers.append(worker)
        threads.append(threading.Thread(target=worker.run, args=(step,), daemon=True))
    nemesis = Nemesis(cluster, config.faults, config.fault_interval_s, config.fault_hold_s,
                      links, calm_s=config.calm_s, storm_s=config.storm_s,
                      seed=config.workload.seed)
    # one fault per interval at most: the budget never ends the faults before the run does
    faults_max = int(config.duration_s / config.fault_interval_s) + 1
    nemesis_thread = threading.Thread(target=nemesis.run, args=(stop, faults_max), daemon=True)
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
        for bucket in (workload.REGISTER_BUCKET, *workload.ADD_BUCKETS, workload.FS_BUCKET):
            info = client.info_bucket(workload.VOLUME, bucket)
            ids.append((f"bucket:{bucket}", info.object_id))
            if bucket in workload.ADD_BUCKETS:
                usage[bucket] = Usage(info.used_bytes, info.used_namespace)
    return final, usage, ids


def _observe_mpu(cluster: om_cluster.Cluster) -> MpuObservation:
    """The multipart bucket's keys (name -> size) and its open uploads, every page."""
    keys: dict[str, int] = {}
    uploads: set[tuple[str, str]] = set()
    bucket = workload.MPU_BUCKET
    with OMClient(cluster.addresses, policy=RetryPolicy(deadline_s=60),
                  tls=cluster.client_tls()) as client:
        start = ""
        for _ in range(LIST_PAGES_MAX):
            page = client.list_keys(workload.VOLUME, bucket, start_key=start, max_keys=1000)
            keys.update((k.key_name, k.data_size) for k in page.key_info)
            if not page.truncated:
                break
            start = page.key_info[-1].key_name
        key_marker = upload_marker = ""
        for _ in range(LIST_PAGES_MAX):
            listed = client.list_multipart_uploads(workload.VOLUME, bucket, key_marker=key_marker,
                                                   upload_id_marker=upload_marker,
                                                   max_uploads=1000)
            uploads.update((u.key, u.upload_id) for u in listed.uploads)
            if not listed.truncated:
                break
            key_marker, upload_marker = listed.next_key_marker, listed.next_upload_id_marker
        else:
            raise RuntimeError(f"the multipart bucket lists more than {LIST_PAGES_MAX} pages")
    return MpuObservation(keys, frozenset(uploads))


def _observe_snapshots(cluster: om_cluster.Cluster) -> list[str]:
    """The names of the register bucket's snapshots, every page."""
    names: list[str] = []
    with OMClient(cluster.addresses, policy=RetryPolicy(deadline_s=60),
                  tls=cluster.client_tls()) as client:
        for _ in range(LIST_PAGES_MAX):
            start = names[-1] if names else ""
            page = client.list_snapshots(workload.VOLUME, workload.REGISTER_BUCKET,
                                         start_after=start, max_results=1000)
            names.extend(info.name for info in page.snapshot_info)
            if not page.truncated:
                return names
    raise RuntimeError(f"the snapshots list more than {LIST_PAGES_MAX} pages")


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


def _quiesce(cluster: om_cluster.Cluster) -> list[Violation]:
    """Prepares the healed cluster before it stops (``om admin om prepare``, as before
    an upgrade): every node applies every entry, and no write follows, not even the
    leader's sweep of expired retry rows or its purge, so the stopped replicas stand
    at one position and their digests compare. Without it, a sweep committed by the
    leader and one follower just before the other stopped read as replicas that
    differ (a soak found it); a violation unless every node reported prepared."""
    done = subprocess.run(
        [sys.executable, "-m", "om", "admin", "om", "prepare", "--dir", str(cluster.directory)],
        capture_output=True, text=True, timeout=PREPARE_TIMEOUT_S, check=False)
    if done.returncode == 0:
        return []
    return [Violation(VERIFY, "not_prepared", f"om admin om prepare exited {done.returncode}: "
                      f"{(done.stdout + done.stderr).strip()[-500:]}")]


def _sampled_nodes(cluster: om_cluster.Cluster) -> list[tuple[str, int | None, str]]:
    return [(node.id, cluster.pid(node.id),
             f"http://{node.http_address}/metrics" if node.http_address else "")
            for node in cluster.nodes]


def _observe_fs(cluster: om_cluster.Cluster) -> FsObservation:
    """Once the purge drained: the FSO bucket's tree as the leader lists it, and its usage.
    The old flow has no purge (its tombstones stay), so its usage is left to the audit."""
    drained = _purge_drained(cluster)
    with OMClient(cluster.addresses, policy=RetryPolicy(deadline_s=60),
                  tls=cluster.client_tls()) as client:
        entries = _list_tree(client)
        info = client.info_bucket(workload.VOLUME, workload.FS_BUCKET)
        entries_again = _list_tree(client)
    if entries_again != entries:
        raise RuntimeError("the FSO bucket changed while the run was quiet")
    if drained is None:
        return FsObservation(tuple(entries), None, quota_skipped="no purge in this flow: "
                             "deleted subtrees keep their usage (the audit counts them)")
    usage = Usage(info.used_bytes, info.used_namespace) if drained else None
    return FsObservation(tuple(entries), usage)


def _purge_drained(cluster: om_cluster.Cluster) -> bool | None:
    """Whether the leader saw no deleted directory waiting for its purge (twice in a row)
    within ``PURGE_WAIT_S``; None when its flow has no purge."""
    deadline = time.monotonic() + PURGE_WAIT_S
    zeros = 0
    while time.monotonic() < deadline:
        leaders = [i for i in cluster.node_infos() if i.role == "LEADER"]
        if leaders:
            pending = leaders[0].metrics.get(PURGE_METRIC)
            if pending is None:
                return None
            zeros = zeros + 1 if pending == 0 else 0
            if zeros == 2:
                return True
        time.sleep(0.5)
    return False


def _list_tree(client: OMClient) -> list[FsEntry]:
    """Every entry of the FSO bucket (ListStatus, recursive, paged), in tree order."""
    entries: list[FsEntry] = []
    start = ""
    while True:
        response = client.call_raw(build.list_status(workload.VOLUME, workload.FS_BUCKET,
                                                     recursive=True, start_key=start,
                                                     num_entries=1000))
        if response.status != om_pb2.OK:
            raise RuntimeError(f"ListStatus: {om_pb2.Status.Name(response.status)} "
                               f"{response.message}")
        for status in response.list_status.statuses:
            if status.is_directory:
                entries.append(FsEntry(status.path, True, 0, status.directory.object_id))
            else:
                key = status.key_info
                entries.append(FsEntry(status.path, False,
                                       key.data_size * max(1, key.replication_factor),
                                       key.object_id))
        if not response.list_status.truncated:
            return entries
        start = response.list_status.statuses[-1].path


def _audits(cluster: om_cluster.Cluster) -> dict[str, list[tuple[str, str, str]] | str]:
    """Each node's audit of its own store (AuditReplica): its findings, or why none."""
    found: dict[str, list[tuple[str, str, str]] | str] = {}
    request = om_pb2.OMRequest(cmd_type=om_pb2.AuditReplica,
                               audit_replica=om_pb2.AuditReplicaRequest(details_max=100))
    policy = RetryPolicy(deadline_s=10, attempt_timeout_s=AUDIT_ANSWER_S)
    for address in cluster.addresses:
        with OMClient([address], policy=policy, tls=cluster.client_tls()) as client:
            try:
                response = client.call_raw(request)
            except OMConnectionError as error:
                found[address] = f"did not answer: {error}"
                continue
        if response.status != om_pb2.OK:
            found[address] = f"{om_pb2.Status.Name(response.status)} {response.message}"
            continue
        answer = response.audit_replica
        problems = [(v.category, v.subject, v.detail) for v in answer.violations]
        untold = sum(answer.counts.values()) - len(problems)
        if untold > 0:
            problems.append(("more", address, f"{untold} more violations in the node's log"))
        found[answer.node_id or address] = problems
    return found


def _acked_ids(history: History) -> list[tuple[str, int]]:
    return [(ack.source, ack.object_id) for ack in checkers.id_acks_from_history(history)]


def _write(out: Path, config: ChaosConfig, history: History, nemesis: Nemesis,
           workers: list[workload.Worker], recorder: workload.Recorder,
           violations: list[Violation], elapsed_s: float,
           observed: dict[str, Any], fs: FsObservation | None = None) -> dict[str, Any]:
    with (out / "history.jsonl").open("w") as lines:  # line by line: a long run's is large
        for op in history:
            lines.write(op.to_json() + "\n")
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
        "workloads": _workloads(config.workload),
        "ops": {o.value: outcomes.count(o) for o in Outcome},
        "ops_by_function": _by_function(history),
        "retries": sum(op.retries for op in history),
        "duplicate_sends": recorder.duplicate_sends,
        "client_resends": sum(w.retries for w in workers),
        **observed,
        "violations": [asdict(v) for v in violations],
        "history": str(out / "history.jsonl"),
        "unsafe_disable_retry_cache": config.unsafe_disable_retry_cache,
    }
    if fs is not None:
        result["fso"] = {
            "directories": sum(e.is_directory for e in fs.entries),
            "files": sum(not e.is_directory for e in fs.entries),
            "used_namespace": fs.usage.used_namespace if fs.usage else None,
            "used_bytes": fs.usage.used_bytes if fs.usage else None,
            "quota_check": fs.quota_skipped or ("done" if fs.usage else "purge never drained"),
            "audited_nodes": sorted(fs.audits),
        }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _workloads(spec: workload.WorkloadConfig) -> list[str]:
    counts = {"register": spec.register_workers, "add": spec.add_workers,
              "fso": spec.fs_workers, "mpu": spec.mpu_workers,
              "snap": spec.snap_workers}
    return [name for name, workers in counts.items() if workers > 0]


def _mpu_summary(mpu: MpuObservation | None) -> dict[str, Any]:
    if mpu is None:
        return {}
    return {"mpu": {"keys": len(mpu.keys), "open_uploads": len(mpu.open_uploads)}}


def _by_function(history: History) -> dict[str, dict[str, int]]:
    """Outcome counts per function, e.g. {"rename": {"ok": 40, "fail": 3, "info": 1}}."""
    counts: dict[str, dict[str, int]] = {}
    for op in history:
        per = counts.setdefault(op.f.value, {o.value: 0 for o in Outcome})
        per[op.outcome.value] += 1
    return dict(sorted(counts.items()))


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
    raft += PURGE_SETTINGS
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
        fs = _observe_fs(cluster) if config.workload.fs_workers else None
        mpu = _observe_mpu(cluster) if config.workload.mpu_workers else None
        snapshots = _observe_snapshots(cluster) if config.workload.snap_workers else None
        cluster.wait_converged(timeout_s=60)
        if fs is not None:
            fs = dataclasses.replace(fs, audits=_audits(cluster), nodes=len(cluster.addresses))
        verified, unverified = _verify(cluster)
        unverified += _quiesce(cluster)
    finally:
        om_cluster.down(cluster)
        if links is not None:
            links.stop()
    history = recorder.history()
    spec = config.workload
    violations = checkers.run_all(history,
                                  final_state=final if spec.register_workers else None,
                                  observed_usage=usage if spec.add_workers else None,
                                  digests=cluster.stopped_digests(),
                                  object_ids=ids + _acked_ids(history))
    violations += fs_checkers.check_fs(history, fs)
    violations += mpu_checkers.check_mpu(history, mpu)
    violations += snap_checkers.check_snapshots(history, snapshots)
    samples = sampler.snapshot()
    violations += unverified + resources.check(samples, config.resource_bounds)
    violations += [Violation("nemesis", "fault_failed", failure) for failure in nemesis.failed]
    (config.out / "resources.jsonl").write_text("".join(
        json.dumps(asdict(sample)) + "\n" for sample in samples))
    observed = {"resources": resources.summarize(samples, config.resource_bounds),
                VERIFY: verified, "node_logs": node_logs.summarize(cluster.directory)}
    return _write(config.out, config, history, nemesis, workers, recorder, violations,
                  time.monotonic() - started, {**observed, **_mpu_summary(mpu),
                   **({"snapshots_listed": len(snapshots)} if snapshots is not None else {})}, fs)
