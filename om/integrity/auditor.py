"""The auditor: report-only checks of what apply and the handlers promise.

In the spirit of BookKeeper's metadata scrutiny (BP-34): it never fixes
anything, it makes a noise, with enough detail to find the bug. Pure over the
``ReadView`` port: it reads, it never writes, and it imports no IO (pace it by
handing it a ``scan.ThrottledView``; run it on a checkpoint or a follower).

Invariants checked, per row of the store:

* every committed key's bucket exists, and every bucket's volume exists (open
  keys and deleted versions may outlive their bucket: DeleteBucket refuses
  only committed keys, and purging is not ours);
* a bucket's ``used_bytes`` is the sum of its keys' replicated sizes
  (``quota.replicated_size``: size times replication factor, as CommitKey and
  DeleteKey charge) plus those of the committed parts of its multipart uploads in
  progress, and its ``used_namespace`` the number of its keys; a
  volume's ``used_namespace`` is the number of its buckets;
* no object id (decoded back to its managed index, ``ids.object_id_for``)
  and no update id is above the managed index persisted in transaction info:
  a new leader continues above it, so a higher id could be handed out twice;
* no retry-cache reply is older than the replicated time (the last applied
  batch's timestamp) minus the expiry and a grace for the sweeper's period,
  and every reply has its expiry-index row and every index row its reply (a
  reply without one is never swept);
* every row parses and sits under the key its own fields name; a multipart upload's
  parts are listed once each, by ascending number in 1..10000, and the upload has its
  open row;
* each file-system bucket's tree (``fs_audit``): no orphan, no cycle, no name that
  is both a directory and a file, unique ids, usage equal to the tree.

Plus ``check_cluster`` over facts the wiring collects from every node:
applied <= commit, follower lag within a bound, Raft membership equal to the
configured one, and the last verification's roots agreeing.

A candidate is reported only once re-examined: ``confirm`` re-reads the row
and whatever the check involves (on the same view, or a later one) and
reports the violation only when two reads in a row give the same finding. A
row that is gone or now satisfies the check was a change in flight; a finding
that keeps moving is counted as unsettled, not reported. Read the transaction
info after the row on re-check, so a row applied meanwhile is never compared
with an older managed index.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from google.protobuf.message import DecodeError, Message

from om.executor.admin import flow_switch, upgrade
from om.executor.fso.fs import is_fso
from om.executor.quota import replicated_size
from om.integrity import fs_audit, vote
from om.protocol import om_pb2
from om.schema import tables
from om.schema.ids import IDS_PER_INDEX, OBJECT_ID_EPOCH
from om.schema.read_view import ReadView
from om.schema.tables import TableId

logger = logging.getLogger(__name__)

KEY_WITHOUT_BUCKET = "key_without_bucket"
BUCKET_WITHOUT_VOLUME = "bucket_without_volume"
BUCKET_USAGE = "bucket_usage"
VOLUME_NAMESPACE = "volume_namespace"
ID_ABOVE_MANAGED_INDEX = "id_above_managed_index"
RETRY_NOT_PURGED = "retry_not_purged"
RETRY_INDEX_ORPHAN = "retry_index_orphan"
ROW_MALFORMED = "row_malformed"
STORE_CATEGORIES = (KEY_WITHOUT_BUCKET, BUCKET_WITHOUT_VOLUME, BUCKET_USAGE, VOLUME_NAMESPACE,
                    ID_ABOVE_MANAGED_INDEX, RETRY_NOT_PURGED, RETRY_INDEX_ORPHAN, ROW_MALFORMED)
# the file-system buckets' tree (om/integrity/fs_audit.py): counted when found
FS_CATEGORIES = fs_audit.FS_CATEGORIES

APPLIED_AHEAD_OF_COMMIT = "applied_ahead_of_commit"
FOLLOWER_LAG = "follower_lag"
MEMBERSHIP_MISMATCH = "membership_mismatch"
VERIFY_DISAGREES = "verify_disagrees"
CLUSTER_CATEGORIES = (APPLIED_AHEAD_OF_COMMIT, FOLLOWER_LAG, MEMBERSHIP_MISMATCH,
                      VERIFY_DISAGREES)

PAGE_ROWS = 1000
# Violations a run logs in full, per category; the counts line covers the rest. A
# fault-free soak's audit logged 470,000 lines (unswept retry rows) and the logging
# held the server long enough for its Raft process to miss it and lose leadership.
LOG_PER_CATEGORY_MAX = 20
_OBJECT_ID_INDEX_SHIFT = IDS_PER_INDEX.bit_length() - 1


@dataclass(frozen=True)
class AuditConfig:
    """What the checks need beyond the store.

    ``retry_expiry_ms`` is the replicated expiry (``RetryCacheConfig.expiry_ms``);
    ``retry_grace_ms`` covers the sweeper's interval (30 s by default) and a
    backlog of more than one sweep's rows.
    """

    retry_expiry_ms: int = 600_000
    retry_grace_ms: int = 120_000
    rechecks: int = 3

    def __post_init__(self) -> None:
        assert self.retry_expiry_ms > 0
        assert self.retry_grace_ms >= 0
        assert self.rechecks >= 1


@dataclass(frozen=True)
class Violation:
    """One broken invariant, with everything needed to find it again."""

    category: str
    subject: str               # e.g. "bucketTable /vol/bucket", "node om2"
    detail: str
    table: TableId | None = None
    key: bytes | None = None


@dataclass(frozen=True)
class AuditReport:
    """The confirmed violations of one run and what the re-check filtered."""

    violations: tuple[Violation, ...]
    rows_checked: int = 0
    candidates: int = 0
    cleared: int = 0          # gone on re-check: changes in flight
    unsettled: int = 0        # still moving after every re-check: not reported
    categories: tuple[str, ...] = STORE_CATEGORIES

    @property
    def clean(self) -> bool:
        return not self.violations

    def counts(self) -> dict[str, int]:
        """Violations per category, every category present (zeros too), for metrics."""
        counts = dict.fromkeys(self.categories, 0)
        for violation in self.violations:
            counts[violation.category] = counts.get(violation.category, 0) + 1
        return counts

    def by_category(self) -> dict[str, list[Violation]]:
        """The violations grouped by category, categories with none left out."""
        grouped: dict[str, list[Violation]] = {}
        for violation in self.violations:
            grouped.setdefault(violation.category, []).append(violation)
        return grouped


@dataclass(frozen=True)
class _Facts:
    managed_index: int
    now_ms: int               # replicated time: the last applied batch's timestamp
    config: AuditConfig


Problems = dict[str, str]     # category -> detail, at most one of each per row
_RowCheck = Callable[[ReadView, bytes, bytes, _Facts], Problems]
_M = TypeVar("_M", bound=Message)
_Outcome = Violation | Literal["cleared", "unsettled"]


# ------------------------------------------------------------------ passes ---

def audit(view: ReadView, config: AuditConfig = AuditConfig(),
          recheck_view: ReadView | None = None) -> AuditReport:
    """Checks every row of ``view``; re-checks candidates on ``recheck_view`` (or ``view``).
    A file-system finding (``fs_audit``) is reported when the second pass finds it too."""
    candidates, rows = find_candidates(view, config)
    report = confirm(candidates, view if recheck_view is None else recheck_view, config)
    first = fs_audit.fs_problems(view)
    second = fs_audit.fs_problems(view if recheck_view is None else recheck_view) if first else []
    tree = [Violation(*found) for found in first if found in second]
    return AuditReport((*report.violations, *tree), rows,
                       report.candidates + len(first), report.cleared + len(first) - len(tree),
                       report.unsettled)


def find_candidates(view: ReadView, config: AuditConfig) -> tuple[list[Violation], int]:
    """The first pass: every row's findings, unconfirmed; and how many rows it read."""
    facts = _read_facts(view, config)
    found: list[Violation] = []
    rows = 0
    for table, check in _ROW_CHECKS.items():
        for key, value in rows_under(view, table, b""):
            rows += 1
            for category, detail in check(view, key, value, facts).items():
                found.append(Violation(category, _subject(table, key), detail, table, key))
    return found, rows


