"""The audit log: one line per operation, in Ozone's OMAudit shape.

    2026-11-23 00:15:40,649 | INFO  | OMAudit | user=alice | ip=127.0.0.1 |
        op=COMMIT_KEY {volume=vol1, bucket=b1, key=k1} | ret=SUCCESS |

(one line; a failure adds the status and message: ``ret=FAILURE |
KEY_NOT_FOUND: ...``). The node that answers a request writes its line: the
leader for writes it executed and for reads, never a follower's apply path.
A retry answered from the retry cache is the same operation and writes no
second line; a request turned away because this node does not lead (NOT_LEADER,
LEADER_NOT_READY) was not run here and writes none either; a denial
(PERMISSION_DENIED) is audited. The file rotates by size
(``logging.handlers.RotatingFileHandler``), so it is bounded.
"""

from __future__ import annotations

import logging
import logging.handlers
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
}
NOT_RUN_HERE = frozenset({"NOT_LEADER", "LEADER_NOT_READY"})
LINE_FORMAT = "%(asctime)s | %(levelname)-5s | OMAudit | %(message)s"


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


def parameters(body: Message | None) -> str:
    """``{volume=v, bucket=b, key=k}``: the request body's fields that are set.

    A nested message's fields are listed in line (an ACL request reads
    ``{res_type=KEY, volume=v, bucket=b, key=k, type=USER, name=bob, rights=[READ]}``),
    enums by name, repeated fields as ``[a, b]``; bytes are left out.
    """
    if body is None:
        return "{}"
    return "{" + ", ".join(_fields(body)) + "}"


def _fields(message: Message) -> list[str]:
    fields: list[str] = []
    for field, value in message.ListFields():
        if field.is_repeated:
            fields.append(f"{field.name}=[{', '.join(_value(field, v) for v in value)}]")
        elif field.message_type is not None:
            fields.extend(_fields(value))
        elif not isinstance(value, bytes):
            fields.append(f"{field.name}={_value(field, value)}")
    return fields


def _value(field: FieldDescriptor, value: object) -> str:
    if field.message_type is not None:
        assert isinstance(value, Message)
        return "{" + ", ".join(_fields(value)) + "}"
    if field.enum_type is not None:
        known = field.enum_type.values_by_number.get(value)  # type: ignore[call-overload]
        return known.name if known is not None else str(value)
    return str(value)


class AuditLog:
    """Writes Ozone-shaped audit lines to a rotating file of its own."""

    def __init__(self, settings: AuditSettings, node_id: str) -> None:
        assert settings.max_bytes > 0
        assert settings.backups > 0
        settings.path.parent.mkdir(parents=True, exist_ok=True)
        self._reads = settings.reads
        self._logger = logging.getLogger(f"OMAudit.{node_id}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handler = logging.handlers.RotatingFileHandler(
            settings.path, maxBytes=settings.max_bytes, backupCount=settings.backups,
            encoding="utf-8")
        self._handler.setFormatter(logging.Formatter(LINE_FORMAT))
        self._logger.addHandler(self._handler)

    def record(self, user: str, ip: str, op: str, body: Message | None, write: bool,
               status: str, message: str) -> None:
        if status in NOT_RUN_HERE or (not write and not self._reads):
            return
        action = OM_ACTIONS.get(op, op)
        result = "ret=SUCCESS |" if status == "OK" else f"ret=FAILURE | {status}: {message}"
        self._logger.info("user=%s | ip=%s | op=%s %s | %s", user, ip or "-", action,
                          parameters(body), result)

    def close(self) -> None:
        """Flushes and closes the file."""
        self._logger.removeHandler(self._handler)
        self._handler.close()
