"""Runs request handlers the way the leader does, synchronously, on a real store.

``Harness.run`` checks each request's fields as the gate does
(``om/gatekeeper/validation.py``, which refuses a malformed request before any
handler), gives it a fresh managed index (1, 2, 3, ...), a time
from a fake clock and the quota reservations a test passes (none by default),
executes it through ``registry.dispatch`` against the store, and, when the
request succeeded and changed something, packs its recorder into a
``PersistDbBatch`` with ``BatchBuilder`` and applies it with
``StateMachine.apply`` at the next log position. So what a handler recorded is
exactly what later requests and the table readers see.

Opening a RocksDB store costs tens of milliseconds, so tests share one store
per module and every ``Harness`` starts by wiping it (``wipe``).
"""

from __future__ import annotations

from collections.abc import Iterator

from om.client import requests as build
from om.executor import registry
from om.executor.batcher import BatchBuilder, PendingWrite
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, Limits, NoReservations, QuotaReservations
from om.executor.registry import dispatch, error_response
from om.gatekeeper import validation
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.apply import StateMachine
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store

CLIENT_ID = "test-client"
LEADER_ID = "test-leader"
TERM = 1
START_MS = 1_700_000_000_000
BATCH_BYTES_MAX = 1 << 30


def status_name(response: om_pb2.OMResponse) -> str:
    """The response's status as its enum name, for readable assertion failures."""
    return om_pb2.Status.Name(response.status)


def wipe(store: Store) -> None:
    """Deletes every row of every table of ``store``."""
    batch = store.new_batch()
    for table in tables.TABLE_NAMES:
        for key, _ in store.iterate(table):
            store.batch_delete(batch, table, key)
    store.write(batch)
    assert all(store.count(table) == 0 for table in tables.TABLE_NAMES)


