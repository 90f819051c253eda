"""The auditor on real databases: each violation seeded is reported, nothing else is."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from om.integrity import auditor, scan
from om.integrity.auditor import AuditConfig, NodeFacts, Violation
from om.protocol import om_pb2
from om.schema import tables
from om.schema.ids import object_id_for
from om.schema.read_view import Parsed, parse_row
from om.schema.tables import TableId
from om.statemachine.store import Store
from tests.handler_harness import OLD, Harness
from tests.integrity.populate import BUCKETS, VOLUME, populate

CONFIG = AuditConfig(retry_expiry_ms=1000, retry_grace_ms=500)
CLIENT = "client-1"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "db")
    yield opened
    opened.close()


@pytest.fixture
def harness(store: Store) -> Harness:
    """A populated database with one fresh retry-cache reply: clean."""
    populated = populate(store, keys=12)
    apply_reply(populated, call_id=1)
    return populated


def apply_reply(harness: Harness, call_id: int) -> None:
    """Applies a batch carrying one stored reply, stamped with the harness clock."""
    now = harness.clock.now_ms
    harness.position += 1
    batch = om_pb2.PersistDbBatch(
        batch_id=harness.position, timestamp_ms=now, managed_index=harness.managed_index,
        term=1, replies=[om_pb2.ClientRequestReply(client_id=CLIENT, call_id=call_id,
                                                   timestamp_ms=now, response=b"ok")])
    assert harness.state_machine.apply(harness.position, batch).applied


def put(store: Store, table: TableId, key: bytes, value: bytes) -> None:
    batch = store.new_batch()
    store.batch_put(batch, table, key, value)
    store.write(batch)


def delete(store: Store, table: TableId, key: bytes) -> None:
    batch = store.new_batch()
    store.batch_delete(batch, table, key)
    store.write(batch)


def only(category: str) -> dict[str, int]:
    return {name: int(name == category) for name in auditor.STORE_CATEGORIES}


# --------------------------------------------------------------- seeding ---

def seed_key_without_bucket(h: Harness) -> tuple[TableId, bytes]:
    key = tables.key_key(VOLUME, "nobucket", "orphan")
    info = om_pb2.KeyInfo(volume_name=VOLUME, bucket_name="nobucket", key_name="orphan",
                          data_size=1, replication_factor=3, object_id=object_id_for(1),
                          update_id=1)
    put(h.store, om_pb2.KEY, key, info.SerializeToString())
    return om_pb2.KEY, key


def seed_bucket_without_volume(h: Harness) -> tuple[TableId, bytes]:
    key = tables.bucket_key("novolume", "bkt")
    info = om_pb2.BucketInfo(volume_name="novolume", bucket_name="bkt",
                             object_id=object_id_for(1), update_id=1)
    put(h.store, om_pb2.BUCKET, key, info.SerializeToString())
    return om_pb2.BUCKET, key


def seed_bucket_usage(h: Harness) -> tuple[TableId, bytes]:
    row = h.bucket_row(VOLUME, BUCKETS[0])
    assert row is not None
    row.used_bytes += 3                     # e.g. a delta applied twice
    key = tables.bucket_key(VOLUME, BUCKETS[0])
    put(h.store, om_pb2.BUCKET, key, row.SerializeToString())
    return om_pb2.BUCKET, key


def seed_volume_namespace(h: Harness) -> tuple[TableId, bytes]:
    row = h.volume_row(VOLUME)
    assert row is not None
    row.used_namespace += 1
    put(h.store, om_pb2.VOLUME, tables.volume_key(VOLUME), row.SerializeToString())
    return om_pb2.VOLUME, tables.volume_key(VOLUME)


def seed_update_id_above(h: Harness) -> tuple[TableId, bytes]:
    row = h.key_row(VOLUME, BUCKETS[0], "key002")
    assert row is not None
    row.update_id = h.store.transaction_info().managed_index + 5
    key = tables.key_key(VOLUME, BUCKETS[0], "key002")
    put(h.store, om_pb2.KEY, key, row.SerializeToString())
    return om_pb2.KEY, key


def seed_object_id_above(h: Harness) -> tuple[TableId, bytes]:
    session = h.open_key(VOLUME, BUCKETS[1], "open-late").client_session_id
    key = tables.open_key_key(VOLUME, BUCKETS[1], "open-late", session)
    row = h.open_key_row(VOLUME, BUCKETS[1], "open-late", session)
    assert row is not None
    row.object_id = object_id_for(h.store.transaction_info().managed_index + 1)
    put(h.store, om_pb2.OPEN_KEY, key, row.SerializeToString())
    return om_pb2.OPEN_KEY, key


def seed_retry_not_purged(h: Harness) -> tuple[TableId, bytes]:
    h.clock.advance(CONFIG.retry_expiry_ms + CONFIG.retry_grace_ms + 1)
    apply_reply(h, call_id=2)                # replicated time moves on; no sweep ran
    return om_pb2.CLIENT_REQUEST_REPLY, tables.reply_key(CLIENT, 1)


def seed_retry_index_orphan(h: Harness) -> tuple[TableId, bytes]:
    reply = tables.reply_key(CLIENT, 1)
    index = tables.expiry_key(h.clock.now_ms, CLIENT, 1)
    assert h.store.get(om_pb2.CLIENT_REQUEST_EXPIRY, index) is not None
    delete(h.store, om_pb2.CLIENT_REQUEST_EXPIRY, index)
    return om_pb2.CLIENT_REQUEST_REPLY, reply


def seed_malformed_row(h: Harness) -> tuple[TableId, bytes]:
    put(h.store, om_pb2.VOLUME, b"/broken", b"\xff\xff\xff")
    return om_pb2.VOLUME, b"/broken"


SEEDS: dict[str, Callable[[Harness], tuple[TableId, bytes]]] = {
    "key_without_bucket": seed_key_without_bucket,
    "bucket_without_volume": seed_bucket_without_volume,
    "bucket_usage": seed_bucket_usage,
    "volume_namespace": seed_volume_namespace,
    "id_above_managed_index/update": seed_update_id_above,
    "id_above_managed_index/object": seed_object_id_above,
    "retry_not_purged": seed_retry_not_purged,
    "retry_index_orphan": seed_retry_index_orphan,
    "row_malformed": seed_malformed_row,
}


def test_every_category_has_a_seed() -> None:
    assert {name.split("/")[0] for name in SEEDS} == set(auditor.STORE_CATEGORIES)


def test_a_clean_database_is_reported_clean(harness: Harness) -> None:
    assert harness.store.count(om_pb2.CLIENT_REQUEST_REPLY) == 1
    assert harness.store.count(om_pb2.DELETED) == 2      # key000 deleted, key001 replaced
    report = auditor.audit(harness.store, CONFIG)
    assert report.clean, report.violations
    assert report.counts() == dict.fromkeys(auditor.STORE_CATEGORIES, 0)
    assert report.candidates == 0
    assert report.rows_checked == sum(harness.store.count(t) for t in tables.TABLE_NAMES)


def test_an_old_flow_database_is_clean_too(store: Store) -> None:
    harness = populate(store, keys=12, flow=OLD)
    harness.close()
    report = auditor.audit(store, CONFIG)
    assert report.clean, report.violations
    assert report.rows_checked > 12


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_a_seeded_violation_is_reported(harness: Harness, seed: str) -> None:
    table, key = SEEDS[seed](harness)
    category = seed.split("/")[0]
    report = auditor.audit(harness.store, CONFIG)
    assert report.counts() == only(category), report.violations
    (violation,) = report.violations
    assert (violation.table, violation.key) == (table, key)
    assert violation.subject == f"{tables.TABLE_NAMES[table]} {key.decode()}"
    assert violation.detail
    assert report.by_category() == {category: [violation]}


def test_the_details_say_what_is_off(harness: Harness) -> None:
    seed_bucket_usage(harness)
    (violation,) = auditor.audit(harness.store, CONFIG).violations
    used = harness.usage(VOLUME, BUCKETS[0])[0]
    assert f"used_bytes {used}" in violation.detail
    assert f"sum to {used - 3} replicated bytes" in violation.detail


def test_the_auditor_reads_through_a_throttled_view(harness: Harness) -> None:
    limit = scan.RateLimit(rows_per_s=1e9)
    report = auditor.audit(scan.ThrottledView(harness.store, limit), CONFIG)
    assert report.clean
    assert limit.rows >= report.rows_checked


def test_violations_are_logged_in_full_with_counts(harness: Harness,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    seed_volume_namespace(harness)
    with caplog.at_level(logging.INFO, logger="om.integrity.auditor"):
        auditor.log_report(auditor.audit(harness.store, CONFIG))
    assert "audit violation volume_namespace: volumeTable /vol: used_namespace 3" in caplog.text
    assert "volume_namespace=1" in caplog.text


def test_a_flood_of_violations_is_logged_bounded_with_every_count(
        caplog: pytest.LogCaptureFixture) -> None:
    many = tuple(auditor.Violation(auditor.RETRY_NOT_PURGED, f"clientRequestReplyTable c#{n}",
                                   "old") for n in range(1000))
    report = auditor.AuditReport((*many, auditor.Violation(auditor.VOLUME_NAMESPACE,
                                                           "volumeTable /vol", "off")))
    with caplog.at_level(logging.INFO, logger="om.integrity.auditor"):
        auditor.log_report(report)
    lines = caplog.text.splitlines()
    assert len(lines) == auditor.LOG_PER_CATEGORY_MAX + 3
    assert "retry_not_purged: 980 more not logged" in caplog.text
    assert "volumeTable /vol: off" in caplog.text
    assert "retry_not_purged=1000" in caplog.text


# ---------------------------------------------------------- changes in flight ---

class TornView:
    """A live scan that read some tables before a commit and the others after it."""

    def __init__(self, before: Store, after: Store, tables_before: set[TableId]) -> None:
        self._before, self._after, self._tables_before = before, after, tables_before

    def _pick(self, table: TableId) -> Store:
        return self._before if table in self._tables_before else self._after

    def get(self, table: TableId, key: bytes) -> bytes | None:
        return self._pick(table).get(table, key)

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)

    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        return self._pick(table).scan(table, prefix, start_after, limit)


def test_a_commit_between_two_reads_is_not_a_violation(harness: Harness,
                                                       tmp_path: Path) -> None:
    checkpoint = tmp_path / "before"
    harness.store.checkpoint(checkpoint)
    harness.put_key(VOLUME, BUCKETS[0], "in-flight", data_size=7)
    before = Store(checkpoint)
    try:
        torn = TornView(before, harness.store, {om_pb2.BUCKET, om_pb2.TRANSACTION_INFO})
        candidates, _ = auditor.find_candidates(torn, CONFIG)
        assert {v.category for v in candidates} == {auditor.BUCKET_USAGE,
                                                    auditor.ID_ABOVE_MANAGED_INDEX}
        report = auditor.audit(torn, CONFIG, recheck_view=harness.store)
    finally:
        before.close()
    assert report.clean
    assert report.cleared == report.candidates == len(candidates)


def test_a_row_fixed_or_gone_by_the_recheck_is_cleared(harness: Harness) -> None:
    original = harness.store.get(om_pb2.BUCKET, tables.bucket_key(VOLUME, BUCKETS[0]))
    assert original is not None
    seed_bucket_usage(harness)
    _, orphan = seed_key_without_bucket(harness)
    candidates, _ = auditor.find_candidates(harness.store, CONFIG)
    assert len(candidates) == 2
    put(harness.store, om_pb2.BUCKET, tables.bucket_key(VOLUME, BUCKETS[0]), original)
    delete(harness.store, om_pb2.KEY, orphan)
    report = auditor.confirm(candidates, harness.store, CONFIG)
    assert report.clean
    assert (report.candidates, report.cleared) == (2, 2)


class MovingView:
    """The store, but a bucket's used bytes move on every read (a busy bucket)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._reads = 0

    def get(self, table: TableId, key: bytes) -> bytes | None:
        value = self._store.get(table, key)
        if table != om_pb2.BUCKET or value is None:
            return value
        self._reads += 1
        row = om_pb2.BucketInfo.FromString(value)
        row.used_bytes += self._reads
        return row.SerializeToString()

    def parsed(self, table: TableId, key: bytes,
               parse: Callable[[bytes], Parsed]) -> Parsed | None:
        return parse_row(self, table, key, parse)
    def scan(self, table: TableId, prefix: bytes, start_after: bytes | None,
             limit: int) -> list[tuple[bytes, bytes]]:
        return self._store.scan(table, prefix, start_after, limit)


