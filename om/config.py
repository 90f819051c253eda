"""Server configuration: defaults, an optional TOML file, and command-line flags.

Every limit of the server is here, with its unit in its name. Unknown keys in a
TOML file are an error (a typo must not silently fall back to a default).

Example ``cluster.toml``::

    execution = "leader"            # "replicated" (Ozone's old flow), or "switchable":
                                    # per write type, as `om admin om flow set` says
    data_dir = "om-data"            # each node uses data_dir/<node id>

    [[nodes]]
    id = "om1"
    host = "127.0.0.1"
    port = 9862                     # client RPC (Ozone's OM RPC port)
    raft_port = 9872                # Raft (Ozone's OM Ratis port)
    http_port = 9874                # metrics at /prom (Ozone's OM web port); 0: off

    [limits]
    lock_timeout_s = 60.0

    [batch]
    inflight_batches_max = 1

    [auditor]
    periodic_interval_s = 86400.0   # the report-only auditor, daily, on followers; 0: off

    [fso]
    lock_plan = "object-id"         # or "bucket": Ozone mainline's lock, for comparison
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9862
DEFAULT_RAFT_PORT = 9872
DEFAULT_HTTP_PORT = 9874     # Ozone's OM web port: /prom
EXECUTIONS = ("leader", "replicated", "switchable")   # docs/FLOW_SWITCH.md
READ_LINEARIZABLE = "linearizable"
READ_LOCAL = "local"
READ_MODES = (READ_LINEARIZABLE, READ_LOCAL)
WORKERS_MAX = 64
# Shard processes of one node (docs/SHARDS.md): shard k >= 1 listens on its node's
# client port + SHARD_PORT_OFFSET + SHARD_PORT_STEP * k, beside port + 10 (Raft) and
# port + 20 (HTTP) of ``om cluster up``'s layout.
SHARDS_MAX = 8
SHARD_PORT_OFFSET = 20
SHARD_PORT_STEP = 10
# The layout version from which leader-flow batches travel as merged entries ("M"):
# upgrade.MERGED_ENTRIES.version, repeated here because config is a leaf module
# (tests/test_shards_setting.py holds the two equal). A shard above 0 seals only "M"
# (a "B" goes whole to every shard), so shards > 1 need a store at this layout or above.
MERGED_ENTRIES_LAYOUT = 5
# How the leader locks writes on file-system buckets (docs/FSO.md, *Locks*).
FSO_LOCK_OBJECT_ID = "object-id"
FSO_LOCK_BUCKET = "bucket"
FSO_LOCK_PLANS = (FSO_LOCK_OBJECT_ID, FSO_LOCK_BUCKET)
# om.executor.security.tokens keeps at most ~this many secret keys
LIFETIME_PER_ROTATION_MAX = 1000


def shard_data_dir(node_dir: Path, shard: int) -> Path:
    """Shard ``shard``'s directory in a node's data directory: the node's own for shard
    0, its ``shard-k`` for k >= 1 (the store is the ``db`` in it)."""
    assert 0 <= shard < SHARDS_MAX
    return node_dir / f"shard-{shard}" if shard else node_dir


class ConfigError(Exception):
    """The configuration is invalid; the message says which key and why."""


@dataclass(frozen=True)
class NodeAddress:
    """One OM node: its id and its client, Raft and HTTP (metrics) endpoints."""

    id: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    raft_port: int = DEFAULT_RAFT_PORT
    http_port: int = DEFAULT_HTTP_PORT   # 0: no HTTP endpoint
    # Membership (om admin om add|maintenance): a learner receives the log but never
    # votes or leads (a new node catching up); a node in maintenance stays a voter
    # while it is stopped for servicing, until ``maintenance_until`` (epoch s, 0: none).
    learner: bool = False
    maintenance: bool = False
    maintenance_until: float = 0.0

    @cached_property
    def address(self) -> str:
        """host:port of the client endpoint."""
        return f"{self.host}:{self.port}"

    @property
    def raft_address(self) -> str:
        """host:port of the Raft endpoint."""
        return f"{self.host}:{self.raft_port}"

    @property
    def http_address(self) -> str:
        """host:port of the metrics endpoint; empty when it is off."""
        return f"{self.host}:{self.http_port}" if self.http_port else ""

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port this node listens on (with one shard)."""
        return tuple(p for p in (self.port, self.raft_port, self.http_port) if p)

    def shard_port(self, shard: int) -> int:
        """The client port of ``shard``: ``port`` for shard 0 (the coordinator), else
        ``port + SHARD_PORT_OFFSET + SHARD_PORT_STEP * shard`` (docs/SHARDS.md, *Ports*)."""
        assert 0 <= shard < SHARDS_MAX
        return self.port + SHARD_PORT_OFFSET + SHARD_PORT_STEP * shard if shard else self.port

    def shard_address(self, shard: int) -> str:
        """host:port of ``shard``'s client endpoint (``address`` for shard 0)."""
        return f"{self.host}:{self.shard_port(shard)}"

    def ports_with_shards(self, shards: int) -> tuple[int, ...]:
        """Every port this node listens on with ``shards`` shards: ``ports`` and the
        client ports of shards 1..shards-1."""
        assert 1 <= shards <= SHARDS_MAX
        return self.ports + tuple(self.shard_port(k) for k in range(1, shards))