def confirm(candidates: Sequence[Violation], view: ReadView,
            config: AuditConfig) -> AuditReport:
    """The candidates that two successive reads of ``view`` still find, unchanged."""
    confirmed: list[Violation] = []
    cleared = unsettled = 0
    for candidate in candidates:
        outcome = _recheck(candidate, view, config)
        if outcome == "cleared":
            cleared += 1
        elif outcome == "unsettled":
            unsettled += 1
        else:
            confirmed.append(outcome)
    return AuditReport(tuple(confirmed), 0, len(candidates), cleared, unsettled)


def _recheck(candidate: Violation, view: ReadView, config: AuditConfig) -> _Outcome:
    """The confirmed violation, or why it is not reported."""
    assert candidate.table is not None
    assert candidate.key is not None
    previous = candidate.detail
    for _ in range(config.rechecks):
        value = view.get(candidate.table, candidate.key)
        if value is None:
            return "cleared"
        facts = _read_facts(view, config)  # after the row: never older than it
        problems = _ROW_CHECKS[candidate.table](view, candidate.key, value, facts)
        detail = problems.get(candidate.category)
        if detail is None:
            return "cleared"
        if detail == previous:
            return Violation(candidate.category, candidate.subject, detail,
                             candidate.table, candidate.key)
        previous = detail
    return "unsettled"


