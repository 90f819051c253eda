"""The old flow's apply never executes a log position twice (``apply_entry`` skips a
position at or below the applied one: ``om/statemachine/replicated_apply.py``).

Raft hands a node entries it already applied: after a restart it replays its journal
from the last snapshot, below the position the store holds, and a re-delivery can
repeat one. The leader flow's apply writes bytes, so a second write of them changes
nothing; the old flow *executes* each entry, and a request run again against later
state answers differently. These tests replay writes whose second run would differ
(a CreateKey that would reopen a committed key, a CommitKey and a DeleteKey that would
fail with KEY_NOT_FOUND, a CreateVolume that would find its volume) and check that
nothing moved: the stored answers, the open keys, the bucket's usage, the applied
position, every table's digest. With the skip removed both fail (checked by hand: the
restart's replay stores VOLUME_ALREADY_EXISTS and BUCKET_ALREADY_EXISTS as the first
two calls' answers and reruns the key's whole life; the re-delivered delete remembers
KEY_NOT_FOUND for a delete that succeeded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from om.client import requests as build
from om.executor.change_recorder import ChangeRecorder
from om.executor.context import ExecContext, Limits, NoReservations
from om.executor.registry import dispatch
from om.protocol import om_pb2
from om.schema import tables
from om.statemachine import log_entry
from om.statemachine.replicated_apply import MemoryRetryCache, ReplicatedStateMachine
from om.statemachine.store import Store

CLIENT_ID = "replay-client"
TERM = 1
START_MS = 1_700_000_000_000
KEY_BYTES = 100


def _fail_stop() -> None:
    raise AssertionError("the double buffer failed")


def _machine(store: Store) -> ReplicatedStateMachine:
    return ReplicatedStateMachine(store, Limits(), MemoryRetryCache(600_000, 1000), 1000,
                                  _fail_stop)


def _entry(request: om_pb2.OMRequest, position: int) -> bytes:
    """The log entry of ``request`` at ``position``, as the old flow's leader writes it:
    call id, managed index and time fixed by the position (one write per entry)."""
    request.client_id = CLIENT_ID
    request.call_id = position
    request.user = "alice"
    return log_entry.encode_request(om_pb2.ReplicatedRequest(
        request=request, timestamp_ms=START_MS + position, managed_index=position,
        leader_id="om1", term=TERM))


def _apply(machine: ReplicatedStateMachine, position: int, entry: bytes) -> om_pb2.OMResponse:
    result = machine.apply_entry(position, entry)
    assert result.applied
    assert machine.applied_index == position
    return om_pb2.OMResponse.FromString(result.response)


def _stored_answer(store: Store, call_id: int) -> om_pb2.OMResponse:
    raw = store.get(om_pb2.CLIENT_REQUEST_REPLY, tables.reply_key(CLIENT_ID, call_id))
    assert raw is not None, f"no stored answer for call {call_id}"
    reply = om_pb2.ClientRequestReply.FromString(raw)
    return om_pb2.OMResponse.FromString(reply.response)


def _run_again(machine: ReplicatedStateMachine, entry: bytes) -> om_pb2.OMResponse:
    """What the entry's request answers if executed now against the machine's state
    (nothing is written): the premise that a second run would differ."""
    message = log_entry.decode(entry)
    assert isinstance(message, om_pb2.ReplicatedRequest)
    ctx = ExecContext(message.request.user, machine.managed_index + 1, START_MS + 1_000,
                      NoReservations(), Limits())
    return dispatch(message.request, machine.view, ChangeRecorder(), ctx)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "db")
    yield opened
    opened.close()


@pytest.fixture
def log(store: Store) -> list[bytes]:
    """Positions 1..5 applied and flushed to ``store``: a volume, a bucket with a space
    quota, a key opened, committed and deleted. Returns the entries (the first is at
    position 1)."""
    machine = _machine(store)
    entries = [_entry(build.create_volume("vol"), 1),
               _entry(build.create_bucket("vol", "bkt", quota_in_bytes=10 * KEY_BYTES), 2),
               _entry(build.create_key("vol", "bkt", "k", KEY_BYTES), 3)]
    answers = [_apply(machine, position, entry)
               for position, entry in enumerate(entries, start=1)]
    assert [a.status for a in answers] == [om_pb2.OK] * 3
    session = answers[2].create_key.client_session_id
    entries.append(_entry(build.commit_key("vol", "bkt", "k", session, KEY_BYTES), 4))
    entries.append(_entry(build.delete_key("vol", "bkt", "k"), 5))
    assert _apply(machine, 4, entries[3]).status == om_pb2.OK
    assert _apply(machine, 5, entries[4]).status == om_pb2.OK
    machine.close()
    assert store.transaction_info().applied_index == 5
    return entries


def _bucket(store: Store) -> om_pb2.BucketInfo:
    raw = store.get(om_pb2.BUCKET, tables.bucket_key("vol", "bkt"))
    assert raw is not None
    return om_pb2.BucketInfo.FromString(raw)


def test_a_restart_replaying_the_whole_log_executes_nothing_twice(
        store: Store, log: list[bytes]) -> None:
    machine = _machine(store)             # a restart: positions read from the store
    assert machine.applied_index == 5
    before = store.digests()
    assert _bucket(store).used_bytes == 0
    assert store.count(om_pb2.OPEN_KEY) == 0
    # The premise: run again now, these writes would answer differently.
    assert _run_again(machine, log[0]).status == om_pb2.VOLUME_ALREADY_EXISTS
    assert _run_again(machine, log[2]).status == om_pb2.OK        # reopens the key
    assert _run_again(machine, log[3]).status == om_pb2.KEY_NOT_FOUND
    assert _run_again(machine, log[4]).status == om_pb2.KEY_NOT_FOUND
    results = [machine.apply_entry(position, entry)
               for position, entry in enumerate(log, start=1)]
    remembered = len(machine.retry)
    machine.close()                       # flushes whatever the replay queued
    assert store.count(om_pb2.OPEN_KEY) == 0, "a replayed CreateKey reopened the key"
    assert _bucket(store).used_bytes == 0
    assert [_stored_answer(store, call).status for call in range(1, 6)] == [om_pb2.OK] * 5
    assert store.transaction_info().applied_index == 5
    assert store.digests() == before
    assert [r.applied for r in results] == [False] * 5
    assert remembered == 0                # nothing executed, nothing remembered
    machine = _machine(store)             # the log goes on where it stopped
    assert _apply(machine, 6, _entry(build.delete_volume("vol"), 6)).status \
        == om_pb2.VOLUME_NOT_EMPTY
    machine.close()


def test_a_redelivered_delete_keeps_its_answer(store: Store, log: list[bytes]) -> None:
    machine = _machine(store)
    assert _run_again(machine, log[4]).status == om_pb2.KEY_NOT_FOUND
    before = store.digests()
    result = machine.apply_entry(5, log[4])
    assert machine.retry.lookup((CLIENT_ID, 5), START_MS + 5) is None
    assert machine.applied_index == 5
    machine.close()                       # flushes whatever the re-delivery queued
    assert _stored_answer(store, 5).status == om_pb2.OK
    assert store.digests() == before
    assert not result.applied
