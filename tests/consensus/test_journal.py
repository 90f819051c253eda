"""The group-commit Raft journal: what reaches the file, when, and what a restart finds;
its sync thread, which the Raft thread never waits for."""

from __future__ import annotations

import os
import select
import threading
import time
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from om.consensus.pysyncobj.journal import (
    MAGIC,
    GroupCommitJournal,
    JournalSpec,
    decode_records,
    encode_record,
)


def _open(path: Path, durable: bool = True) -> GroupCommitJournal:
    return GroupCommitJournal(path, JournalSpec(durable=durable,
                                                snapshot_file=path.parent / "dump"))


def _reopened(journal: GroupCommitJournal, path: Path) -> GroupCommitJournal:
    journal._destroy()
    return _open(path)


def _crash(journal: GroupCommitJournal) -> None:
    """The process dies once the sync thread has done what was queued: no close-time
    sync, no meta save."""
    journal._queue.put(None)
    journal._thread.join()
    os.close(journal._fd)
    os.close(journal.wake_fd)


def _until_synced(journal: GroupCommitJournal, index: int, timeout_s: float = 5.0) -> None:
    """Collects, as the Raft thread does when woken, until ``index`` is synced."""
    deadline = time.monotonic() + timeout_s
    while journal.synced_index < index:
        assert time.monotonic() < deadline, f"index {index} never synced"
        select.select([journal.wake_fd], [], [], 0.05)
        journal.collect()