@dataclass(frozen=True)
class Limits:
    """Bounds of the server; hitting one returns a status, never unbounded growth."""

    max_frame_bytes: int = 4 * 1024 * 1024
    connections_max: int = 10_000
    connection_idle_s: float = 600.0
    connection_in_flight_max: int = 1024
    # Reply bytes queued for one connection and not yet taken by the kernel (a
    # client that sends and never reads): past it the connection is cut off
    # (om/node/connections.py). At least max_frame_bytes: one reply must fit.
    connection_unsent_bytes_max: int = 16 * 1024 * 1024
    # The client port's listen backlog: the kernel's limit (somaxconn), at most this.
    listen_backlog_max: int = 65_535
    # TLS handshakes in progress per serving process; more connections wait in the
    # listen queue, so a burst of them leaves requests their share (om/node/accept.py).
    tls_handshakes_max: int = 4
    # Frames of one connection handed to the node in one turn of the event loop; the
    # rest wait for the next turn, so a commit notice waits behind at most this many
    # requests, not a whole read's (om/node/connections.py).
    frames_per_turn: int = 16
    in_flight_max: int = 10_000
    lock_timeout_s: float = 60.0
    retry_cache_expiry_s: float = 600.0
    retry_cache_memory_entries: int = 100_000
    retry_sweep_interval_s: float = 30.0
    list_max_keys: int = 10_000
    unflushed_transactions_max: int = 10_000
    store_memtable_bytes: int = 64 * 1024 * 1024     # all tables' memtables together
    store_block_cache_bytes: int = 64 * 1024 * 1024  # RocksDB's block cache


@dataclass(frozen=True)
class Batch:
    """Group commit: at most this many writes / bytes a batch, this many in flight."""

    enabled: bool = True
    bytes_max: int = 1024 * 1024
    writes_max: int = 2000
    inflight_batches_max: int = 1
    queue_max: int = 20_000


@dataclass(frozen=True)
class Raft:
    """pysyncobj tuning (see docs/RELIABILITY.md, Durability)."""

    election_timeout_min_s: float = 0.4
    election_timeout_max_s: float = 0.8
    leader_fallback_timeout_s: float = 2.0
    compaction_min_entries: int = 5000
    # pysyncobj keeps the log in memory until a compaction, and with
    # logCompactionSplit each node compacts only in its own slot of every
    # period of this length: the period bounds the in-memory log (at peak about
    # 5 MB/s). A snapshot of 1M keys takes ~0.2 s on the tick thread.
    compaction_min_time_s: float = 60.0
    commands_queue_max: int = 10_000
    # Durable by default: an acknowledged write is synced on a majority. False is
    # an explicit opt-out (survives a process crash, not power loss), logged at start.
    fsync: bool = True
    # zlib on Raft frames of 4 KiB or more: pays off a slow network, not loopback.
    compress_transport: bool = False
    # pysyncobj in a child process of its own (om/consensus/pysyncobj/child.py) rather
    # than a thread sharing the event loop's GIL.
    separate_process: bool = True
    # "a>b" = port: node a reaches node b's Raft port through this port on b's host
    # (om chaos puts a proxy there that can cut the link). Empty: direct.
    links: dict[str, int] = field(default_factory=dict)
    # The cluster secret that authenticates and encrypts Raft traffic (pysyncobj's
    # ``password``): read from the top-level ``raft_secret_file``, never from the TOML
    # itself. Empty: Raft unauthenticated (printed at start).
    secret: str = field(default="", repr=False)
    # Test-only: while a file named raft.wal.stall exists beside this node's journal,
    # the journal's sync thread waits (a disk whose syncs hang), so a test can prove
    # that a slow sync costs neither the leadership nor a write
    # (tests/test_disk_stall.py).
    unsafe_journal_stall: bool = False


