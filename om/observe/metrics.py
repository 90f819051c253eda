"""One node's metrics: one prometheus_client registry, served at ``/prom`` and read by
``om admin metrics``, so no quantity is ever counted twice.

Three kinds of series live in the registry:

- **event metrics** the request path updates as things happen: requests by type
  and status, latency, lock wait, batch size and bytes, replicate and apply time
  (``RequestMetrics``, ``BatchMetrics``);
- **state gauges** read from the node when scraped (role, term, commit and
  applied index, writes in flight, retry-cache size, ...): a ``StateCollector``
  calls the node's ``read`` function, so a scrape never sees a copy gone stale;
- **Ozone's names**, derived at scrape time from the same counts:
  ``om_metrics_num_key_commits`` is the sum of ``om_requests_total{type="CommitKey"}``
  over every status, never a second counter. Ozone's names (Hadoop metrics2:
  record + metric, CamelCase split, lower-cased) carry no ``_total`` suffix, and
  prometheus_client appends one to every counter, so they are exported as
  gauges; ``rate()`` works on them alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from om.observe.histogram import LATENCY_BUCKETS_S, CountingHistogram, Snapshot

BATCH_REQUEST_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
BATCH_BYTE_BUCKETS = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)

# Ozone's OMMetrics counters: (Ozone name, request type, failures only?).
OZONE_REQUEST_COUNTERS: tuple[tuple[str, str, bool], ...] = (
    ("om_metrics_num_volume_creates", "CreateVolume", False),
    ("om_metrics_num_volume_create_fails", "CreateVolume", True),
    ("om_metrics_num_volume_updates", "SetVolumeProperty", False),
    ("om_metrics_num_volume_update_fails", "SetVolumeProperty", True),
    ("om_metrics_num_volume_infos", "InfoVolume", False),
    ("om_metrics_num_volume_info_fails", "InfoVolume", True),
    ("om_metrics_num_volume_deletes", "DeleteVolume", False),
    ("om_metrics_num_volume_delete_fails", "DeleteVolume", True),
    ("om_metrics_num_volume_lists", "ListVolume", False),
    ("om_metrics_num_volume_list_fails", "ListVolume", True),
    ("om_metrics_num_bucket_creates", "CreateBucket", False),
    ("om_metrics_num_bucket_create_fails", "CreateBucket", True),
    ("om_metrics_num_bucket_infos", "InfoBucket", False),
    ("om_metrics_num_bucket_info_fails", "InfoBucket", True),
    ("om_metrics_num_bucket_updates", "SetBucketProperty", False),
    ("om_metrics_num_bucket_update_fails", "SetBucketProperty", True),
    ("om_metrics_num_bucket_deletes", "DeleteBucket", False),
    ("om_metrics_num_bucket_delete_fails", "DeleteBucket", True),
    ("om_metrics_num_bucket_lists", "ListBuckets", False),
    ("om_metrics_num_bucket_list_fails", "ListBuckets", True),
    ("om_metrics_num_key_allocate", "CreateKey", False),
    ("om_metrics_num_key_allocate_fails", "CreateKey", True),
    ("om_metrics_num_key_lookup", "LookupKey", False),
    ("om_metrics_num_key_lookup_fails", "LookupKey", True),
    ("om_metrics_num_key_renames", "RenameKey", False),
    ("om_metrics_num_key_rename_fails", "RenameKey", True),
    ("om_metrics_num_key_deletes", "DeleteKey", False),
    ("om_metrics_num_key_delete_fails", "DeleteKey", True),
    ("om_metrics_num_key_lists", "ListKeys", False),
    ("om_metrics_num_key_list_fails", "ListKeys", True),
    ("om_metrics_num_key_commits", "CommitKey", False),
    ("om_metrics_num_key_commit_fails", "CommitKey", True),
)
OK_STATUS = "OK"


@dataclass(frozen=True)
class StateGauge:
    """A value read from the node at scrape time: its name in ``read``'s result,
    its exported name and its help."""

    key: str
    name: str
    help: str
    counter: bool = False   # a count that only grows (exported with ``_total``)


NODE_STATE: tuple[StateGauge, ...] = (
    StateGauge("leader", "omha_metrics_ozone_manager_ha_leader_state",
               "Ozone's OMHAMetrics: 1 on the leader, 0 elsewhere"),
    StateGauge("ready", "om_leader_ready",
               "1 on a leader that committed its term's barrier and serves"),
    StateGauge("term", "om_raft_term", "The Raft term this node is in"),
    StateGauge("commit_index", "om_raft_commit_index", "The highest log position known "
               "committed"),
    StateGauge("applied_index", "om_applied_index", "The highest log position applied to "
               "RocksDB"),
    StateGauge("managed_index", "om_managed_index", "The highest managed index applied"),
    StateGauge("writes_in_flight", "om_writes_in_flight", "Writes admitted, not yet answered"),
    StateGauge("leader_changes", "om_leader_changes",
               "Times the leader this node knows of changed", counter=True),
    StateGauge("merged_entries_appended", "om_raft_merged_entries_appended",
               "Merged entries (tag M) this node's Raft process appended as leader "
               "(reported about once a second); slices / entries is the merge rate",
               counter=True),
    StateGauge("merged_slices_appended", "om_raft_merged_slices_appended",
               "Sub-batches (slices) those merged entries held", counter=True),
    StateGauge("retry_cache_hits", "om_retry_cache_hits",
               "Retries answered from the retry cache", counter=True),
    StateGauge("retry_cache_entries", "om_retry_cache_entries",
               "Replies the retry cache holds in memory"),
    StateGauge("retry_cache_bytes", "om_retry_cache_bytes",
               "Estimated bytes of the replies the retry caches hold in memory (both flows' "
               "on a switchable node; [limits] retry_cache_memory_entries bounds them)"),
    StateGauge("lock_waiters", "om_lock_waiters", "Writes waiting for a lock now"),
    StateGauge("purge_pending_directories", "om_purge_pending_directories",
               "Deleted directories of file-system buckets waiting for their purge, as "
               "this node's purger last counted them (each interval, up to 10,000)"),
    StateGauge("purge_rows_scanned", "om_purge_rows_scanned",
               "Rows of deletedTable, open keys and files and uploads the purger read to "
               "find rows due", counter=True),
    StateGauge("purge_steps", "om_purge_steps", "Purge steps this leader applied",
               counter=True),
    StateGauge("purge_entries", "om_purge_entries",
               "Directories and files these purge steps removed", counter=True),
    StateGauge("purge_deleted_keys", "om_purge_deleted_keys",
               "deletedTable rows this leader purged after their retention", counter=True),
    StateGauge("purge_expired_open_keys", "om_purge_expired_open_keys",
               "Open keys and files never committed this leader removed after their "
               "expiry", counter=True),
    StateGauge("purge_expired_multipart_uploads", "om_purge_expired_multipart_uploads",
               "Multipart uploads never completed this leader aborted after their expiry",
               counter=True),
    StateGauge("snapshot_checkpoints_taken", "om_snapshot_checkpoints_taken",
               "OM snapshot checkpoints this node took where a create applied", counter=True),
    StateGauge("snapshot_checkpoints_freed", "om_snapshot_checkpoints_freed",
               "OM snapshot checkpoints this node freed where a delete applied", counter=True),
    StateGauge("snapshot_checkpoint_seconds", "om_snapshot_checkpoint_last_seconds",
               "Time the last OM snapshot checkpoint took on the apply path (apply waits)"),
    StateGauge("store_memtable_bytes", "om_store_memtable_bytes",
               "RocksDB memtables of this node's store ([limits] store_memtable_bytes)"),
    StateGauge("store_block_cache_bytes", "om_store_block_cache_bytes",
               "RocksDB block cache of this node's store ([limits] store_block_cache_bytes)"),
    StateGauge("checkpoint_cache_bytes", "om_checkpoint_cache_bytes",
               "RocksDB memory of the checkpoints this node reads (OM snapshots): their "
               "shared block cache and memtables, 64 MiB each at most"),
    StateGauge("digest_leaf_cache_bytes", "om_digest_leaf_cache_bytes",
               "The digests' leaf cache: 2^leaf_bits x 40 bytes a table at most"),
    StateGauge("double_buffer_flushes", "om_double_buffer_flushes",
               "The old flow's double-buffer flushes", counter=True),
    StateGauge("double_buffer_transactions", "om_double_buffer_transactions",
               "Transactions the old flow's double buffer flushed", counter=True),
    StateGauge("write_cache_rows", "om_write_cache_rows",
               "Rows in the old flow's table cache, not yet flushed"),
)


class RequestMetrics(Collector):
    """What the request template counts, per request answered.

    The counts are plain integers the event loop increments (no lock: one thread
    writes them, and a scrape reads a consistent-enough snapshot); ``collect``
    exports them as ``om_requests_total`` and under Ozone's names."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.linearizable_reads = 0
        self.internal_errors = 0
        # per request type, counted in plain lists and turned into a histogram at
        # scrape: prometheus_client's Histogram takes a lock and walks its buckets on
        # every observe (~4 % of the leader's CPU at full load)
        self._latencies: dict[str, CountingHistogram] = {}
        self.lock_wait = CountingHistogram()
        registry.register(self)

    def answered(self, op: str, status: str, seconds: float) -> None:
        """Counts one answered request of type ``op`` and its latency."""
        key = (op, status)
        self.counts[key] = self.counts.get(key, 0) + 1
        latency = self._latencies.get(op)
        if latency is None:
            latency = self._latencies[op] = CountingHistogram()
        latency.observe(seconds)

    def internal_error(self) -> None:
        """Counts one request answered INTERNAL_ERROR: a bug, never a client's mistake."""
        self.internal_errors += 1

    def by_type(self) -> dict[str, tuple[int, int]]:
        """(answered, failed) per request type."""
        totals: dict[str, tuple[int, int]] = {}
        for (op, status), count in list(self.counts.items()):
            answered, failed = totals.get(op, (0, 0))
            totals[op] = (answered + count, failed + (count if status != OK_STATUS else 0))
        return totals

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily("om_requests", "Client requests answered, by type "
                                       "and status", labels=("type", "status"))
        for (op, status), count in sorted(list(self.counts.items())):
            requests.add_metric((op, status), count)
        yield requests
        yield CounterMetricFamily("om_linearizable_reads", "Reads answered after a quorum "
                                  "confirmed this leader", value=self.linearizable_reads)
        yield CounterMetricFamily("om_internal_errors", "Requests answered INTERNAL_ERROR: "
                                  "each is a bug (its traceback is in the log); a client's "
                                  "mistake gets another status", value=self.internal_errors)
        latency = HistogramMetricFamily("om_request_duration_seconds", "Time from a request's "
                                        "arrival to its answer, by type", labels=("type",))
        for op, histogram in sorted(list(self._latencies.items())):
            buckets, total = cumulative_buckets(histogram.snapshot())
            latency.add_metric((op,), buckets, total)
        yield latency
        buckets, total = cumulative_buckets(self.lock_wait.snapshot())
        yield HistogramMetricFamily("om_lock_wait_seconds", "Time a write waited for its locks",
                                    buckets=buckets, sum_value=total)
        yield from self._ozone_names()

    def _ozone_names(self) -> Iterable[Metric]:
        totals = self.by_type()
        for name, op, failures_only in OZONE_REQUEST_COUNTERS:
            answered, failed = totals.get(op, (0, 0))
            yield GaugeMetricFamily(name, f"Ozone's OMMetrics: {op} requests"
                                    + (" that failed" if failures_only else ""),
                                    value=failed if failures_only else answered)
        protocol = GaugeMetricFamily("om_client_protocol_counter",
                                     "Ozone's client protocol counter: requests by type",
                                     labels=("type",))
        for op, (answered, _) in sorted(totals.items()):
            protocol.add_metric((op,), answered)
        yield protocol
        yield GaugeMetricFamily("om_metrics_num_linearizable_read",
                                "Ozone's OMMetrics: linearizable reads",
                                value=self.linearizable_reads)


