"""One node's metrics registry: Ozone's names derive from the same counts, the text
exposition parses, and ``flat`` (what ``om admin metrics`` prints) matches it."""

from __future__ import annotations

from prometheus_client import generate_latest

from om.observe.histogram import CountingHistogram, Snapshot
from om.observe.metrics import OZONE_REQUEST_COUNTERS, HistogramState, NodeMetrics, StateGauge
from tests.prom_text import samples


def _samples(metrics: NodeMetrics) -> dict[str, float]:
    return samples(generate_latest(metrics.registry).decode())


def test_ozone_names_are_derived_from_the_request_counts() -> None:
    metrics = NodeMetrics()
    for status in ("OK", "OK", "KEY_NOT_FOUND"):
        metrics.requests.answered("CommitKey", status, 0.003)
    metrics.requests.answered("LookupKey", "OK", 0.001)
    metrics.requests.linearizable_reads += 1
    samples = _samples(metrics)
    assert samples['om_requests_total{status="OK",type="CommitKey"}'] == 2
    assert samples['om_requests_total{status="KEY_NOT_FOUND",type="CommitKey"}'] == 1
    assert samples["om_metrics_num_key_commits"] == 3
    assert samples["om_metrics_num_key_commit_fails"] == 1
    assert samples["om_metrics_num_key_lookup"] == 1
    assert samples["om_metrics_num_key_lookup_fails"] == 0
    assert samples['om_client_protocol_counter{type="CommitKey"}'] == 3
    assert samples["om_metrics_num_linearizable_read"] == 1
    assert samples["om_linearizable_reads_total"] == 1
    assert samples['om_request_duration_seconds_count{type="CommitKey"}'] == 3
    assert abs(samples['om_request_duration_seconds_sum{type="CommitKey"}'] - 0.009) < 1e-9
    assert all(name in samples for name, _, _ in OZONE_REQUEST_COUNTERS)


def test_state_gauges_are_read_at_scrape_time() -> None:
    metrics = NodeMetrics()
    state = {"term": 3.0}
    metrics.add_state((StateGauge("term", "om_raft_term", "term"),
                       StateGauge("absent", "om_absent", "not reported")), lambda: state)
    assert _samples(metrics)["om_raft_term"] == 3
    state["term"] = 4.0
    samples = _samples(metrics)
    assert samples["om_raft_term"] == 4
    assert "om_absent" not in samples


def test_counter_state_is_exported_as_a_counter() -> None:
    metrics = NodeMetrics()
    metrics.add_state((StateGauge("changes", "om_leader_changes", "changes", counter=True),),
                      lambda: {"changes": 2.0})
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE om_leader_changes_total counter" in text
    assert _samples(metrics)["om_leader_changes_total"] == 2


def test_batches_and_flat_view_agree_with_the_exposition() -> None:
    metrics = NodeMetrics()
    metrics.batches.replicated(requests=7, size=900, replicate_s=0.004, apply_s=0.001)
    metrics.batches.replicated(requests=0, size=40, replicate_s=0.002, apply_s=0.0005)
    flat = metrics.flat()
    samples = _samples(metrics)
    assert flat["om_batch_requests_count"] == 2
    assert flat["om_batch_requests_sum"] == 7
    assert flat["om_batch_bytes_sum"] == 940
    assert not any(name.endswith("_bucket") for name in flat)
    for name, value in flat.items():
        assert samples[name] == value


def test_a_histogram_counted_elsewhere_is_exported_cumulatively() -> None:
    counted = CountingHistogram((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.005, 0.5):
        counted.observe(seconds)
    assert counted.snapshot() == ((2, 1, 1), 0.5065)
    metrics = NodeMetrics()
    reported: list[Snapshot | None] = [None]
    metrics.registry.register(HistogramState("om_sync_seconds", "syncs", (0.001, 0.01),
                                             lambda: reported[0]))
    assert "om_sync_seconds_count" not in _samples(metrics)   # nothing reported yet
    reported[0] = counted.snapshot()
    samples = _samples(metrics)
    assert samples['om_sync_seconds_bucket{le="0.001"}'] == 2
    assert samples['om_sync_seconds_bucket{le="0.01"}'] == 3
    assert samples['om_sync_seconds_bucket{le="+Inf"}'] == 4
    assert samples["om_sync_seconds_count"] == 4
    assert abs(samples["om_sync_seconds_sum"] - 0.5065) < 1e-12