@dataclass(frozen=True)
class Tls:
    """TLS with client certificates on the client RPC port (``om cluster up``'s default).

    Paths may hold ``{node_id}``. Set cert, key and CA together, or none (no TLS).
    ``client_*`` are the certificate the tools (om sh, om admin) present when they
    find the cluster through this file."""

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    client_cert_file: str = ""
    client_key_file: str = ""

    @property
    def enabled(self) -> bool:
        """Whether the client port requires TLS."""
        return bool(self.cert_file)


@dataclass(frozen=True)
class Tokens:
    """Delegation tokens (om/executor/security/tokens.py), with TLS on: Ozone's defaults
    (ozone.manager.delegation.token.renew-interval 1 d, .max-lifetime 7 d; a new
    secret key a day, as hdds.secret.key.rotate.duration). ``enabled = false``
    refuses token requests and again requires a certificate of every client."""

    enabled: bool = True
    renew_interval_s: float = 86_400.0
    max_lifetime_s: float = 7 * 86_400.0
    key_rotation_s: float = 86_400.0
    tokens_max: int = 1_000_000


@dataclass(frozen=True)
class Audit:
    """The audit log (Ozone's OMAudit lines): on by default, reads included."""

    enabled: bool = True
    reads: bool = True
    path: str = ""             # default: audit.log in the node's data directory
    max_bytes: int = 100 * 1024 * 1024
    backups: int = 10
    flush_interval_s: float = 0.2   # lines are buffered this long at most


@dataclass(frozen=True)
class Purge:
    """The leader's purges (om/flows/purge.py): deleted subtrees of file-system buckets,
    deletedTable rows ``deleted_retention_s`` after their deletion, open keys and files
    never committed ``open_key_expire_s`` after their creation (Ozone's
    ``ozone.om.open.key.expire.threshold``, 7 days), multipart uploads never completed
    ``multipart_expire_s`` after their initiate (Ozone's ``ozone.om.mpu.expire.threshold``,
    30 days; their parts go to deletedTable). Each kind: one step of at most
    ``rows_max`` rows every ``interval_s`` while any waits; a time-based kind whose
    pass found nothing due rests until its earliest row can be (om/flows/purge_scan.py)."""

    interval_s: float = 1.0
    rows_max: int = 1000
    deleted_retention_s: float = 86_400.0
    open_key_expire_s: float = 7 * 86_400.0
    multipart_expire_s: float = 30 * 86_400.0


@dataclass(frozen=True)
class Fso:
    """File-system-optimized buckets (docs/FSO.md). ``lock_plan`` is what the leader
    locks for a write on one (CreateDirectory, CreateFile, CreateKey, CommitKey,
    DeleteKey, RenameKey):

    * ``"object-id"`` (default): the bucket's read lock and slot locks keyed by
      object ids (``om/gatekeeper/fs_locks.py``), so writes in unrelated directories
      run in parallel.
    * ``"bucket"``: the bucket's exclusive lock only, as Ozone mainline locks every
      FSO write (``RegularBucketLockStrategy``): writes in one bucket run one at a
      time. Correct, slower; kept to measure against (``om bench --profile fso``).

    Only the leader flow locks; ``execution = "replicated"`` applies writes one at a
    time whatever this says."""

    lock_plan: str = FSO_LOCK_OBJECT_ID


@dataclass(frozen=True)
class Snapshot:
    """OM snapshots (``om sh snapshot``, docs/operations/om-snapshots.md). A bucket holds at most
    ``per_bucket_max`` snapshots; the leader refuses a create while the disk holding
    its data directory has less than ``headroom_bytes_min`` free, or less than
    ``headroom_fraction_min`` of its size (a checkpoint shares files with the store
    at first, then holds on to every file compaction replaces). At most
    ``open_max`` snapshots' checkpoints stay open for reads on a node."""

    per_bucket_max: int = 100
    headroom_bytes_min: int = 1 << 30
    headroom_fraction_min: float = 0.05
    open_max: int = 8