def test_appends_reach_the_file_only_at_sync(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal = _open(path)
    journal.add(b"a", 1, 1)
    journal.add(b"b", 2, 1)
    assert path.read_bytes() == MAGIC, "nothing is written before sync"
    assert journal.synced_index == 0
    journal.sync()
    assert journal.synced_index == 2
    assert journal.syncs == 1, "one write and one fdatasync for the group"
    assert decode_records(path.read_bytes())[0] == [(b"a", 1, 1), (b"b", 2, 1)]
    journal.sync()
    assert journal.syncs == 1, "a sync with nothing new does nothing"
    journal._destroy()


def test_unsynced_appends_are_lost_by_a_crash_and_synced_ones_are_not(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal = _open(path)
    journal.add(b"kept", 1, 1)
    journal.sync()
    journal.add(b"lost", 2, 1)
    _crash(journal)
    restarted = _open(path)
    assert list(restarted[:]) == [(b"kept", 1, 1)]
    restarted._destroy()


def test_a_torn_or_corrupt_tail_is_dropped_and_truncated(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal = _open(path)
    for index in range(1, 4):
        journal.add(b"x" * index, index, 1)
    journal._destroy()
    whole = path.read_bytes()
    path.write_bytes(whole[:-2])  # the last record torn
    journal = _open(path)
    assert [entry[1] for entry in journal[:]] == [1, 2]
    assert path.stat().st_size == len(whole) - len(encode_record(b"xxx", 3, 1))
    journal._destroy()
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0xFF  # a flipped bit in the last record: its crc fails
    path.write_bytes(bytes(damaged))
    journal = _open(path)
    assert [entry[1] for entry in journal[:]] == [1]
    journal._destroy()


def test_delete_from_truncates_written_and_buffered_records(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal = _open(path)
    for index in range(1, 6):
        journal.add(b"w", index, 1)
    journal.sync()
    journal.add(b"p", 6, 2)
    journal.deleteEntriesFrom(3)          # positions 3.. : indices 4, 5 (written), 6 (buffered)
    assert journal.synced_index == 3
    journal.add(b"new", 4, 3)
    journal.sync()
    journal = _reopened(journal, path)
    assert list(journal[:]) == [(b"w", 1, 1), (b"w", 2, 1), (b"w", 3, 1), (b"new", 4, 3)]
    journal.deleteEntriesFrom(4)  # only the buffer of nothing: a no-op
    journal._destroy()


def test_a_truncation_reaches_the_file_with_the_next_sync(tmp_path: Path) -> None:
    """pysyncobj drops and re-appends entries a follower already has: the file must
    keep the acknowledged records until what replaces them is written."""
    path = tmp_path / "raft.wal"
    journal = _open(path)
    for index in range(1, 4):
        journal.add(b"acked", index, 1)
    journal.sync()
    journal.deleteEntriesFrom(1)          # indices 2 and 3 dropped in memory...
    _crash(journal)                       # ...and a crash before the next sync
    reopened = _open(path)
    assert [entry[1] for entry in reopened[:]] == [1, 2, 3], "acknowledged records kept"
    reopened.deleteEntriesFrom(1)
    reopened.add(b"again", 2, 1)          # the same index appended again, then synced
    reopened.sync()
    reopened = _reopened(reopened, path)
    assert list(reopened[:]) == [(b"acked", 1, 1), (b"again", 2, 1)], "the tail is cut"
    reopened._destroy()


def test_delete_to_keeps_the_suffix_and_syncs_the_snapshot_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "raft.wal"
    (tmp_path / "dump").write_bytes(b"snapshot")
    synced: list[str] = []
    monkeypatch.setattr("om.consensus.pysyncobj.journal.fsync_path",
                        lambda p: synced.append(Path(p).name))
    journal = _open(path)
    for index in range(1, 6):
        journal.add(b"e", index, 1)
    journal.sync()
    synced.clear()
    journal.deleteEntriesTo(3)
    journal.sync()                        # the sync thread rewrote the file
    assert synced[:2] == ["dump", tmp_path.name], "the snapshot is synced before compaction"
    assert [entry[1] for entry in journal[:]] == [4, 5]
    journal.add(b"f", 6, 1)
    journal.sync()
    journal = _reopened(journal, path)
    assert [entry[1] for entry in journal[:]] == [4, 5, 6]
    journal._destroy()


def test_term_and_vote_are_synced_at_once_and_commit_index_lazily(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal = _open(path)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    journal.setRaftCommitIndex(42)
    _crash(journal)        # before the one-second timer
    restarted = _open(path)
    assert restarted.getCurrentTerm() == 7
    assert restarted.getVotedForNodeId() == "127.0.0.1:1"
    assert restarted.getRaftCommitIndex() == 1, "the commit index is only a hint"
    restarted.setRaftCommitIndex(42)
    restarted.onOneSecondTimer()
    restarted = _reopened(restarted, path)
    assert restarted.getRaftCommitIndex() == 42
    restarted._destroy()


def test_a_file_of_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    path.write_bytes(b"PYSYNCOBJ\0\0\0")
    with pytest.raises(AssertionError, match="not a journal"):
        _open(path)


def test_indices_must_be_consecutive(tmp_path: Path) -> None:
    journal = _open(tmp_path / "raft.wal")
    journal.add(b"a", 5, 1)
    with pytest.raises(AssertionError, match="consecutive"):
        journal.add(b"b", 7, 1)
    journal._destroy()


def _stallable(path: Path) -> tuple[GroupCommitJournal, Path]:
    stall = path.with_name("stall")
    return GroupCommitJournal(path, JournalSpec(durable=True, snapshot_file=path.parent / "d",
                                                stall_file=stall)), stall


def test_a_sync_never_waits_on_the_raft_thread_and_appends_meanwhile_go_next(
        tmp_path: Path) -> None:
    journal, stall = _stallable(tmp_path / "raft.wal")
    stall.touch()                         # the disk hangs
    journal.add(b"a", 1, 1)
    started = time.monotonic()
    journal.begin_sync()
    journal.add(b"b", 2, 1)
    journal.begin_sync()                  # one sync outstanding: b waits for the next
    journal.collect()
    assert time.monotonic() - started < 0.5, "begin_sync waited for the disk"
    assert journal.synced_index == 0, "nothing counts as synced while the disk hangs"
    stall.unlink()
    _until_synced(journal, 1)
    assert journal.synced_index == 1, "the outstanding sync held only a"
    journal.begin_sync()
    _until_synced(journal, 2)
    assert journal.syncs == 2
    journal._destroy()


def test_a_truncation_during_a_sync_lowers_what_that_sync_vouches_for(
        tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal, stall = _stallable(path)
    for index in range(1, 4):
        journal.add(b"old", index, 1)
    stall.touch()
    journal.begin_sync()                  # writes 1-3...
    journal.deleteEntriesFrom(1)          # ...while 2 and 3 are replaced
    journal.add(b"new", 2, 2)
    stall.unlink()
    _until_synced(journal, 1)
    journal.collect()
    assert journal.synced_index == 1, "the sync wrote the old 2, not the new one"
    journal.sync()
    assert journal.synced_index == 2
    journal = _reopened(journal, path)
    assert list(journal[:]) == [(b"old", 1, 1), (b"new", 2, 2)]
    journal._destroy()


def test_a_lazy_commit_index_save_never_replaces_a_newer_term(tmp_path: Path) -> None:
    path = tmp_path / "raft.wal"
    journal, stall = _stallable(path)
    journal.setCurrentTerm(7, "a")
    stall.touch()
    journal.setRaftCommitIndex(9)
    journal.onOneSecondTimer()            # a save of term 7 queued behind the stall
    started = time.monotonic()
    journal.setCurrentTerm(8, "b")        # synchronous: it does not wait for the stall
    assert time.monotonic() - started < 0.5
    stall.unlink()
    journal.sync()
    _crash(journal)
    restarted = _open(path)
    assert (restarted.getCurrentTerm(), restarted.getVotedForNodeId()) == (8, "b")
    restarted._destroy()


class _Stopped(Exception):
    pass


def test_an_io_error_on_the_sync_thread_fails_stop_on_the_raft_thread(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    stopped_on: list[threading.Thread] = []

    def fail_stop() -> NoReturn:
        stopped_on.append(threading.current_thread())
        raise _Stopped

    path = tmp_path / "raft.wal"
    journal = GroupCommitJournal(path, JournalSpec(durable=True, snapshot_file=tmp_path / "d",
                                                   fail_stop=fail_stop))
    os.close(journal._fd)
    journal._fd = os.open(path, os.O_RDONLY)   # every write fails (EBADF)
    journal.add(b"a", 1, 1)
    with pytest.raises(_Stopped):
        journal.sync()
    assert stopped_on == [threading.current_thread()]
    assert journal.synced_index == 0
    assert "cannot write the Raft journal" in caplog.text
    _crash(journal)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("add"), st.binary(max_size=40)),
    st.tuples(st.just("sync"), st.just(b"")),
    st.tuples(st.just("begin"), st.just(b"")),
    st.tuples(st.just("collect"), st.just(b"")),
    st.tuples(st.just("truncate"), st.integers(0, 30)),
    st.tuples(st.just("compact"), st.integers(0, 30)),
), max_size=40))
def test_after_a_crash_the_file_holds_exactly_the_synced_entries(
        tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, object]]) -> None:
    """Model check: whatever the history, a restart (once the sync thread has done
    what it was given) finds the entries that were in memory when the last sync or
    compaction was handed to it, no more and no less: appends and truncations
    reach the file together, at a sync; and ``synced_index`` never vouches for an
    entry the file does not hold."""
    path = tmp_path_factory.mktemp("journal") / "raft.wal"
    journal = _open(path, durable=False)
    durable_view: list[tuple[bytes, int, int]] = []
    term = 1
    first = 1     # the index an empty journal continues at: never one compacted away
    for operation, argument in operations:
        if operation == "add":
            index = journal.last_index + 1 if len(journal) else first
            assert isinstance(argument, bytes)
            journal.add(argument, index, term)
        elif operation == "sync":
            journal.sync()
            durable_view = list(journal[:])
        elif operation == "begin":
            outstanding = len(journal._outstanding)
            journal.begin_sync()
            if len(journal._outstanding) > outstanding:   # handed to the sync thread
                durable_view = list(journal[:])
        elif operation == "collect":
            journal.collect()
        elif operation == "truncate":
            assert isinstance(argument, int)
            journal.deleteEntriesFrom(argument)
            term += 1
        else:
            assert isinstance(argument, int)
            if len(journal) and argument > 0:
                first = journal[min(argument, len(journal)) - 1][1] + 1
            journal.deleteEntriesTo(argument)
            if argument > 0:                              # the file rewritten
                durable_view = list(journal[:])
    journal.collect()
    vouched = [entry for entry in journal[:] if entry[1] <= journal.synced_index]
    _crash(journal)
    restarted = _open(path, durable=False)
    assert list(restarted[:]) == durable_view
    assert all(entry in durable_view for entry in vouched), "synced_index claimed too much"
    restarted._destroy()
