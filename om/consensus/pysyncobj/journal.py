"""The Raft journal: an append-only file with group commit, replacing pysyncobj's.

pysyncobj's own ``FileJournal`` writes every entry into an mmap'd file and
never syncs it, nor its term and vote. Syncing it means ``mmap.flush`` (msync),
which measured ~1.7 ms per entry on this machine and holds the GIL, where
``write`` + ``fdatasync`` of the same bytes takes ~0.2 ms and releases it.

This journal keeps pysyncobj's interface (a list of ``(command, index, term)``
in memory, the file only for restarts) and changes how bytes reach the disk:

* ``add`` only appends the record to an in-memory buffer. ``sync`` writes the
  buffer with one ``pwrite`` and, when durable, one ``fdatasync``: a group
  commit of everything appended since the last sync. The transport calls
  ``sync`` before any message that promises the entries leave the node (a
  follower's append acknowledgement) and before the leader's next commit
  decision (``om.consensus.pysyncobj.transport``), so nothing is acknowledged,
  by a follower or to a client, before it is on disk here.
* Records are ``[length u32][crc32 u32][index u64][term u64][command]``. On
  open, the journal keeps the longest prefix of valid, consecutive records and
  truncates the rest (a torn tail after power loss).
* Term and vote (``setCurrentTerm``) are written to ``<file>.meta`` through a
  synced temporary file, renamed, with the directory synced, before
  pysyncobj sends the vote or the message that reflects them. The commit index
  is saved lazily, once a second, as pysyncobj does (it is only a hint: it is
  clamped to the journal on restart).
* Compaction (``deleteEntriesTo``, after pysyncobj wrote a snapshot) first
  syncs the snapshot file and its directory, then rewrites the remaining
  entries to a new synced file renamed over the old one: the journal never
  loses entries the snapshot does not hold.

With ``durable=False`` (``[raft] fsync = false``, an explicit opt-out) the
same writes happen at the same points without ``fdatasync``: acknowledged
writes then survive a process crash, not power loss.

A journal that cannot write (a full disk, an I/O error) fails stop: it logs
one line naming the file and the error and calls ``JournalSpec.fail_stop``
(by default the process exits with ``IO_ERROR_EXIT``). Going on would mean
acknowledging entries it does not hold.

pysyncobj builds its journal through a module-level factory and offers no
hook, so ``register`` installs a factory once per process that builds this
journal for the paths registered here and pysyncobj's own for any other.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from pysyncobj import journal as pysyncobj_journal
from pysyncobj import syncobj as pysyncobj_syncobj

from om.disk.durable_files import fsync_path, write_synced
from om.observe.histogram import CountingHistogram

logger = logging.getLogger(__name__)
MAGIC = b"OMRAFTJ1"
IO_ERROR_EXIT = 74  # EX_IOERR
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
    """How the journal at one path is built, and the journal once pysyncobj built it."""

    durable: bool
    snapshot_file: Path
    journal: GroupCommitJournal | None = None
    fail_stop: Callable[[], NoReturn] = exit_on_io_error


class GroupCommitJournal(pysyncobj_journal.Journal):  # type: ignore[misc]
    """pysyncobj's journal interface over a group-committed append-only file.

    Invariants: ``self._entries`` holds consecutive indices; the file holds
    ``MAGIC`` and then the records of ``self._entries``, except the records in
    ``self._pending`` (appended, not yet written), and, after a truncation not
    yet synced, the old records past ``self._written`` (up to
    ``self._file_bytes``); ``synced_index`` is the last index written (and,
    durable, fdatasynced) since its record was appended.
    Only pysyncobj's tick thread calls it (appends, syncs, compaction, close).
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
        self._fd = os.open(path, os.O_WRONLY)
        if self._written < len(data):  # a torn or invalid tail: drop it for good
            os.ftruncate(self._fd, self._written)
            self._fdatasync()
        self._pending = bytearray()
        self._dirty = False
        self._file_bytes = self._written   # what the file holds, maybe past _written
        self.synced_index = self._entries[-1][1] if self._entries else 0
        self.syncs = 0
        self.sync_times = CountingHistogram()   # pwrite + fdatasync of each sync
        self._meta = self._read_meta()
        self._meta_saved = True

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
        """Drops the entries before position ``entryTo`` (compaction after a snapshot)."""
        if entryTo <= 0:
            return
        durable = self._spec.durable
        kept = self._entries[entryTo:]
        records = b"".join(encode_record(*entry) for entry in kept)
        with self._failing_stop("compact"):
            if durable and self._spec.snapshot_file.exists():
                fsync_path(self._spec.snapshot_file)
                fsync_path(self._spec.snapshot_file.parent)
            os.close(self._fd)
            write_synced(self._path, MAGIC + records, durable)
            self._fd = os.open(self._path, os.O_WRONLY)
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
        self.synced_index = kept[-1][1] if kept else 0

    def _destroy(self) -> None:
        self.sync()
        self._save_meta()
        os.close(self._fd)

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
        if not self._meta_saved:
            self._save_meta()

    # -- group commit --------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        """The index of the last entry appended (0 when empty)."""
        return self._entries[-1][1] if self._entries else 0

    def sync(self) -> None:
        """Writes what was appended since the last sync, and fdatasyncs when durable."""
        if not self._pending and not self._dirty:
            return
        with self._failing_stop("write"):
            self._sync()

    def _sync(self) -> None:
        started = time.perf_counter()
        pending, self._pending = self._pending, bytearray()
        view = memoryview(pending)
        while view:
            written = os.pwrite(self._fd, view, self._written)
            view = view[written:]
            self._written += written
        if self._file_bytes > self._written:   # a truncation not overwritten: cut it now
            os.ftruncate(self._fd, self._written)
        self._file_bytes = self._written
        self._fdatasync()
        self._dirty = False
        assert self._written == (self._ends[-1] if self._ends else len(MAGIC))
        self.synced_index = self.last_index
        self.syncs += 1
        self.sync_times.observe(time.perf_counter() - started)

    @contextmanager
    def _failing_stop(self, action: str) -> Iterator[None]:
        try:
            yield
        except OSError as error:
            logger.critical("cannot %s the Raft journal %s: %s: stopping this node (a full "
                            "disk? free space and restart it: it catches up from the others)",
                            action, error.filename or self._path, error.strerror or error)
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
        records, as if the append had never arrived."""
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
        self.synced_index = min(self.synced_index, self.last_index)

    # -- term, vote and commit index ------------------------------------------------------

    def _read_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads(self._meta_path.read_text())
        except FileNotFoundError:
            return {}
        assert isinstance(meta, dict), f"{self._meta_path} is not a journal meta file"
        return meta

    def _save_meta(self) -> None:
        with self._failing_stop("write the term and vote of"):
            write_synced(self._meta_path, json.dumps(self._meta).encode(), self._spec.durable)
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


def register(path: Path, spec: JournalSpec) -> None:
    """Makes the next SyncObj whose ``journalFile`` is ``path`` use this journal."""
    pysyncobj_syncobj.createJournal = _create_journal
    _SPECS[str(path)] = spec
