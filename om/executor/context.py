"""ExecContext: what the leader fixes for one request before it executes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from om.executor.fso.fs import Resolved
from om.protocol import om_pb2
from om.schema.ids import MANAGED_INDEX_MAX, object_id_for
from om.schema.read_view import SnapshotViews
from om.schema.tables import TableId

# (volume, bucket, path) -> the bucket's row and the path resolved in it
Planned = Mapping[tuple[str, str, str], tuple[om_pb2.BucketInfo, Resolved]]


class QuotaReservations(Protocol):
    """Quota that requests executed but not yet applied have claimed."""

    def reserved(self, table: TableId, key: bytes) -> tuple[int, int]:
        """(bytes, namespace) reserved against the row ``key`` of ``table``."""
        ...


class NoReservations:
    """No request is in flight: the view alone is the truth (old flow, tests)."""

    def reserved(self, table: TableId, key: bytes) -> tuple[int, int]:
        return (0, 0)


@dataclass(frozen=True)
class Limits:
    """Limits a handler enforces.

    The pure core imports no configuration (tests/test_layering.py), so the defaults
    a server configures are repeated here; tests/test_node_parts.py checks they
    equal om/config.py's, which are the ones stated."""

    list_max_keys: int = 10_000
    list_default_keys: int = 1_000
    key_name_max_bytes: int = 1024
    # Delegation tokens (om/executor/security/tokens.py), Ozone's defaults: a token expires a
    # day after it was issued or last renewed and lives at most 7 days; a new secret
    # key signs tokens each day; at most this many tokens live at once.
    token_renew_interval_ms: int = 86_400_000
    token_max_lifetime_ms: int = 7 * 86_400_000
    token_key_rotation_ms: int = 86_400_000
    tokens_max: int = 1_000_000
    # Multipart upload (om/executor/multipart/uploads.py): every part of a complete but the last
    # holds at least this (Ozone's and S3's 5 MiB).
    multipart_min_part_bytes: int = 5 * 1024 * 1024
    # OM snapshots (om/executor/om_snapshots/snapshots.py): at most this many per bucket.
    snapshots_per_bucket_max: int = 100


def merged_groups(mapped: tuple[str, ...], certified: Iterable[str]) -> tuple[str, ...]:
    """A user's groups: the configured mapping's (its first is the primary group), then
    those its client certificate names that the mapping does not."""
    extra = tuple(group for group in certified if group not in mapped)
    return (*mapped, *extra) if extra else mapped


@dataclass(frozen=True)
class ExecContext:
    """The leader-fixed inputs of one request's execution.

    ``managed_index`` is the request's transaction index from the managed
    index; it becomes the update id of every row the request writes.
    ``groups`` maps users to their groups (the configured mapping; the first is
    the primary group), and ``certificate_groups`` are those the requester's client
    certificate adds (``user_groups``): a create gives the primary group its default ACL.
    ``planned`` holds the paths of a file-system write that the leader resolved while
    planning its locks, against the state it executes on (nothing was applied in
    between: ``om/gatekeeper/fs_locks.py``); a handler uses one rather than resolving
    the path again.
    """

    user: str
    managed_index: int
    now_ms: int
    reservations: QuotaReservations
    limits: Limits = field(default_factory=Limits)
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    certificate_groups: tuple[str, ...] = ()
    planned: Planned = field(default_factory=dict)
    # This node's snapshot checkpoints: reads of a snapshot, its position, the disk
    # headroom before a create. None where no node's files may be consulted (the old
    # flow's apply, which runs on every node).
    snapshots: SnapshotViews | None = None

    def user_groups(self, user: str) -> tuple[str, ...]:
        """The groups of ``user``: the mapping's, and the certificate's for the requester."""
        mapped = self.groups.get(user, ())
        if user != self.user or not self.certificate_groups:
            return mapped
        return merged_groups(mapped, self.certificate_groups)

    def __post_init__(self) -> None:
        assert 0 <= self.managed_index <= MANAGED_INDEX_MAX  # 0: a read
        assert self.now_ms > 0

    def object_id(self, n: int = 0) -> int:
        """The n-th object id this request may assign."""
        return object_id_for(self.managed_index, n)
