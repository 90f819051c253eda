"""The Raft journal: an append-only file with group commit, replacing pysyncobj's.

pysyncobj's own ``FileJournal`` writes every entry into an mmap'd file and
never syncs it, nor its term and vote. Syncing it means ``mmap.flush`` (msync),
which measured ~1.7 ms per entry on a 2-core development host and holds the GIL, where
``write`` + ``fdatasync`` of the same bytes takes ~0.2 ms and releases it.

This journal keeps pysyncobj's interface (a list of ``(command, index, term)``
in memory, the file only for restarts) and changes how bytes reach the disk:

* ``add`` only appends the record to an in-memory buffer. ``begin_sync`` hands
  the buffer to the journal's **sync thread**, which writes it with one
  ``pwrite`` and, when durable, one ``fdatasync``: a group commit of everything
  appended since the last sync. While that sync is outstanding, further
  appends wait for the next one. ``begin_sync`` never waits for the disk, so
  the Raft thread that calls it goes on sending heartbeats and answering
  (pre-)votes while the disk is slow (as etcd keeps its heartbeats independent
  of its WAL's fsync); ``fdatasync`` and ``pwrite`` release the GIL.
* ``synced_index`` is what the file is known to hold: it moves only in
  ``collect``, on the Raft thread, once the sync thread has finished (the
  journal's ``wake_fd`` becomes readable then). The transport sends a
  follower's append acknowledgement, and the leader counts itself toward a
  quorum, only for entries at or below it
  (``om.consensus.pysyncobj.transport``, ``raft_log``), so nothing is
  acknowledged, by a follower or to a client, before it is on disk here.
* Records are ``[length u32][crc32 u32][index u64][term u64][command]``. On
  open, the journal keeps the longest prefix of valid, consecutive records and
  truncates the rest (a torn tail after power loss).
* Term and vote (``setCurrentTerm``) are written to ``<file>.meta`` through a
  synced temporary file, renamed, with the directory synced, on the calling
  thread, before pysyncobj sends the vote or the message that reflects them
  (Raft's rule: this is the one write the Raft thread still waits for, on a
  term change only). The commit index is saved lazily, once a second, as
  pysyncobj does (it is only a hint: it is clamped to the journal on restart),
  by the sync thread; a lazy save never replaces a newer term or vote
  (``_meta_version``).
* Compaction (``deleteEntriesTo``, after pysyncobj wrote a snapshot) is done by
  the sync thread too, in order with the syncs: it first syncs the snapshot
  file and its directory, then rewrites the remaining entries to a new synced
  file renamed over the old one: the journal never loses entries the snapshot
  does not hold.

The sync thread does every write to the journal file after it is opened, in
the order the Raft thread asked for them (one queue), so its bookkeeping
(``_written``, ``_file_bytes``) is the Raft thread's alone and describes the
file as it will be once the queued work is done.

With ``durable=False`` (``[raft] fsync = false``, an explicit opt-out) the
same writes happen at the same points without ``fdatasync``: acknowledged
writes then survive a process crash, not power loss.

A journal that cannot write (a full disk, an I/O error) fails stop: it logs
one line naming the file and the error and calls ``JournalSpec.fail_stop``
(by default the process exits with ``IO_ERROR_EXIT``), on the Raft thread, at
the next ``collect``. Going on would mean acknowledging entries it does not
hold.

pysyncobj builds its journal through a module-level factory and offers no
hook, so ``register`` installs a factory once per process that builds this
journal for the paths registered here and pysyncobj's own for any other.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pysyncobj import journal as pysyncobj_journal
from pysyncobj import syncobj as pysyncobj_syncobj

from om.config import Raft
from om.disk.durable_files import fsync_path, write_synced
from om.observe.histogram import CountingHistogram

logger = logging.getLogger(__name__)
MAGIC = b"OMRAFTJ1"
IO_ERROR_EXIT = 74  # EX_IOERR
STALL_POLL_S = 0.005   # how often a stalled sync thread looks at the stall file
_HEADER = struct.Struct("<IIQQ")  # length of command, crc32, index, term
Entry = tuple[bytes, int, int]     # command, index, term: pysyncobj's shape


def encode_record(command: bytes, index: int, term: int) -> bytes:
    """One journal record."""
    body = struct.pack("<QQ", index, term) + command
    return _HEADER.pack(len(command), zlib.crc32(body), index, term) + command


def decode_records(data: bytes) -> tuple[list[Entry], list[int]]:
    """The longest prefix of valid, consecutive records, and each one's end offset."""
    entries: list[Entry] = []
    ends: list[int] = []
    offset = len(MAGIC)
    while offset + _HEADER.size <= len(data):
        length, crc, index, term = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        if start + length > len(data):
            break
        command = data[start:start + length]
        if zlib.crc32(struct.pack("<QQ", index, term) + command) != crc:
            break
        if entries and index != entries[-1][1] + 1:
            break
        entries.append((command, index, term))
        offset = start + length
        ends.append(offset)
    return entries, ends