def log_report(report: AuditReport, log: logging.Logger = logger,
               label: str = "audit") -> None:
    """Logs the first ``LOG_PER_CATEGORY_MAX`` violations of each category in full, how
    many more each had, then the counts per category (``label``: which run)."""
    for category, found in report.by_category().items():
        for violation in found[:LOG_PER_CATEGORY_MAX]:
            log.warning("%s violation %s: %s: %s", label, violation.category,
                        violation.subject, violation.detail)
        if len(found) > LOG_PER_CATEGORY_MAX:
            log.warning("%s violation %s: %d more not logged (om admin audit --details-max N names "
                        "more)", label, category, len(found) - LOG_PER_CATEGORY_MAX)
    log.info("%s: %d rows, %d candidates, %d cleared in flight, %d unsettled; %s", label,
             report.rows_checked, report.candidates, report.cleared, report.unsettled,
             ", ".join(f"{name}={count}" for name, count in report.counts().items()))


def rows_under(view: ReadView, table: TableId, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every row of ``table`` under ``prefix``, in key order, page by page."""
    after: bytes | None = None
    while True:
        page = view.scan(table, prefix, after, PAGE_ROWS)
        yield from page
        if len(page) < PAGE_ROWS:
            return
        after = page[-1][0]


def _read_facts(view: ReadView, config: AuditConfig) -> _Facts:
    raw = view.get(om_pb2.TRANSACTION_INFO, tables.TRANSACTION_INFO_KEY)
    info = om_pb2.TransactionInfo() if raw is None else om_pb2.TransactionInfo.FromString(raw)
    return _Facts(info.managed_index, info.timestamp_ms, config)


def _subject(table: TableId, key: bytes) -> str:
    return f"{tables.TABLE_NAMES[table]} {key.decode(errors='backslashreplace')}"


# ------------------------------------------------------------- row checks ---

def _check_volume(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    info = _parse(om_pb2.VolumeInfo, value)
    if info is None or key != tables.volume_key(info.volume):
        return {ROW_MALFORMED: _malformed("VolumeInfo", info)}
    problems = _id_problems(facts, object_ids=[info.object_id], update_ids=[info.update_id])
    buckets = sum(1 for _ in rows_under(view, om_pb2.BUCKET, tables.bucket_prefix(info.volume)))
    if info.used_namespace != buckets:
        problems[VOLUME_NAMESPACE] = (f"used_namespace {info.used_namespace}, "
                                      f"but the volume has {buckets} buckets")
    return problems


def _check_bucket(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    info = _parse(om_pb2.BucketInfo, value)
    if info is None or key != tables.bucket_key(info.volume_name, info.bucket_name):
        return {ROW_MALFORMED: _malformed("BucketInfo", info)}
    problems = _id_problems(facts, object_ids=[info.object_id], update_ids=[info.update_id])
    if view.get(om_pb2.VOLUME, tables.volume_key(info.volume_name)) is None:
        problems[BUCKET_WITHOUT_VOLUME] = f"volume {info.volume_name} does not exist"
    used_bytes, used_namespace = _bucket_usage(view, info)
    if is_fso(info):
        pass   # a file-system bucket's usage is its tree's (fs_audit.FS_USAGE)
    elif (info.used_bytes, info.used_namespace) != (used_bytes, used_namespace):
        problems[BUCKET_USAGE] = (
            f"used_bytes {info.used_bytes}, used_namespace {info.used_namespace}, but its "
            f"keys sum to {used_bytes} replicated bytes in {used_namespace} keys")
    return problems


def _bucket_usage(view: ReadView, bucket: om_pb2.BucketInfo) -> tuple[int, int]:
    """(replicated bytes, keys) over the bucket's committed keys, the bytes with the
    committed parts of its uploads in progress."""
    total = count = 0
    prefix = tables.key_prefix(bucket.volume_name, bucket.bucket_name)
    for _, raw in rows_under(view, om_pb2.MULTIPART_INFO, prefix):
        upload = _parse(om_pb2.MultipartKeyInfo, raw)
        if upload is not None:   # else: reported as malformed
            total += sum(replicated_size(p.part_key_info.data_size,
                                         max(1, p.part_key_info.replication_factor))
                         for p in upload.part_key_info_list)
    for _, raw in rows_under(view, om_pb2.KEY, prefix):
        count += 1
        info = _parse(om_pb2.KeyInfo, raw)
        if info is not None and info.replication_factor >= 1:  # else: reported as malformed
            total += replicated_size(info.data_size, info.replication_factor)
    return total, count


def _check_key(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    info = _parse(om_pb2.KeyInfo, value)
    if (info is None or info.replication_factor < 1 or info.open_client_id != 0
            or key != tables.key_key(info.volume_name, info.bucket_name, info.key_name)):
        return {ROW_MALFORMED: _malformed("committed KeyInfo", info)}
    problems = _id_problems(facts, object_ids=[info.object_id], update_ids=[info.update_id])
    if view.get(om_pb2.BUCKET, tables.bucket_key(info.volume_name, info.bucket_name)) is None:
        problems[KEY_WITHOUT_BUCKET] = f"bucket /{info.volume_name}/{info.bucket_name} " \
                                       "does not exist"
    return problems


def _check_open_key(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    info = _parse(om_pb2.KeyInfo, value)
    if info is None or key != tables.open_key_key(info.volume_name, info.bucket_name,
                                                  info.key_name, info.open_client_id):
        return {ROW_MALFORMED: _malformed("open KeyInfo", info)}
    return _id_problems(facts, object_ids=[info.object_id, info.open_client_id],
                        update_ids=[info.update_id])


def _check_deleted(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    info = _parse(om_pb2.RepeatedKeyInfo, value)
    if info is None or not info.key_info or key != tables.deleted_key(
            info.key_info[0].volume_name, info.key_info[0].bucket_name,
            info.key_info[0].key_name, info.key_info[0].object_id):
        return {ROW_MALFORMED: _malformed("RepeatedKeyInfo", info)}
    return _id_problems(facts, object_ids=[k.object_id for k in info.key_info],
                        update_ids=[k.update_id for k in info.key_info])


def _check_reply(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    row = _parse(om_pb2.ClientRequestReply, value)
    if row is None or key != tables.reply_key(row.client_id, row.call_id):
        return {ROW_MALFORMED: _malformed("ClientRequestReply", row)}
    problems: Problems = {}
    index_key = tables.expiry_key(row.timestamp_ms, row.client_id, row.call_id)
    if view.get(om_pb2.CLIENT_REQUEST_EXPIRY, index_key) is None:
        problems[RETRY_INDEX_ORPHAN] = (f"reply of {row.timestamp_ms} ms has no expiry-index "
                                        f"row {index_key!r}: the sweeper can never purge it")
    cutoff = facts.now_ms - facts.config.retry_expiry_ms - facts.config.retry_grace_ms
    if facts.now_ms and row.timestamp_ms < cutoff:
        problems[RETRY_NOT_PURGED] = (
            f"reply of {row.timestamp_ms} ms is {facts.now_ms - row.timestamp_ms} ms old at "
            f"replicated time {facts.now_ms} ms; expiry {facts.config.retry_expiry_ms} ms "
            f"plus grace {facts.config.retry_grace_ms} ms")
    return problems


def _check_expiry(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    if len(key) <= 8:
        return {ROW_MALFORMED: "an expiry-index key too short to hold a time"}
    time_ms = tables.expiry_key_time_ms(key)
    raw = view.get(om_pb2.CLIENT_REQUEST_REPLY, tables.expiry_key_reply_key(key))
    reply = None if raw is None else _parse(om_pb2.ClientRequestReply, raw)
    if reply is None:
        return {RETRY_INDEX_ORPHAN: f"index row of {time_ms} ms points at no reply"}
    if reply.timestamp_ms != time_ms:
        return {RETRY_INDEX_ORPHAN: f"index row of {time_ms} ms points at a reply of "
                                    f"{reply.timestamp_ms} ms"}
    return {}


def _check_transaction_info(view: ReadView, key: bytes, value: bytes,
                            facts: _Facts) -> Problems:
    if key == tables.PREPARED_KEY:
        marker = _parse(om_pb2.PrepareMarker, value)
        return {} if marker is not None else {ROW_MALFORMED: _malformed("PrepareMarker", marker)}
    if key == tables.LAYOUT_VERSION_KEY:
        layout = _parse(om_pb2.LayoutVersion, value)
        if layout is None or layout.version > upgrade.SOFTWARE_LAYOUT_VERSION:
            return {ROW_MALFORMED: _malformed("LayoutVersion", layout)}
        return {}
    if key == tables.FLOWS_KEY:
        flows = _parse(om_pb2.FlowSelection, value)
        if flows is None or not flow_switch.valid_selection(flows):
            return {ROW_MALFORMED: _malformed("FlowSelection", flows)}
        return {}
    info = _parse(om_pb2.TransactionInfo, value)
    if info is None or key != tables.TRANSACTION_INFO_KEY:
        return {ROW_MALFORMED: _malformed("TransactionInfo", info)}
    return {}


def _check_secret_key(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    row = _parse(om_pb2.SecretKey, value)
    if row is None or key != tables.secret_key_key(row.key_id) or len(row.secret) != 32:
        return {ROW_MALFORMED: "not a SecretKey of 32 bytes under its own id (not printed: "
                               "it holds a secret)"}
    return {}


def _check_delegation_token(view: ReadView, key: bytes, value: bytes,
                            facts: _Facts) -> Problems:
    row = _parse(om_pb2.DelegationTokenInfo, value)
    ident = None if row is None else _parse(om_pb2.OMTokenProto, row.identifier)
    if ident is None or key != tables.delegation_token_key(ident.max_date,
                                                           ident.sequence_number):
        return {ROW_MALFORMED: _malformed("DelegationTokenInfo", ident)}
    return {}


def _check_directory(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    """A directoryTable or deletedDirectoryTable row: it parses, its ids are below the
    managed index (where it sits in its bucket's tree: ``fs_audit``)."""
    row = _parse(om_pb2.DirectoryInfo, value)
    if row is None or not row.name or not key.endswith(
            (f"/{row.parent_object_id}/{row.name}".encode(),
             f"/{row.parent_object_id}/{row.name}/{row.object_id}".encode())):
        return {ROW_MALFORMED: _malformed("DirectoryInfo", row)}
    return _id_problems(facts, object_ids=[row.object_id], update_ids=[row.update_id])


def _check_file(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    """A fileTable or openFileTable row: it parses, its ids are below the managed index."""
    info = _parse(om_pb2.KeyInfo, value)
    if info is None or info.replication_factor < 1 or f"/{info.parent_object_id}/".encode() \
            not in key:
        return {ROW_MALFORMED: _malformed("file KeyInfo", info)}
    ids = [info.object_id, *([info.open_client_id] if info.open_client_id else [])]
    return _id_problems(facts, object_ids=ids, update_ids=[info.update_id])


def _check_multipart(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    """A multipartInfoTable row: under its own names, parts once each by ascending number
    in range, each of the upload's replication; its open row there; ids below the index."""
    row = _parse(om_pb2.MultipartKeyInfo, value)
    numbers = [] if row is None else [p.part_number for p in row.part_key_info_list]
    if (row is None or not row.upload_id or row.replication_factor < 1
            or key != tables.multipart_key(row.volume_name, row.bucket_name, row.key_name,
                                           row.upload_id)
            or numbers != sorted(set(numbers)) or any(not 1 <= n <= 10_000 for n in numbers)
            or any(p.part_key_info.replication_factor != row.replication_factor
                   for p in row.part_key_info_list)):
        return {ROW_MALFORMED: _malformed("MultipartKeyInfo", row)}
    problems = _id_problems(
        facts, object_ids=[row.object_id, *(p.part_key_info.object_id
                                            for p in row.part_key_info_list)],
        update_ids=[row.update_id, *(p.part_key_info.update_id
                                     for p in row.part_key_info_list)])
    if view.get(om_pb2.OPEN_KEY, key) is None:
        problems[ROW_MALFORMED] = "the upload has no openKeyTable row under its key"
    return problems


def _check_user_certificate(view: ReadView, key: bytes, value: bytes,
                            facts: _Facts) -> Problems:
    row = _parse(om_pb2.UserCertificate, value)
    if (row is None or not row.user or "\0" in row.user
            or key != tables.user_certificate_key(row.user, row.serial)):
        return {ROW_MALFORMED: _malformed("UserCertificate", row)}
    return {}


def _check_snapshot(view: ReadView, key: bytes, value: bytes, facts: _Facts) -> Problems:
    """A snapshotInfoTable row: under its own names, active, of the bucket that bears its
    name now (a bucket with snapshots cannot be deleted); its id below the index."""
    row = _parse(om_pb2.SnapshotInfo, value)
    if (row is None or not row.name or row.status != om_pb2.SNAPSHOT_ACTIVE
            or key != tables.snapshot_key(row.volume, row.bucket, row.name)
            or row.log_position or row.checkpoint_here):
        return {ROW_MALFORMED: _malformed("SnapshotInfo", row)}
    problems = _id_problems(facts, object_ids=[row.snapshot_id], update_ids=[])
    raw = view.get(om_pb2.BUCKET, tables.bucket_key(row.volume, row.bucket))
    if raw is None or om_pb2.BucketInfo.FromString(raw).object_id != row.bucket_object_id:
        problems[ROW_MALFORMED] = "the snapshot's bucket is gone or another one"
    return problems


_ROW_CHECKS: dict[TableId, _RowCheck] = {
    om_pb2.VOLUME: _check_volume,
    om_pb2.BUCKET: _check_bucket,
    om_pb2.KEY: _check_key,
    om_pb2.OPEN_KEY: _check_open_key,
    om_pb2.DELETED: _check_deleted,
    om_pb2.CLIENT_REQUEST_REPLY: _check_reply,
    om_pb2.CLIENT_REQUEST_EXPIRY: _check_expiry,
    om_pb2.TRANSACTION_INFO: _check_transaction_info,
    om_pb2.SECRET_KEY: _check_secret_key,
    om_pb2.DELEGATION_TOKEN: _check_delegation_token,
    om_pb2.DIRECTORY: _check_directory,
    om_pb2.FILE: _check_file,
    om_pb2.OPEN_FILE: _check_file,
    om_pb2.DELETED_DIRECTORY: _check_directory,
    om_pb2.USER_CERTIFICATE: _check_user_certificate,
    om_pb2.MULTIPART_INFO: _check_multipart,
    om_pb2.SNAPSHOT_INFO: _check_snapshot,
}
assert set(_ROW_CHECKS) == set(tables.TABLE_NAMES), "every table has a row check"


def _id_problems(facts: _Facts, object_ids: Sequence[int],
                 update_ids: Sequence[int]) -> Problems:
    above = [f"update id {u}" for u in update_ids if u > facts.managed_index]
    for object_id in object_ids:
        if not object_id & OBJECT_ID_EPOCH:
            above.append(f"object id {object_id} (no epoch bit)")
        elif (object_id & ~OBJECT_ID_EPOCH) >> _OBJECT_ID_INDEX_SHIFT > facts.managed_index:
            index = (object_id & ~OBJECT_ID_EPOCH) >> _OBJECT_ID_INDEX_SHIFT
            above.append(f"object id {object_id} (managed index {index})")
    if not above:
        return {}
    return {ID_ABOVE_MANAGED_INDEX: f"{', '.join(above)} above the persisted managed "
                                    f"index {facts.managed_index}"}


def _parse(kind: type[_M], value: bytes) -> _M | None:
    try:
        return kind.FromString(value)
    except DecodeError:
        return None


def _malformed(kind: str, parsed: object) -> str:
    if parsed is None:
        return f"the value does not parse as {kind}"
    return f"the {kind} does not belong under this key (or is incomplete): {parsed}"


# --------------------------------------------------------- cluster checks ---

@dataclass(frozen=True)
class NodeFacts:
    """What one node reports for the cluster checks (the wiring collects them)."""

    node_id: str
    applied_index: int
    commit_index: int
    raft_members: frozenset[str]
    verify_position: int = 0                         # 0: never verified
    verify_roots: Mapping[str, bytes] = field(default_factory=dict)


def check_cluster(nodes: Sequence[NodeFacts], configured: frozenset[str],
                  lag_max: int) -> list[Violation]:
    """Positions, lag, membership and last verification, across the nodes that answered.

    Re-check as the row checks are: collect the facts again and keep what
    ``stable`` finds in both runs.
    """
    assert lag_max >= 0
    found: list[Violation] = []
    commit = max((node.commit_index for node in nodes), default=0)
    for node in nodes:
        subject = f"node {node.node_id}"
        if node.applied_index > node.commit_index:
            found.append(Violation(APPLIED_AHEAD_OF_COMMIT, subject,
                                   f"applied {node.applied_index} > commit {node.commit_index}"))
        if commit - node.applied_index > lag_max:
            found.append(Violation(FOLLOWER_LAG, subject,
                                   f"applied {node.applied_index}, {commit - node.applied_index}"
                                   f" behind the highest commit {commit} (bound {lag_max})"))
        if node.raft_members != configured:
            found.append(Violation(MEMBERSHIP_MISMATCH, subject,
                                   f"Raft members {sorted(node.raft_members)}, configured "
                                   f"{sorted(configured)}"))
    found.extend(_verify_disagreements(nodes))
    return found


def _verify_disagreements(nodes: Sequence[NodeFacts]) -> list[Violation]:
    """Nodes whose last verification differs from the others' at the same position."""
    by_position: dict[int, dict[str, Mapping[str, bytes]]] = {}
    for node in nodes:
        if node.verify_position:
            by_position.setdefault(node.verify_position, {})[node.node_id] = node.verify_roots
    found: list[Violation] = []
    for position, roots in sorted(by_position.items()):
        verdict = vote.majority(roots)
        found.extend(Violation(VERIFY_DISAGREES, f"table {table}",
                               f"no majority root at position {position} among {sorted(roots)}")
                     for table in verdict.no_majority)
        for node_id in sorted(verdict.minority):
            tables_off = [t for t, v in verdict.tables.items() if node_id in v.minority]
            found.append(Violation(VERIFY_DISAGREES, f"node {node_id}",
                                   f"differs from the majority at position {position} "
                                   f"in {tables_off}"))
    return found


def stable(first: Sequence[Violation], second: Sequence[Violation]) -> list[Violation]:
    """The violations of ``second`` that ``first`` found too (same category and subject).

    Details may move between the runs (a lag grows); the subject is what must persist.
    """
    seen = {(v.category, v.subject) for v in first}
    return [v for v in second if (v.category, v.subject) in seen]