class FakeClock:
    """A clock that moves only when a test says so."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def advance(self, ms: int) -> int:
        """Moves the clock forward by ``ms`` and returns the new time."""
        assert ms > 0
        self.now_ms += ms
        return self.now_ms


class FakeReservations:
    """Quota that imaginary in-flight requests hold, per (table, row key)."""

    def __init__(self) -> None:
        self.held: dict[tuple[int, bytes], tuple[int, int]] = {}
        self.asked: list[tuple[int, bytes]] = []

    def hold(self, table: int, key: bytes, bytes_: int = 0, namespace: int = 0) -> None:
        """Records that in-flight requests reserved these amounts against the row."""
        self.held[(table, key)] = (bytes_, namespace)

    def reserved(self, table: int, key: bytes) -> tuple[int, int]:
        self.asked.append((table, key))
        return self.held.get((table, key), (0, 0))


class HandlerError(AssertionError):
    """A request a test expected to succeed did not."""


LEADER = "leader"
OLD = "replicated"


def _fail_stop() -> None:
    raise AssertionError("the double buffer failed")


class Harness:
    """One node's executor and state machine over ``store``, one request at a time.

    ``flow`` picks the execution strategy: LEADER executes here and applies the
    recorded changes as a batch; OLD replicates the request and lets the old
    flow's apply execute it (then flushes its double buffer, so the store shows it).
    """

    def __init__(self, store: Store, limits: Limits | None = None, flow: str = LEADER) -> None:
        assert flow in (LEADER, OLD)
        wipe(store)
        self.store = store
        self.flow = flow
        self.clock = FakeClock()
        self._limits = limits if limits is not None else Limits()
        self.state_machine = StateMachine(store)
        self.old_flow: ReplicatedStateMachine | None = None
        if flow == OLD:
            self.old_flow = ReplicatedStateMachine(store, self._limits,
                                                   MemoryRetryCache(600_000, 1000), 1000,
                                                   _fail_stop)
        assert self.state_machine.applied_index == 0
        self.managed_index = 0        # of the last request run
        self.position = 0             # log position of the last applied batch
        self.call_id = 0
        self.last_recorder = ChangeRecorder()

    # ------------------------------------------------------------- running ---

    @property
    def limits(self) -> Limits:
        return self._limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._limits = limits
        if self.old_flow is not None:
            self.old_flow.limits = limits

    def close(self) -> None:
        """Stops the old flow's double buffer."""
        if self.old_flow is not None:
            self.old_flow.close()

    def data_digests(self) -> dict[str, str]:
        """Digests of every table but transactionInfoTable (positions differ by flow) and
        the retry cache's two tables (the old flow stores every answer, a failure's too)."""
        digests = self.store.digests()
        for table in ("transactionInfoTable", "clientRequestReplyTable",
                      "clientRequestExpiryTable"):
            del digests[table]
        return digests

    def run(self, request: om_pb2.OMRequest, user: str = "alice",
            reservations: QuotaReservations | None = None) -> om_pb2.OMResponse:
        """Executes ``request`` as this flow's leader would and applies what it wrote."""
        self.managed_index += 1
        self.call_id += 1
        request.client_id = CLIENT_ID
        request.call_id = self.call_id
        request.user = user
        refusal = validation.problem(request, self._limits)
        if refusal is not None:
            self.last_recorder = ChangeRecorder()
            return error_response(request, refusal.status, refusal.message)
        if self.old_flow is not None:
            assert reservations is None, "reservations exist only in the leader flow"
            return self._run_old_flow(request, self.old_flow)
        ctx = ExecContext(
            user=user,
            managed_index=self.managed_index,
            now_ms=self.clock.now_ms,
            reservations=reservations if reservations is not None else NoReservations(),
            limits=self._limits,
        )
        recorder = ChangeRecorder()
        response = dispatch(request, self.store, recorder, ctx)
        self.last_recorder = recorder
        if response.status == om_pb2.OK and not recorder.empty:
            self._apply(recorder, ctx.managed_index)
        return response

    def _run_old_flow(self, request: om_pb2.OMRequest,
                      machine: ReplicatedStateMachine) -> om_pb2.OMResponse:
        self.last_recorder = ChangeRecorder()
        if not registry.KINDS[request.cmd_type].write:
            ctx = ExecContext(request.user, 0, self.clock.now_ms, NoReservations(), self._limits)
            return dispatch(request, machine.view, ChangeRecorder(), ctx)
        entry = om_pb2.ReplicatedRequest(request=request, timestamp_ms=self.clock.now_ms,
                                         managed_index=self.managed_index,
                                         leader_id=LEADER_ID, term=TERM)
        self.position += 1
        result = machine.apply_entry(self.position, log_entry.encode_request(entry))
        assert result.applied
        machine.quiesce()
        return om_pb2.OMResponse.FromString(result.response)

    def _apply(self, recorder: ChangeRecorder, managed_index: int) -> None:
        builder = BatchBuilder(bytes_max=BATCH_BYTES_MAX, writes_max=1)
        builder.add(PendingWrite.of(managed_index, recorder))
        self.position += 1
        batch = om_pb2.PersistDbBatch.FromString(builder.seal(
            batch_id=self.position, timestamp_ms=self.clock.now_ms, leader_id=LEADER_ID,
            term=TERM))
        result = self.state_machine.apply(self.position, batch)
        assert result.applied
        assert result.managed_index == managed_index

    def ok(self, request: om_pb2.OMRequest, user: str = "alice",
           reservations: QuotaReservations | None = None) -> om_pb2.OMResponse:
        """Runs ``request`` and raises ``HandlerError`` unless it succeeded."""
        response = self.run(request, user=user, reservations=reservations)
        if response.status != om_pb2.OK:
            raise HandlerError(f"{om_pb2.Type.Name(request.cmd_type)} failed: "
                               f"{status_name(response)}: {response.message}")
        return response

    # ------------------------------------------------------- common set-ups ---

    def create_volume(self, volume: str, quota_in_bytes: int = 0, quota_in_namespace: int = 0,
                      owner: str = "") -> om_pb2.VolumeInfo:
        request = build.create_volume(volume, quota_in_bytes, quota_in_namespace, owner)
        return self.ok(request).create_volume.volume_info

    def create_bucket(self, volume: str, bucket: str, quota_in_bytes: int = 0,
                      quota_in_namespace: int = 0, owner: str = "") -> om_pb2.BucketInfo:
        request = build.create_bucket(volume, bucket, quota_in_bytes, quota_in_namespace, owner)
        return self.ok(request).create_bucket.bucket_info

    def open_key(self, volume: str, bucket: str, key: str, data_size: int = 0,
                 replication_factor: int = 0) -> om_pb2.CreateKeyResponse:
        """CreateKey; returns the response carrying the open key and its session id."""
        return self.ok(build.create_key(volume, bucket, key, data_size,
                                        replication_factor)).create_key

    def commit(self, volume: str, bucket: str, key: str, session_id: int,
               data_size: int) -> om_pb2.KeyInfo:
        request = build.commit_key(volume, bucket, key, session_id, data_size)
        return self.ok(request).commit_key.key_info

    def put_key(self, volume: str, bucket: str, key: str, data_size: int = 0,
                replication_factor: int = 0) -> om_pb2.KeyInfo:
        """CreateKey then CommitKey of ``data_size`` bytes; returns the committed row."""
        opened = self.open_key(volume, bucket, key, data_size, replication_factor)
        return self.commit(volume, bucket, key, opened.client_session_id, data_size)

    # ------------------------------------------------------------- reading ---

    def volume_row(self, volume: str) -> om_pb2.VolumeInfo | None:
        raw = self.store.get(om_pb2.VOLUME, tables.volume_key(volume))
        return None if raw is None else om_pb2.VolumeInfo.FromString(raw)

    def bucket_row(self, volume: str, bucket: str) -> om_pb2.BucketInfo | None:
        raw = self.store.get(om_pb2.BUCKET, tables.bucket_key(volume, bucket))
        return None if raw is None else om_pb2.BucketInfo.FromString(raw)

    def key_row(self, volume: str, bucket: str, key: str) -> om_pb2.KeyInfo | None:
        raw = self.store.get(om_pb2.KEY, tables.key_key(volume, bucket, key))
        return None if raw is None else om_pb2.KeyInfo.FromString(raw)

    def open_key_row(self, volume: str, bucket: str, key: str,
                     session_id: int) -> om_pb2.KeyInfo | None:
        raw = self.store.get(om_pb2.OPEN_KEY,
                             tables.open_key_key(volume, bucket, key, session_id))
        return None if raw is None else om_pb2.KeyInfo.FromString(raw)

    def deleted_row(self, volume: str, bucket: str, key: str,
                    object_id: int) -> om_pb2.RepeatedKeyInfo | None:
        raw = self.store.get(om_pb2.DELETED, tables.deleted_key(volume, bucket, key, object_id))
        return None if raw is None else om_pb2.RepeatedKeyInfo.FromString(raw)

    def keys_of(self, table: tables.TableId) -> list[bytes]:
        """Every row key of ``table``, in order."""
        return [key for key, _ in self.store.iterate(table)]

    def rows(self) -> Iterator[tuple[int, bytes, bytes]]:
        """Every (table, key, value) of the data tables."""
        for table in tables.TABLE_NAMES:
            if table != om_pb2.TRANSACTION_INFO:
                for key, value in self.store.iterate(table):
                    yield table, key, value

    def usage(self, volume: str, bucket: str) -> tuple[int, int]:
        """The bucket's (used_bytes, used_namespace)."""
        row = self.bucket_row(volume, bucket)
        assert row is not None, f"bucket /{volume}/{bucket} is missing"
        return row.used_bytes, row.used_namespace