def exit_on_io_error() -> NoReturn:
    """The default fail-stop: this process ends at once."""
    os._exit(IO_ERROR_EXIT)


@dataclass
class JournalSpec:
    """How the journal at one path is built, and the journal once pysyncobj built it.

    ``stall_file`` is test-only (``[raft] unsafe_journal_stall``, ``stall_file()``):
    while that file exists the sync thread waits before each piece of work, as on
    a disk whose syncs hang, so a test can stall one node's journal when it
    chooses."""

    durable: bool
    snapshot_file: Path
    journal: GroupCommitJournal | None = None
    fail_stop: Callable[[], NoReturn] = exit_on_io_error
    stall_file: Path | None = None


@dataclass(eq=False)
class SyncWork:
    """One piece of work for the sync thread, and how it went.

    ``target`` is the last index the work makes durable (None for work that holds
    no records); ``floor`` starts there and is lowered by every truncation made
    while the work is outstanding: only entries at or below it are, once it is
    done, the entries it wrote."""

    action: str                  # what failed, for the fail-stop line ("write", ...)
    run: Callable[[], None]      # the I/O, on the sync thread
    target: int | None = None
    floor: int = 0
    took_s: float = 0.0
    error: Exception | None = None


class GroupCommitJournal(pysyncobj_journal.Journal):  # type: ignore[misc]
    """pysyncobj's journal interface over a group-committed append-only file.

    Invariants: ``self._entries`` holds consecutive indices; once the queued
    work is done, the file holds ``MAGIC`` and then the records of
    ``self._entries``, except the records in ``self._pending`` (appended, not
    yet handed to the sync thread), and, after a truncation not yet synced, the
    old records past ``self._written`` (up to ``self._file_bytes``);
    ``synced_index`` is the last index the sync thread has written (and,
    durable, fdatasynced) since its record was appended, and never more than
    the last index. At most one piece of work holding records is outstanding
    at a time except a compaction, queued behind it (``self._outstanding``).
    The Raft thread alone calls the methods (appends, syncs, compaction,
    close); the sync thread only runs the queued ``SyncWork``.
    """

    def __init__(self, path: Path, spec: JournalSpec) -> None:
        self._path = path
        self._spec = spec
        self._meta_path = path.with_name(path.name + ".meta")
        data = path.read_bytes() if path.exists() else b""
        if not data.startswith(MAGIC):
            assert not data, f"{path} is not a journal of this format"
            write_synced(path, MAGIC, spec.durable)
            data = MAGIC
        self._entries, self._ends = decode_records(data)
        self._written = self._ends[-1] if self._ends else len(MAGIC)
        self._fd = os.open(path, os.O_WRONLY)   # the sync thread's once it runs
        if self._written < len(data):  # a torn or invalid tail: drop it for good
            os.ftruncate(self._fd, self._written)
            self._fdatasync()
        self._pending = bytearray()
        self._dirty = False
        self._file_bytes = self._written   # what the file holds, maybe past _written
        self.synced_index = self._entries[-1][1] if self._entries else 0
        self.syncs = 0
        self.sync_times = CountingHistogram()   # pwrite + fdatasync of each sync
        # Told the last index kept whenever entries are dropped from the end.
        self.on_truncate: Callable[[int], None] | None = None
        self._meta = self._read_meta()
        self._meta_saved = True
        self._meta_lock = threading.Lock()  # orders renames of the meta file
        self._meta_version = 0              # bumped by every synchronous meta save
        self._outstanding: list[SyncWork] = []
        self._queue: queue.SimpleQueue[SyncWork | None] = queue.SimpleQueue()
        self._done: deque[SyncWork] = deque()
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._thread = threading.Thread(target=self._serve, name="raft-journal-sync",
                                        daemon=True)
        self._thread.start()

    # -- pysyncobj's Journal interface ---------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        assert isinstance(command, bytes), "pysyncobj commands are bytes"
        assert not self._entries or idx == self._entries[-1][1] + 1, "indices are consecutive"
        record = encode_record(command, idx, term)
        self._entries.append((command, idx, term))
        self._ends.append((self._ends[-1] if self._ends else len(MAGIC)) + len(record))
        self._pending += record

    def clear(self) -> None:
        self._truncate(0)

    def __getitem__(self, item: int | slice) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        """Drops the entries from position ``entryFrom`` on (a follower's conflict)."""
        self._truncate(max(entryFrom, 0))

    def deleteEntriesTo(self, entryTo: int) -> None:
        """Drops the entries before position ``entryTo`` (compaction after a snapshot);
        the sync thread rewrites the file, in order with the syncs."""
        if entryTo <= 0:
            return
        kept = self._entries[entryTo:]
        content = MAGIC + b"".join(encode_record(*entry) for entry in kept)
        self._entries = list(kept)
        self._ends = []
        offset = len(MAGIC)
        for command, _, _ in kept:
            offset += _HEADER.size + len(command)
            self._ends.append(offset)
        self._written = offset
        self._file_bytes = offset
        self._pending = bytearray()
        self._dirty = False
        self._submit(SyncWork("compact", self._rewrite(content), self.last_index))

    def _rewrite(self, content: bytes) -> Callable[[], None]:
        """The sync thread's work that replaces the journal's file by ``content`` (the
        simulated journal writes its simulated disk instead)."""
        durable = self._spec.durable
        snapshot = self._spec.snapshot_file

        def rewrite() -> None:
            if durable and snapshot.exists():
                fsync_path(snapshot)
                fsync_path(snapshot.parent)
            os.close(self._fd)
            write_synced(self._path, content, durable)
            self._fd = os.open(self._path, os.O_WRONLY)

        return rewrite

    def align_to_dump(self, before_last: Entry, last: Entry) -> bool:
        """Compacts up to a snapshot found at start whose compaction a kill cut short.

        The snapshot is renamed into place before the journal drops the entries it
        covers (``deleteEntriesTo``, on the sync thread): a node killed in between
        restarts with the new snapshot and the whole older journal. pysyncobj keeps
        a journal only when its first two entries are the snapshot's last two
        applied ones and otherwise clears it, which would lose every entry after
        the snapshot this node had synced, and acknowledged. Here those two entries
        are found in the journal and the entries before them dropped, as the cut
        compaction would have done. Returns whether it compacted."""
        if len(self._entries) < 2:
            return False
        position = before_last[1] - self._entries[0][1]
        if position <= 0 or position + 1 >= len(self._entries):
            return False
        if (self._entries[position] != tuple(before_last)
                or self._entries[position + 1] != tuple(last)):
            return False
        self.deleteEntriesTo(position)
        assert self._entries[0] == tuple(before_last)
        assert self._entries[1] == tuple(last)
        return True

    def _destroy(self) -> None:
        self.sync()
        self._save_meta()
        self._queue.put(None)
        self._thread.join()
        os.close(self._fd)
        os.close(self._wake_fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("raftCommitIndex", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        """Persists term and vote before pysyncobj acts on them (Raft's rule)."""
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        self._save_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("currentTerm", 0))

    def getVotedForNodeId(self) -> Any:
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:
        """Saves a changed commit index, on the sync thread (a hint: lazily)."""
        if not self._meta_saved:
            self._save_meta_lazily()

    # -- group commit --------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        """The index of the last entry appended (0 when empty)."""
        return self._entries[-1][1] if self._entries else 0

    @property
    def wake_fd(self) -> int:
        """Readable once the sync thread has finished work that ``collect`` takes."""
        return self._wake_fd

    def begin_sync(self) -> None:
        """Hands what was appended since the last sync to the sync thread, to be
        written with one ``pwrite`` and one ``fdatasync``, unless a sync is still
        outstanding: the appends then go with the next one (group commit). Never
        waits for the disk."""
        if self._outstanding or (not self._pending and not self._dirty):
            return
        pending, self._pending = self._pending, bytearray()
        offset = self._written
        self._written += len(pending)
        cut = self._written if self._file_bytes > self._written else None
        self._file_bytes = self._written
        self._dirty = False
        assert self._written == (self._ends[-1] if self._ends else len(MAGIC))

        def write() -> None:
            view = memoryview(pending)
            position = offset
            while view:
                written = os.pwrite(self._fd, view, position)
                view = view[written:]
                position += written
            if cut is not None:   # a truncation not overwritten: cut it now
                os.ftruncate(self._fd, cut)
            self._fdatasync()

        self._submit(SyncWork("write", write, self.last_index))

    def collect(self) -> None:
        """Takes the sync thread's finished work: ``synced_index`` moves up to what
        each finished sync wrote, as far as no truncation since changed it; an I/O
        error fails stop here."""
        with suppress(BlockingIOError):   # nothing new: woken for work taken already
            os.eventfd_read(self._wake_fd)
        while self._done:
            work = self._done.popleft()
            if work.error is not None:
                self._fail(work.action, work.error)
            if work.target is None:
                continue
            self._outstanding.remove(work)
            self.synced_index = max(self.synced_index, min(work.target, work.floor))
            if work.action == "write":
                self.syncs += 1
                self.sync_times.observe(work.took_s)

    def sync(self) -> None:
        """Writes and syncs everything appended, and waits for all queued work (on
        close, and where a caller must know the disk holds it)."""
        self._wait_idle()
        self.begin_sync()
        self._wait_idle()

    def _wait_idle(self) -> None:
        """Waits until the sync thread has done everything queued so far, and takes it."""
        idle = threading.Event()
        self._queue.put(SyncWork("wait for", idle.set))
        idle.wait()
        self.collect()

    def _submit(self, work: SyncWork) -> None:
        if work.target is not None:
            work.floor = work.target
            self._outstanding.append(work)
        self._queue.put(work)

    def _serve(self) -> None:
        """The sync thread: runs the queued work in order until it gets None."""
        while (work := self._queue.get()) is not None:
            self._perform(work)
            self._done.append(work)
            os.eventfd_write(self._wake_fd, 1)

    def _perform(self, work: SyncWork) -> None:
        """Runs one piece of work on the sync thread, timed, keeping its error for the
        Raft thread (any error: a sync thread that died would leave every later entry
        unacknowledged without a word)."""
        started = time.perf_counter()
        stall = self._spec.stall_file
        while stall is not None and stall.exists():
            time.sleep(STALL_POLL_S)
        try:
            work.run()
        except Exception as error:  # reported, and the node fails stop, in collect()
            work.error = error
        work.took_s = time.perf_counter() - started

    def _fail(self, action: str, error: Exception) -> None:
        logger.critical("cannot %s the Raft journal %s: %s: stopping this node (a full "
                        "disk? free space and restart it: it catches up from the others)",
                        action, getattr(error, "filename", None) or self._path,
                        getattr(error, "strerror", None) or error)
        self._spec.fail_stop()

    def _fdatasync(self) -> None:
        if self._spec.durable:
            os.fdatasync(self._fd)

    def _truncate(self, keep: int) -> None:
        """Keeps the first ``keep`` entries, in memory and in the buffer. The file is
        changed only at the next sync, which writes what replaced the dropped records
        over them: pysyncobj drops and appends again entries a follower already has
        whenever an append overlaps its log, and the file must not lose, even for a
        moment, records it acknowledged. A crash before that sync leaves the old
        records, as if the append had never arrived. Outstanding work no longer
        vouches for the dropped indices (``SyncWork.floor``), and ``on_truncate`` is told."""
        if keep >= len(self._entries):
            return
        end = self._ends[keep - 1] if keep else len(MAGIC)
        del self._entries[keep:]
        del self._ends[keep:]
        if end >= self._written:
            del self._pending[end - self._written:]
        else:
            self._pending = bytearray()
            self._written = end
            self._dirty = True
        last = self.last_index
        self.synced_index = min(self.synced_index, last)
        for work in self._outstanding:
            work.floor = min(work.floor, last)
        if self.on_truncate is not None:
            self.on_truncate(last)

    # -- term, vote and commit index ------------------------------------------------------

    def _read_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads(self._meta_path.read_text())
        except FileNotFoundError:
            return {}
        assert isinstance(meta, dict), f"{self._meta_path} is not a journal meta file"
        return meta

    def _save_meta(self) -> None:
        """Writes the meta file on this thread, synced (term and vote: Raft's rule)."""
        with self._meta_lock:
            self._meta_version += 1
            try:
                write_synced(self._meta_path, json.dumps(self._meta).encode(),
                             self._spec.durable)
            except OSError as error:
                self._fail("write the term and vote of", error)
        self._meta_saved = True

    def _save_meta_lazily(self) -> None:
        """Queues a save of the meta file as it is now. It is renamed into place only
        if no synchronous save came meanwhile: that one is newer and may hold a newer
        term or vote, which an older copy must never replace."""
        data = json.dumps(self._meta).encode()
        version = self._meta_version
        durable = self._spec.durable
        temporary = self._meta_path.with_name(self._meta_path.name + ".lazy")

        def save() -> None:
            with open(temporary, "wb") as out:
                out.write(data)
                out.flush()
                if durable:
                    os.fsync(out.fileno())
            with self._meta_lock:
                if version != self._meta_version:
                    return
                os.replace(temporary, self._meta_path)
            if durable:
                fsync_path(self._meta_path.parent)

        self._submit(SyncWork("write the commit index of", save))
        self._meta_saved = True


_SPECS: dict[str, JournalSpec] = {}
_ORIGINAL_FACTORY: Callable[..., Any] = pysyncobj_syncobj.createJournal


def _create_journal(journal_file: str | None = None) -> Any:
    spec = _SPECS.pop(str(journal_file), None) if journal_file is not None else None
    if spec is None:
        return _ORIGINAL_FACTORY(journal_file)
    journal = GroupCommitJournal(Path(journal_file), spec)  # type: ignore[arg-type]
    spec.journal = journal
    return journal


def stall_file(path: Path) -> Path:
    """The file that stalls the syncs of the journal at ``path`` while it exists, with
    ``[raft] unsafe_journal_stall`` (test-only)."""
    return path.with_name(path.name + ".stall")


def register(path: Path, spec: JournalSpec) -> None:
    """Makes the next SyncObj whose ``journalFile`` is ``path`` use this journal."""
    pysyncobj_syncobj.createJournal = _create_journal
    _SPECS[str(path)] = spec


def spec_for(settings: Raft, path: Path, snapshot_file: Path) -> JournalSpec:
    """The spec of a node's journal at ``path`` from its ``[raft]`` settings, registered."""
    spec = JournalSpec(durable=settings.fsync, snapshot_file=snapshot_file,
                       stall_file=stall_file(path) if settings.unsafe_journal_stall else None)
    register(path, spec)
    return spec