class BatchMetrics:
    """What the batch pipeline counts, per replicated batch."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Histogram("om_batch_requests", "Writes per replicated batch",
                                  buckets=BATCH_REQUEST_BUCKETS, registry=registry)
        self.bytes = Histogram("om_batch_bytes", "Bytes per replicated batch",
                               buckets=BATCH_BYTE_BUCKETS, registry=registry)
        self.replicate = Histogram(
            "om_replicate_duration_seconds",
            "Time from sealing a batch to its commit by a quorum (journal syncs included)",
            buckets=LATENCY_BUCKETS_S, registry=registry)
        self.apply = Histogram("om_apply_duration_seconds",
                               "Time to apply one committed batch to RocksDB",
                               buckets=LATENCY_BUCKETS_S, registry=registry)
        self.in_flight = Gauge("om_batches_in_flight", "Batches sealed and not yet committed",
                               registry=registry)

    def replicated(self, requests: int, size: int, replicate_s: float, apply_s: float) -> None:
        """Records one settled batch."""
        assert requests >= 0
        assert size > 0
        self.requests.observe(requests)
        self.bytes.observe(size)
        self.replicate.observe(max(replicate_s, 0.0))
        self.apply.observe(max(apply_s, 0.0))

    def totals(self) -> tuple[int, int]:
        """(batches, writes) so far: the requests histogram's count and sum."""
        samples = {s.name: s.value for m in self.requests.collect() for s in m.samples}
        return int(samples["om_batch_requests_count"]), int(samples["om_batch_requests_sum"])


