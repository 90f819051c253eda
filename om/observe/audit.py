"""The audit log: one line per operation, in Ozone's OMAudit shape.

    2026-11-23 00:15:40,649 | INFO  | OMAudit | user=alice | ip=127.0.0.1 |
        op=COMMIT_KEY {volume=vol1, bucket=b1, key=k1} | ret=SUCCESS |

(one line; a failure adds the status and message: ``ret=FAILURE |
KEY_NOT_FOUND: ...``). The node that answers a request writes its line: the
leader for writes it executed and for reads, never a follower's apply path.
A retry answered from the retry cache is the same operation and writes no
second line; a request turned away because this node does not lead (NOT_LEADER,
LEADER_NOT_READY) was not run here and writes none either; a denial
(PERMISSION_DENIED) is audited, and so is a request the gate refused: its
fields are as the client sent them, so control characters and line separators are
written escaped (``\\x0a``), and one line stays one operation. The file rotates by
size, as ``logging.handlers.RotatingFileHandler`` does, so it is bounded; lines are
buffered and written by a thread of their own (see ``AuditLog``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# Ozone's OMAction for each of our request types.
OM_ACTIONS = {
    "CreateVolume": "CREATE_VOLUME", "SetVolumeProperty": "UPDATE_VOLUME",
    "InfoVolume": "READ_VOLUME", "DeleteVolume": "DELETE_VOLUME",
    "ListVolume": "LIST_VOLUMES", "CreateBucket": "CREATE_BUCKET",
    "InfoBucket": "READ_BUCKET", "SetBucketProperty": "UPDATE_BUCKET",
    "DeleteBucket": "DELETE_BUCKET", "ListBuckets": "LIST_BUCKETS",
    "CreateKey": "ALLOCATE_KEY", "LookupKey": "READ_KEY", "RenameKey": "RENAME_KEY",
    "DeleteKey": "DELETE_KEY", "ListKeys": "LIST_KEYS", "CommitKey": "COMMIT_KEY",
    "AddAcl": "ADD_ACL", "RemoveAcl": "REMOVE_ACL", "SetAcl": "SET_ACL", "GetAcl": "GET_ACL",
    "GetDelegationToken": "GET_DELEGATION_TOKEN",
    "RenewDelegationToken": "RENEW_DELEGATION_TOKEN",
    "CancelDelegationToken": "CANCEL_DELEGATION_TOKEN",
    "AddUserCertificate": "ADD_USER_CERTIFICATE",
    "RevokeUserCertificates": "REVOKE_USER_CERTIFICATES",
    "ListUserCertificates": "LIST_USER_CERTIFICATES",
}
NOT_RUN_HERE = frozenset({"NOT_LEADER", "LEADER_NOT_READY"})
# What a client's text may hold that would break a line or fake another: written as \xNN.
ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
           for code in (*range(0x20), *range(0x7f, 0xa0), 0x2028, 0x2029)}
_LOG = logging.getLogger(__name__)


class AuditSink(Protocol):
    """Where audit lines go."""

    def record(self, user: str, ip: str, op: str, body: Message | None, write: bool,
               status: str, message: str) -> None:
        """Records one answered operation (``status`` is the response's status name)."""
        ...


class NoAudit:
    """Records nothing (audit off)."""

    def record(self, user: str, ip: str, op: str, body: Message | None, write: bool,
               status: str, message: str) -> None:
        return None


@dataclass(frozen=True)
class AuditSettings:
    """Where the log goes, whether reads are audited, and its rotation bounds."""

    path: Path
    reads: bool = True
    max_bytes: int = 100 * 1024 * 1024
    backups: int = 10
    flush_interval_s: float = 0.2
    buffer_bytes: int = 1024 * 1024


def parameters(body: Message | None) -> str:
    """``{volume=v, bucket=b, key=k}``: the request body's fields that are set.

    A nested message's fields are listed in line (an ACL request reads
    ``{res_type=KEY, volume=v, bucket=b, key=k, type=USER, name=bob, rights=[READ]}``),
    enums by name, repeated fields as ``[a, b]``; bytes are left out. The fields
    listed are those protobuf's ``ListFields`` lists, in field-number order; each
    message type's plan is read from its descriptor once (``_plan``), so a line
    costs a few attribute reads instead of descriptor reflection per field.
    """
    if body is None:
        return "{}"
    return "{" + ", ".join(_fields(body)) + "}"


# How one field is written: its name, how its presence is told, and how its value.
_REPEATED, _MESSAGE, _PRESENT, _IMPLICIT = range(4)
_Step = tuple[str, int, FieldDescriptor]
_PLANS: dict[str, tuple[_Step, ...]] = {}


def _plan(message: Message) -> tuple[_Step, ...]:
    """The steps of a message type, by full name, computed once."""
    name = message.DESCRIPTOR.full_name
    plan = _PLANS.get(name)
    if plan is None:
        steps: list[_Step] = []
        fields = cast(list[FieldDescriptor], list(message.DESCRIPTOR.fields))
        for field in sorted(fields, key=lambda f: f.number):
            if field.is_repeated:
                presence = _REPEATED
            elif field.message_type is not None:
                presence = _MESSAGE
            elif field.type == FieldDescriptor.TYPE_BYTES:
                continue   # bytes are never written
            else:
                presence = _PRESENT if field.has_presence else _IMPLICIT
            steps.append((field.name, presence, field))
        plan = _PLANS[name] = tuple(steps)
    return plan


def _fields(message: Message) -> list[str]:
    fields: list[str] = []
    for name, presence, field in _plan(message):
        if presence == _IMPLICIT:
            value = getattr(message, name)
            if value:
                fields.append(f"{name}={_scalar(field, value)}")
        elif presence == _REPEATED:
            values = getattr(message, name)
            if values:
                fields.append(f"{name}=[{', '.join(_value(field, v) for v in values)}]")
        elif message.HasField(name):
            if presence == _MESSAGE:
                fields.extend(_fields(getattr(message, name)))
            else:
                fields.append(f"{name}={_scalar(field, getattr(message, name))}")
    return fields


def _value(field: FieldDescriptor, value: object) -> str:
    if field.message_type is not None:
        assert isinstance(value, Message)
        return "{" + ", ".join(_fields(value)) + "}"
    return _scalar(field, value)


def _scalar(field: FieldDescriptor, value: object) -> str:
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)  # type: ignore[call-overload]
        return known.name if known is not None else str(value)
    return str(value)