@dataclass(frozen=True)
class Catchup:
    """Catch-up from checkpoint files (om/node/catchup.py): a follower behind the
    leader's compacted log downloads the files of the checkpoint the leader's Raft
    snapshot names, ``chunk_bytes`` per request (at most half ``[limits]
    max_frame_bytes``: ``ServerConfig.catchup_chunk_bytes``), at most ``rate_bytes_per_s`` (0: no
    limit), giving up after ``deadline_s`` (the node then stops; a restart resumes from
    the files it staged). A node keeps its ``kept`` newest checkpoints to serve (and an
    older one a follower read within ``lease_s``) and serves at most ``serving_max``
    chunks at once (more: SERVER_BUSY)."""

    chunk_bytes: int = 1 << 20
    rate_bytes_per_s: int = 256 << 20
    deadline_s: float = 120.0
    kept: int = 2
    # a checkpoint past ``kept`` stays while a follower read it within this long
    lease_s: float = 30.0
    # a source that does not answer this long is taken for dead: another node's
    # checkpoint is fetched instead
    source_timeout_s: float = 10.0
    serving_max: int = 4
    # Test-only: the first download of a node that never staged one stops (the node
    # fails stop, as if killed) once this fraction of the checkpoint's bytes is staged,
    # so a test can prove that the restarted node resumes (tests/test_catchup_cluster.py).
    unsafe_cut_at_fraction: float = 0.0


@dataclass(frozen=True)
class Upgrade:
    """Layout versions (om/executor/admin/upgrade.py, docs/operations/upgrade.md).

    ``init_layout_version``: the metadata layout version a *new* store starts at (Ozone's
    ``ozone.om.init.default.layout.version``); -1 (default): the software's own, every
    feature on. A store that exists keeps its version whatever this says; only
    ``om admin om finalizeupgrade`` raises it. Set it lower to start a cluster as an
    older release would have made it (tests, or a rolling start next to older nodes)."""

    init_layout_version: int = -1


@dataclass(frozen=True)
class Auditor:
    """The periodic report-only auditor (``om.integrity.periodic``), on followers only.

    Off by default (``periodic_interval_s = 0``); ``om admin audit`` runs it on demand.
    Each interval is drawn from ``periodic_interval_s * (1 +- jitter_fraction)``, the
    first one from ``[0, periodic_interval_s)``, so followers started together drift
    apart. ``rows_per_s`` paces the scan, as ``om admin audit --rows-per-s`` does."""

    periodic_interval_s: float = 0.0
    jitter_fraction: float = 0.1
    rows_per_s: int = 50_000


@dataclass(frozen=True)
class Verify:
    """Replica digests and their checks (``om.statemachine.digests``, ``om.integrity``).

    * ``interval_s``: the leader proposes a verify entry this often; every node then
      compares its digests at that position with its peers' and marks itself diverged
      when a majority of the members disagree with it (0: only ``om admin verify``).
    * ``scrub_rows_per_s``: the pace of the background scrub, which recomputes every
      leaf from its rows and compares it with the digest apply keeps (0: no scrub;
      ``om admin verify --full`` still runs a pass now).
    * ``build_rows_per_s``: the pace at which a store written before digests (or by an
      older release) gets them, once, in the background.
    * ``leaf_bits`` / ``fanout_bits``: the digest tree of a *new* store: 2^leaf_bits
      leaves a table, each level up grouping 2^fanout_bits nodes. A store keeps the
      shape it was created with (its digest meta row).
    * ``keep``: verifications (checkpoint and digests at a position) a node keeps."""

    interval_s: float = 60.0
    scrub_rows_per_s: int = 20_000
    build_rows_per_s: int = 50_000
    leaf_bits: int = 16
    fanout_bits: int = 4
    keep: int = 3


DEFAULT_VERIFY = Verify()


