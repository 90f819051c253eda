"""The request services' settings: one ``LeaderConfig`` for the template and both
flows (``om/node/parts.py`` builds it from the server configuration, whose
dataclasses state every default that a server configures, once)."""

from __future__ import annotations

from dataclasses import dataclass, field

from om.config import FSO_LOCK_OBJECT_ID, READ_LINEARIZABLE
from om.config import Limits as ServerLimits
from om.executor.context import Limits
from om.flows.batch_pipeline import BatchConfig
from om.flows.purge import PurgeConfig
from om.gatekeeper.authorize import AclPolicy
from om.gatekeeper.retry_cache import RetryCacheConfig, RetryKeys, retry_key
from om.gatekeeper.shard_gate import ShardGate


@dataclass(frozen=True)
class LeaderConfig:
    """Limits and policies of the request services (the defaults of those a server
    configures are ``om.config``'s, stated there once)."""

    lock_timeout_s: float = ServerLimits.lock_timeout_s
    in_flight_max: int = ServerLimits.in_flight_max
    retry_wait_s: float = 60.0
    sweep_interval_s: float = ServerLimits.retry_sweep_interval_s
    sweep_rows_max: int = 10_000
    retry: RetryCacheConfig = field(default_factory=RetryCacheConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    acl: AclPolicy = field(default_factory=AclPolicy)
    limits: Limits = field(default_factory=Limits)
    retry_keys: RetryKeys = retry_key   # ForgetfulRetryKeys: a fault for chaos's red case
    read_mode: str = READ_LINEARIZABLE
    purge: PurgeConfig = field(default_factory=PurgeConfig)
    fso_lock_plan: str = FSO_LOCK_OBJECT_ID   # [fso] lock_plan: "object-id" or "bucket"
    shard_gate: ShardGate | None = None   # with shards: which requests this shard answers