class AuditLog:
    """Writes Ozone-shaped audit lines to a rotating file of its own, buffered.

    ``record`` (on the event loop) only formats the line and appends it to a
    buffer; a writer thread writes the buffer every ``flush_interval_s``, in one
    ``write`` per file. The logging module did it per line (a LogRecord, the
    line formatted twice, a seek and a flush) and cost a fifth of the leader's
    event loop at full load. Bounds: the buffer holds at most ``buffer_bytes``;
    a ``record`` that fills it writes the buffer itself (back-pressure, never a
    dropped line). Lines still buffered when the process dies are lost (at most
    ``flush_interval_s`` of them); ``close`` writes everything.
    """

    def __init__(self, settings: AuditSettings, node_id: str) -> None:
        assert settings.flush_interval_s > 0
        assert settings.buffer_bytes > 0
        self._reads = settings.reads
        self._interval = settings.flush_interval_s
        self._buffer_bytes = settings.buffer_bytes
        self._file = RotatingFile(settings.path, settings.max_bytes, settings.backups)
        self._clock = _Timestamps()
        self._pending: list[str] = []
        self._pending_size = 0
        self._lock = threading.Lock()          # guards _pending and _pending_size
        self._write_lock = threading.Lock()    # one writer at a time, lines in order
        self._stop = threading.Event()
        self._writer = threading.Thread(target=self._run, name=f"audit-{node_id}",
                                        daemon=True)
        self._writer.start()

    def record(self, user: str, ip: str, op: str, body: Message | None, write: bool,
               status: str, message: str) -> None:
        if status in NOT_RUN_HERE or (not write and not self._reads):
            return
        action = OM_ACTIONS.get(op, op)
        result = "ret=SUCCESS |" if status == "OK" else f"ret=FAILURE | {status}: {message}"
        line = (f"{self._clock.now()} | INFO  | OMAudit | user={user} | ip={ip or '-'} | "
                f"op={action} {parameters(body)} | {result}")
        line = (line if line.isprintable() else line.translate(ESCAPES)) + "\n"
        with self._lock:
            self._pending.append(line)
            self._pending_size += len(line)
            full = self._pending_size >= self._buffer_bytes
        if full:
            self.flush()

    def flush(self) -> None:
        """Writes every buffered line (in order: one writer at a time)."""
        with self._write_lock:
            with self._lock:
                lines, self._pending, self._pending_size = self._pending, [], 0
            if lines:
                self._file.write(lines)

    def close(self) -> None:
        """Stops the writer, writes what is buffered and closes the file."""
        self._stop.set()
        self._writer.join()
        self.flush()
        self._file.close()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()


class RotatingFile:
    """An append-only text file rotated by size as ``RotatingFileHandler`` does it:
    ``audit.log`` is the newest, ``audit.log.1`` the one before, up to
    ``audit.log.<backups>``; no file grows past ``max_bytes`` (a single longer line
    gets a file of its own). Writes are unbuffered (one ``write`` a chunk), so a
    failed write (a full disk) leaves nothing half-held: it is logged with the
    count of lines lost, and the next write tries again."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        assert max_bytes > 0
        assert backups > 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._max_bytes = max_bytes
        self._backups = backups
        self._stream = path.open("ab", buffering=0)
        self._size = self._stream.tell()

    def write(self, lines: list[str]) -> None:
        """Appends ``lines``, rotating before a line that would overflow the file."""
        chunk: list[bytes] = []
        size = self._size
        try:
            for line in lines:
                data = line.encode()
                if size + len(data) > self._max_bytes and (size > 0 or chunk):
                    self._write_chunk(chunk)
                    self._rotate()
                    chunk, size = [], 0
                chunk.append(data)
                size += len(data)
            self._write_chunk(chunk)
        except OSError as error:
            _LOG.error("audit log %s: %d lines lost: %s", self._path, len(lines), error)

    def close(self) -> None:
        self._stream.close()

    def _write_chunk(self, chunk: list[bytes]) -> None:
        data = memoryview(b"".join(chunk))
        while data:
            written = self._stream.write(data)
            assert written is not None, "a regular file never blocks"
            self._size += written
            data = data[written:]

    def _rotate(self) -> None:
        self._stream.close()
        for i in range(self._backups - 1, 0, -1):
            older = self._path.with_name(f"{self._path.name}.{i}")
            if older.exists():
                older.replace(self._path.with_name(f"{self._path.name}.{i + 1}"))
        self._path.replace(self._path.with_name(f"{self._path.name}.1"))
        self._stream = self._path.open("ab", buffering=0)
        self._size = 0


class _Timestamps:
    """``2026-11-23 00:15:40,649`` in local time, as the logging module writes it; the
    seconds part is formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        return f"{self._prefix},{int((now - second) * 1000):03d}"