def test_a_finding_that_keeps_moving_is_unsettled_not_reported(harness: Harness) -> None:
    bucket = tables.bucket_key(VOLUME, BUCKETS[0])
    candidate = Violation(auditor.BUCKET_USAGE, "bucketTable /vol/bkt1", "stale", om_pb2.BUCKET,
                          bucket)
    report = auditor.confirm([candidate], MovingView(harness.store), CONFIG)
    assert report.clean
    assert report.unsettled == 1


# ------------------------------------------------------------- the cluster ---

MEMBERS = frozenset({"om1", "om2", "om3"})
ROOTS = {"keyTable": b"k" * 32}


def node(node_id: str, applied: int = 100, commit: int = 100,
         members: frozenset[str] = MEMBERS, roots: dict[str, bytes] | None = None) -> NodeFacts:
    return NodeFacts(node_id, applied, commit, members, 90, ROOTS if roots is None else roots)


def test_a_healthy_cluster_has_no_findings() -> None:
    assert auditor.check_cluster([node("om1"), node("om2"), node("om3")], MEMBERS, 10) == []


def test_cluster_findings_name_the_node() -> None:
    found = auditor.check_cluster(
        [node("om1", applied=101), node("om2", applied=50),
         node("om3", members=frozenset({"om1", "om3"}), roots={"keyTable": b"x" * 32})],
        MEMBERS, lag_max=10)
    assert [(v.category, v.subject) for v in found] == [
        (auditor.APPLIED_AHEAD_OF_COMMIT, "node om1"),
        (auditor.FOLLOWER_LAG, "node om2"),
        (auditor.MEMBERSHIP_MISMATCH, "node om3"),
        (auditor.VERIFY_DISAGREES, "node om3"),
    ]


def test_verifications_with_no_majority_are_reported_per_table() -> None:
    pair = frozenset({"om1", "om2"})
    found = auditor.check_cluster(
        [node("om1", members=pair, roots={"keyTable": b"a" * 32}),
         node("om2", members=pair, roots={"keyTable": b"b" * 32})], pair, 10)
    assert [(v.category, v.subject) for v in found] == [(auditor.VERIFY_DISAGREES,
                                                         "table keyTable")]


def test_only_findings_of_both_runs_are_stable() -> None:
    first = auditor.check_cluster([node("om1", applied=50), node("om2", applied=60)],
                                  MEMBERS, 10)
    second = auditor.check_cluster([node("om1", applied=40), node("om2", applied=100)],
                                   MEMBERS, 10)
    assert [v.subject for v in auditor.stable(first, second)] == ["node om1"]