@dataclass(frozen=True)
class ServerConfig:
    """Everything one OM process needs."""

    node_id: str = "om1"
    data_dir: Path = Path("om-data")
    execution: str = "leader"
    nodes: tuple[NodeAddress, ...] = (NodeAddress("om1"),)
    # Node ids removed by ``om admin om decommission``: never again a member.
    decommissioned: tuple[str, ...] = ()
    acl_enabled: bool = False
    admins: tuple[str, ...] = ()
    # Ozone's native ACLs (om/gatekeeper/authorize.py), with Ozone's key names:
    # ozone.administrators.groups, ozone.readonly.administrators[.groups] (may READ,
    # READ_ACL and LIST anything), ozone.[read.]blacklist.{users,groups} (refused
    # everything / those three rights), ozone.om.volume.listall.allowed.
    admin_groups: tuple[str, ...] = ()
    readonly_admins: tuple[str, ...] = ()
    readonly_admin_groups: tuple[str, ...] = ()
    blacklist_users: tuple[str, ...] = ()
    blacklist_groups: tuple[str, ...] = ()
    read_blacklist_users: tuple[str, ...] = ()
    read_blacklist_groups: tuple[str, ...] = ()
    volume_listall_allowed: bool = True
    # A TOML or JSON file mapping each user to its groups (the first is its primary
    # group): `alice = ["dev", "ops"]`. Read at load into ``user_groups``, which is
    # not itself a key of the TOML.
    group_mapping_file: Path | None = None
    user_groups: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    trace_path: Path | None = None
    trace_flow: str = ""
    # A file (mode 0600) holding the Raft cluster secret; ``om cluster up`` writes one.
    raft_secret_file: Path | None = None
    # "linearizable" (default): a read reflects every write acknowledged before it
    # was sent (the leader confirms with a quorum first). "local": any node answers
    # from its own applied state, at once, maybe stale.
    read_mode: str = READ_LINEARIZABLE
    # Test-only: answer retries as new requests, so the chaos suite's red test can
    # prove its exactly-once checker detects the duplicates this causes.
    unsafe_disable_retry_cache: bool = False
    # Test-only: RocksDB writes skip its write-ahead log, so a kill -9 loses every
    # applied batch not yet flushed (more than a power loss would). Proves that the
    # Raft journal alone carries durability (tests/test_crash_restart.py).
    unsafe_store_without_wal: bool = False
    # Test-only: while this node leads, the server waits this long before writing each
    # Raft snapshot (a slow disk on the leader), so a test can prove that a slow
    # snapshot never stalls Raft (tests/test_snapshots.py).
    unsafe_snapshot_delay_s: float = 0.0
    # Processes that serve client connections (TLS, framing, back-pressure) for the
    # node's core process (om/node/front_pool.py). 1: the core serves them itself. 0: one
    # per eight cores, at least one (``workers_count``).
    workers: int = 0
    # Shard processes executing writes, each for its share of the buckets
    # (docs/SHARDS.md): 1..SHARDS_MAX; more than one needs the Raft process and the
    # leader flow. 1 is one process executing every write.
    shards: int = 1
    # The shard this process serves: 0 for the node's own process; k >= 1 only in the
    # configuration a node hands its shard process k (``for_shard``), never in the TOML.
    serving_shard: int = 0
    limits: Limits = field(default_factory=Limits)
    batch: Batch = field(default_factory=Batch)
    raft: Raft = field(default_factory=Raft)
    audit: Audit = field(default_factory=Audit)
    auditor: Auditor = field(default_factory=Auditor)
    verify: Verify = field(default_factory=Verify)
    purge: Purge = field(default_factory=Purge)
    fso: Fso = field(default_factory=Fso)
    snapshot: Snapshot = field(default_factory=Snapshot)
    catchup: Catchup = field(default_factory=Catchup)
    upgrade: Upgrade = field(default_factory=Upgrade)
    tls: Tls = field(default_factory=Tls)
    tokens: Tokens = field(default_factory=Tokens)

    def tls_path(self, template: str) -> Path:
        """A [tls] path with this node's id filled in."""
        return Path(template.format(node_id=self.node_id))

    @property
    def audit_path(self) -> Path:
        """Where this node writes its audit log."""
        return Path(self.audit.path) if self.audit.path else self.node_data_dir / "audit.log"

    @property
    def node(self) -> NodeAddress:
        """This node's addresses."""
        for node in self.nodes:
            if node.id == self.node_id:
                return node
        raise ConfigError(f"node id '{self.node_id}' is not among the configured nodes "
                          f"{[n.id for n in self.nodes]}")

    @property
    def node_data_dir(self) -> Path:
        """This process's data directory: data_dir itself for one node, else
        data_dir/<id>; for shard k >= 1 that directory's ``shard-k`` (its store, OM
        snapshot checkpoints, audit log and markers, apart from every other shard's)."""
        node_dir = self.data_dir if len(self.nodes) == 1 else self.data_dir / self.node_id
        return shard_data_dir(node_dir, self.serving_shard)

    def for_shard(self, shard: int) -> ServerConfig:
        """The configuration shard ``shard``'s process runs with: this node's, serving
        that shard, with no periodic verify entries and a trace file of its own
        (verify per shard is a later step, docs/SHARDS.md: shard 0 proposes them,
        every shard applies them)."""
        assert 1 <= shard < self.shards
        assert self.serving_shard == 0
        trace = None if self.trace_path is None else \
            self.trace_path.with_name(f"{self.trace_path.name}.shard-{shard}")
        return dataclasses.replace(self, serving_shard=shard, trace_path=trace,
                                   verify=dataclasses.replace(self.verify, interval_s=0))

    def workers_count(self, cores: int | None = None) -> int:
        """The processes serving client connections: ``workers``, or when 0 one per
        eight cores of ``cores`` (default: this machine's), at least one; 1 means the
        core serves them itself. Few: a front takes TLS, framing and connection
        handling off the core, but the link to it costs the core about what TLS did
        (docs/PERFORMANCE.md, *What limits one leader*), so fronts pay only where connections are
        many or handshakes frequent. With shards (``shards`` > 1) every shard serves its
        own connections, and there are no fronts: 1."""
        if self.workers or self.shards > 1:
            return self.workers or 1
        available = cores if cores is not None else len(os.sched_getaffinity(0))
        return max(1, min(WORKERS_MAX, available // 8))

    @property
    def catchup_chunk_bytes(self) -> int:
        """The bytes a catch-up request asks for: ``[catchup] chunk_bytes``, but never
        more than half a frame (a node with a smaller frame limit needs no other setting)."""
        return min(self.catchup.chunk_bytes, self.limits.max_frame_bytes // 2)

    def validate(self) -> ServerConfig:
        """Raises ConfigError on an inconsistent configuration; returns self."""
        self._validate_choices()
        self._validate_nodes()
        self._validate_limits()
        self._validate_sections()
        _validate_verify(self.verify)
        return self

    def _validate_choices(self) -> None:
        """The purges, and each setting that names one of a few choices."""
        if self.purge.interval_s <= 0 or self.purge.rows_max < 1:
            raise ConfigError("[purge] interval_s must be > 0 and rows_max >= 1")
        if (self.purge.deleted_retention_s < 0 or self.purge.open_key_expire_s <= 0
                or self.purge.multipart_expire_s <= 0):
            raise ConfigError("[purge] deleted_retention_s must be >= 0, "
                              "open_key_expire_s and multipart_expire_s > 0")
        if self.fso.lock_plan not in FSO_LOCK_PLANS:
            raise ConfigError(f"[fso] lock_plan must be one of {FSO_LOCK_PLANS}, not "
                              f"{self.fso.lock_plan!r}")
        if self.upgrade.init_layout_version < -1:
            raise ConfigError("[upgrade] init_layout_version must be -1 (the software's) "
                              f"or a layout version, not {self.upgrade.init_layout_version}")
        if not 0 <= self.workers <= WORKERS_MAX:
            raise ConfigError(f"workers must be 0 (from the cores) to {WORKERS_MAX}, "
                              f"not {self.workers}")
        if self.execution not in EXECUTIONS:
            raise ConfigError(f"execution must be one of {EXECUTIONS}, not '{self.execution}'")
        if self.read_mode not in READ_MODES:
            raise ConfigError(f"read_mode must be one of {READ_MODES}, not '{self.read_mode}'")
        self._validate_shards()

    def _validate_shards(self) -> None:
        """``shards``: in range, and more than one only where shards can run."""
        if not 1 <= self.shards <= SHARDS_MAX:
            raise ConfigError(f"shards must be 1 to {SHARDS_MAX}, not {self.shards}")
        assert 0 <= self.serving_shard < self.shards, "a shard of this node"
        if self.shards == 1:
            return
        if not self.raft.separate_process:
            raise ConfigError(f"shards = {self.shards} needs [raft] separate_process = true: "
                              "the Raft process merges the shards' sub-batches")
        if self.workers > 1:
            raise ConfigError(f"shards = {self.shards} retires the front workers (each shard "
                              f"serves its own connections): workers = {self.workers} "
                              "must be 0 or 1")
        if self.execution != "leader":
            raise ConfigError(f"shards = {self.shards} needs execution = \"leader\", not "
                              f"\"{self.execution}\": the old flow runs in one process")
        if 0 <= self.upgrade.init_layout_version < MERGED_ENTRIES_LAYOUT:
            raise ConfigError(f"shards = {self.shards} needs merged entries: [upgrade] "
                              f"init_layout_version {self.upgrade.init_layout_version} is "
                              f"below {MERGED_ENTRIES_LAYOUT} (MERGED_ENTRIES), where a "
                              "shard above 0 could not seal its batches")
        for node in self.nodes:
            ports = node.ports_with_shards(self.shards)
            if max(ports) >= 65536 or len(set(ports)) != len(ports):
                raise ConfigError(f"node {node.id}: with shards = {self.shards} its shard "
                                  f"ports (port + {SHARD_PORT_OFFSET} + {SHARD_PORT_STEP} k) "
                                  "must be at most 65535 and differ from its other ports")

    def _validate_nodes(self) -> None:
        """Node ids, membership, ports and Raft links."""
        ids = [n.id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"node ids must be unique: {ids}")
        if self.node_id in self.decommissioned:
            raise ConfigError(f"OM:{self.node_id} was decommissioned; a decommissioned node "
                              "never rejoins under its id (add a new node instead)")
        if set(ids) & set(self.decommissioned):
            raise ConfigError(f"nodes {sorted(set(ids) & set(self.decommissioned))} are both "
                              "members and decommissioned")
        _ = self.node
        for node in self.nodes:
            if not all(0 < p < 65536 for p in node.ports) or node.http_port < 0:
                raise ConfigError(f"node {node.id}: ports must be 1-65535 (http_port 0: off)")
            if len(set(node.ports)) != len(node.ports):
                raise ConfigError(f"node {node.id}: port, raft_port and http_port must differ")
        for link, port in self.raft.links.items():
            source, _, target = link.partition(">")
            if source not in ids or target not in ids or source == target:
                raise ConfigError(f"[raft.links] {link!r} must name two nodes as \"a>b\"")
            if not 0 < port < 65536:
                raise ConfigError(f"[raft.links] {link!r}: {port} is not a port")

    def _validate_limits(self) -> None:
        """TLS files, token lifetimes, and every limit positive and consistent."""
        server_files = (self.tls.cert_file, self.tls.key_file, self.tls.ca_file)
        if any(server_files) and not all(server_files):
            raise ConfigError("[tls] needs cert_file, key_file and ca_file together")
        if self.tokens.max_lifetime_s > LIFETIME_PER_ROTATION_MAX * self.tokens.key_rotation_s:
            raise ConfigError(f"[tokens] max_lifetime_s / key_rotation_s must be at most "
                              f"{LIFETIME_PER_ROTATION_MAX}: every key is kept until the "
                              "tokens it signed pass their max date")
        for section in (self.limits, self.batch, self.raft, self.audit, self.tokens):
            for item in dataclasses.fields(section):
                value = getattr(section, item.name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
                    raise ConfigError(f"{item.name} must be positive, not {value}")
        if self.limits.connection_unsent_bytes_max < self.limits.max_frame_bytes:
            raise ConfigError("[limits] connection_unsent_bytes_max must be at least "
                              "max_frame_bytes: one reply must fit")
        if min(self.limits.store_memtable_bytes, self.limits.store_block_cache_bytes) < 1 << 20:
            raise ConfigError("[limits] store_memtable_bytes and store_block_cache_bytes must "
                              "be at least 1 MiB")

    def _validate_sections(self) -> None:
        """[snapshot], [catchup] and [auditor]."""
        snapshot = self.snapshot
        if (snapshot.per_bucket_max < 1 or snapshot.open_max < 1 or snapshot.headroom_bytes_min < 0
                or not 0 <= snapshot.headroom_fraction_min < 1):
            raise ConfigError("[snapshot] per_bucket_max and open_max must be >= 1, "
                              "headroom_bytes_min >= 0, headroom_fraction_min in [0, 1)")
        catchup = self.catchup
        if (catchup.chunk_bytes < 4096
                or catchup.rate_bytes_per_s < 0 or catchup.deadline_s <= 0
                or catchup.source_timeout_s <= 0
                or catchup.kept < 1 or catchup.serving_max < 1 or catchup.lease_s < 0
                or not 0 <= catchup.unsafe_cut_at_fraction < 1):
            raise ConfigError("[catchup] chunk_bytes must be >= 4096, "
                              "rate_bytes_per_s >= 0 (0: no limit), deadline_s and "
                              "source_timeout_s > 0, kept and "
                              "serving_max >= 1, lease_s >= 0, unsafe_cut_at_fraction in "
                              "[0, 1)")
        auditor = self.auditor
        if auditor.periodic_interval_s < 0 or auditor.rows_per_s <= 0:
            raise ConfigError("[auditor] periodic_interval_s must be >= 0 (0: off) and "
                              "rows_per_s positive")
        if not 0 <= auditor.jitter_fraction < 1:
            raise ConfigError("[auditor] jitter_fraction must be in [0, 1), not "
                              f"{auditor.jitter_fraction}")


SECRET_MODE_MASK = 0o077   # a secret file readable by group or others is refused


def read_secret(path: Path) -> str:
    """The Raft secret in ``path``: a private file holding one non-empty line."""
    try:
        mode = path.stat().st_mode
        secret = path.read_text().strip()
    except OSError as error:
        raise ConfigError(f"cannot read raft_secret_file {path}: {error}") from None
    if mode & SECRET_MODE_MASK:
        raise ConfigError(f"raft_secret_file {path} is readable by others (mode "
                          f"{mode & 0o777:o}): chmod 600 it")
    if not secret:
        raise ConfigError(f"raft_secret_file {path} is empty")
    return secret


_NAME_LISTS = ("admins", "admin_groups", "readonly_admins", "readonly_admin_groups",
               "blacklist_users", "blacklist_groups", "read_blacklist_users",
               "read_blacklist_groups", "decommissioned")


def _validate_verify(verify: Verify) -> None:
    if (verify.interval_s < 0 or verify.scrub_rows_per_s < 0 or verify.build_rows_per_s <= 0
            or not 1 <= verify.leaf_bits <= 24 or not 1 <= verify.fanout_bits <= 8
            or verify.keep < 1):
        raise ConfigError("[verify] interval_s and scrub_rows_per_s must be >= 0 (0: off), "
                          "build_rows_per_s > 0, leaf_bits in 1..24, fanout_bits in 1..8, "
                          "keep >= 1")


def _names(value: Any, key: str) -> tuple[str, ...]:
    """A list of user or group names from the TOML, as a tuple."""
    if not isinstance(value, list | tuple) or not all(
            isinstance(name, str) and name for name in value):
        raise ConfigError(f"{key} must be a list of non-empty names, not {value!r}")
    return tuple(value)


def read_group_mapping(path: Path) -> dict[str, tuple[str, ...]]:
    """user -> groups from a TOML file (``alice = ["dev", "ops"]``), or JSON when the
    name ends in ``.json``. The first group of a user is its primary group."""
    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read group_mapping_file {path}: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"group_mapping_file {path}: expected user = [groups], not "
                          f"{type(raw).__name__}")
    return {user: _names(groups, f"group_mapping_file {path}: {user}")
            for user, groups in raw.items()}


def _section(cls: type[Any], values: dict[str, Any], where: str) -> Any:
    if cls is Raft and "secret" in values:
        raise ConfigError("[raft] secret: keep the secret in a file of mode 0600 and name "
                          "it with the top-level raft_secret_file")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown keys in [{where}]: {sorted(unknown)}")
    return cls(**values)


def load(path: Path | None, **overrides: Any) -> ServerConfig:
    """The configuration from ``path`` (optional) with ``overrides`` (flags) on top."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise ConfigError(f"cannot read config {path}: {error}") from None
    known = {f.name for f in dataclasses.fields(ServerConfig)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown keys in {path}: {sorted(unknown)}")
    try:
        if "nodes" in values:
            values["nodes"] = tuple(_section(NodeAddress, n, "nodes") for n in values["nodes"])
        for name, cls in (("limits", Limits), ("batch", Batch), ("raft", Raft), ("audit", Audit),
                          ("auditor", Auditor), ("verify", Verify), ("tls", Tls),
                          ("tokens", Tokens), ("purge", Purge), ("fso", Fso),
                          ("snapshot", Snapshot), ("catchup", Catchup), ("upgrade", Upgrade)):
            if name in values:
                values[name] = _section(cls, values[name], name)
        for name in ("data_dir", "trace_path", "raft_secret_file"):
            if values.get(name) is not None:
                values[name] = Path(values[name])
        for name in _NAME_LISTS:
            if name in values:
                values[name] = _names(values[name], name)
        if "serving_shard" in values:
            raise ConfigError("serving_shard: a node sets it for its shard processes; set "
                              "shards instead")
        if "user_groups" in values:
            raise ConfigError("user_groups: keep the groups in a file and name it with "
                              "group_mapping_file")
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values.get("group_mapping_file") is not None:
            values["group_mapping_file"] = Path(values["group_mapping_file"])
            values["user_groups"] = read_group_mapping(values["group_mapping_file"])
        if "node_id" not in values and values.get("nodes"):
            values["node_id"] = values["nodes"][0].id
        if values.get("raft_secret_file") is not None:
            raft = values.get("raft", Raft())
            values["raft"] = dataclasses.replace(raft, secret=read_secret(
                values["raft_secret_file"]))
        return ServerConfig(**values).validate()
    except TypeError as error:
        raise ConfigError(f"invalid configuration: {error}") from None