class StateCollector(Collector):
    """Gauges read from the node when scraped."""

    def __init__(self, gauges: tuple[StateGauge, ...],
                 read: Callable[[], Mapping[str, float]]) -> None:
        self._gauges = gauges
        self._read = read

    def collect(self) -> Iterable[Metric]:
        values = self._read()
        for gauge in self._gauges:
            if gauge.key not in values:
                continue
            family = CounterMetricFamily if gauge.counter else GaugeMetricFamily
            yield family(gauge.name, gauge.help, value=values[gauge.key])


def cumulative_buckets(snapshot: Snapshot, bounds: tuple[float, ...] = LATENCY_BUCKETS_S,
                       ) -> tuple[list[tuple[str, float]], float]:
    """A counted histogram as Prometheus wants it: cumulative ``(le, count)`` buckets
    ending in +Inf, and the sum."""
    counts, total = snapshot
    cumulative, buckets = 0, []
    for bound, count in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        cumulative += count
        buckets.append((bound, float(cumulative)))
    return buckets, total


class HistogramState(Collector):
    """A histogram counted elsewhere (another process) and read when scraped."""

    def __init__(self, name: str, help_text: str, bounds: tuple[float, ...],
                 read: Callable[[], Snapshot | None]) -> None:
        self._name = name
        self._help = help_text
        self._bounds = bounds
        self._read = read

    def collect(self) -> Iterable[Metric]:
        snapshot = self._read()
        if snapshot is None:
            return
        assert len(snapshot[0]) == len(self._bounds) + 1
        buckets, total = cumulative_buckets(snapshot, self._bounds)
        yield HistogramMetricFamily(self._name, self._help, buckets=buckets, sum_value=total)


class NodeMetrics:
    """The registry of one node and the metrics the request path updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics(self.registry)
        self.batches = BatchMetrics(self.registry)

    def add_state(self, gauges: tuple[StateGauge, ...],
                  read: Callable[[], Mapping[str, float]]) -> None:
        """Registers gauges the node computes when scraped."""
        self.registry.register(StateCollector(gauges, read))

    def add_histogram(self, name: str, help_text: str,
                      read: Callable[[], Snapshot | None]) -> None:
        """Registers a histogram another part (the Raft process) counts."""
        self.registry.register(HistogramState(name, help_text, LATENCY_BUCKETS_S, read))

    def flat(self) -> dict[str, float]:
        """Every sample by name and labels (``name{label="v"}``), histogram buckets left
        out: what ``om admin metrics`` prints."""
        values: dict[str, float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name.endswith(("_bucket", "_created")):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return values
