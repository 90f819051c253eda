"""The operation record model of a chaos run, and its JSON Lines format.

A history is what the clients saw, nothing more: one `Op` per logical client
operation, with the times it was invoked and completed on one monotonic clock
(`time.monotonic_ns()` of the single host that runs every client) and how it
ended:

- `ok`: it took effect exactly once, and its reply (e.g. a read's value) is true.
- `fail`: it certainly did not take effect (a definite rejection, never a
  timeout). Checkers drop it.
- `info`: unknown, e.g. a timeout or a lost connection. It may have taken effect
  at any instant after its invocation, or never; its completion is open-ended
  (+infinity) whatever `complete_ns` says (that is when the client gave up).

Functions (`f`) and what `key` and `value` mean for each:

- `put`: CreateKey+CommitKey of `key` with the unique int `value` (e.g. the
  committed `data_size`). Values are unique per key across the whole history, so
  a read identifies the write it saw.
- `get`: a lookup of `key`; `value` is the value seen, `None` for "not found".
  Only an `ok` get observed anything, so `fail`/`info` gets carry `None`.
- `delete`: DeleteKey of `key`; an `ok` delete removed an existing key. `value`
  is `None`.
- `add`: the non-idempotent exactly-once workload: a commit that charges `value`
  (> 0) bytes and one namespace unit to bucket `key`.

The file-system workload (om/chaos/fs_workload.py) on an FSO bucket, where `key`
is a path below the bucket and every name it creates is unique to its op:

- `mkdir`: CreateDirectory of `key` (`mkdir -p`); `value` is `None`.
- `create`: CreateFile (not recursive, not overwriting) + CommitKey of the file
  `key`; `value` is its size (> 0).
- `rename`: RenameKey of the directory `key` to `extra["to"]` (required, a path);
  `value` is `None`.
- `rmr`: DeleteKey of the directory `key` with `recursive` (`rm -r`); `value` is
  `None`.

The multipart-upload workload (om/chaos/mpu_workload.py), where `key` is an
object key used by one upload only and `extra["upload_id"]` is the upload's id
(absent when InitiateMultiPartUpload gave none):

- `mpu_complete`: the upload's parts committed, then CompleteMultiPartUpload;
  `value` is the sum of the parts' sizes (> 0), the key's size once complete.
  An upload that never got to send its complete is a `fail` complete.
- `mpu_abort`: AbortMultiPartUpload of the upload; `value` is `None`. The key
  of an upload meant to be aborted is never completed, whatever the outcome.

The OM-snapshot workload (om/chaos/snap_workload.py), on the register bucket:

- `snap_create`: CreateSnapshot of the bucket, `key` the snapshot's name (unique
  to the op); `snap_delete`: DeleteSnapshot of the snapshot `key`. No value.
- `snap_read`: a lookup of the register key `key` through the snapshot
  `extra["snapshot"]`; `value` as for `get` (only an `ok` read saw anything).

Rules checked on construction (a violation raises `HistoryError`, since a
malformed history cannot be judged): times are ordered, values fit the function
and outcome, op ids are unique, put values are unique per key, and one process
runs one operation at a time (a process may move on after an `info` op; the
abandoned op still counts as open-ended).

Serialization: one JSON object per line, keys sorted, compact separators, every
field present, plus `"v": 1` and `"kind": "chaos_op"`. Readers ignore unknown
fields (adding an optional field does not bump `v`) but reject malformed lines
instead of skipping them, because a dropped line could turn a failing history
into a passing one.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import pairwise
from types import MappingProxyType
from typing import Any, Final, TypeVar

FORMAT_VERSION: Final = 1
RECORD_KIND: Final = "chaos_op"

JsonScalar = str | int | float | bool | None

_E = TypeVar("_E", bound=StrEnum)
_T = TypeVar("_T")


class HistoryError(ValueError):
    """A history, or one record of it, breaks the model's rules."""


class F(StrEnum):
    """The function an operation performed."""

    PUT = "put"
    GET = "get"
    DELETE = "delete"
    ADD = "add"
    MKDIR = "mkdir"
    CREATE = "create"
    RENAME = "rename"
    RMR = "rmr"
    MPU_COMPLETE = "mpu_complete"
    MPU_ABORT = "mpu_abort"
    SNAP_CREATE = "snap_create"
    SNAP_DELETE = "snap_delete"
    SNAP_READ = "snap_read"


NO_VALUE: Final = frozenset({F.DELETE, F.MKDIR, F.RENAME, F.RMR, F.MPU_ABORT, F.SNAP_CREATE,
                             F.SNAP_DELETE})
READS: Final = frozenset({F.GET, F.SNAP_READ})
UPLOAD_ID: Final = "upload_id"
SNAPSHOT: Final = "snapshot"
RENAME_TO: Final = "to"


class Outcome(StrEnum):
    """How an operation ended, as far as its client knows."""

    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Op:
    """One client operation, from invocation to (possibly unknown) completion."""

    process: int
    op_id: int
    f: F
    key: str
    value: int | None
    invoke_ns: int
    complete_ns: int | None
    outcome: Outcome
    node: str | None = None
    retries: int = 0
    extra: Mapping[str, JsonScalar] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "f", _parse_enum(F, self.f, "f"))
        object.__setattr__(self, "outcome", _parse_enum(Outcome, self.outcome, "outcome"))
        _check_numbers(self)
        _check_times(self)
        _check_value(self)
        _check_extra(self.extra)
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    @property
    def end_ns(self) -> float:
        """The latest instant the op may take effect: +inf for an `info` op."""
        if self.outcome is Outcome.INFO:
            return math.inf
        assert self.complete_ns is not None
        return self.complete_ns

    def describe(self) -> str:
        """A one-line human summary, e.g. `p3#17 put k1=5 ok [100, 250]`."""
        end = "inf)" if self.outcome is Outcome.INFO else f"{self.complete_ns}]"
        value = "" if self.f in NO_VALUE else f"={self.value}"
        if self.f is F.RENAME:
            value = f"->{self.extra.get(RENAME_TO)}"
        return (
            f"p{self.process}#{self.op_id} {self.f} {self.key}{value} {self.outcome} "
            f"[{self.invoke_ns}, {end}"
        )

    def to_json(self) -> str:
        """This op as one JSON line (without the newline), in the stable format."""
        record: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "kind": RECORD_KIND,
            "process": self.process,
            "op_id": self.op_id,
            "f": str(self.f),
            "key": self.key,
            "value": self.value,
            "invoke_ns": self.invoke_ns,
            "complete_ns": self.complete_ns,
            "outcome": str(self.outcome),
            "node": self.node,
            "retries": self.retries,
            "extra": dict(self.extra),
        }
        return json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, line: str) -> Op:
        """Parse one JSON line written by `to_json`."""
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise HistoryError(f"not JSON: {exc}") from exc
        if not isinstance(record, dict):
            raise HistoryError("a record must be a JSON object")
        if record.get("v") != FORMAT_VERSION or record.get("kind") != RECORD_KIND:
            raise HistoryError(f"not a v{FORMAT_VERSION} {RECORD_KIND} record")
        extra = record.get("extra", {})
        if not isinstance(extra, dict):
            raise HistoryError("extra must be a JSON object")
        return cls(
            process=_field(record, "process", int),
            op_id=_field(record, "op_id", int),
            f=_parse_enum(F, _field(record, "f", str), "f"),
            key=_field(record, "key", str),
            value=_optional_field(record, "value", int),
            invoke_ns=_field(record, "invoke_ns", int),
            complete_ns=_optional_field(record, "complete_ns", int),
            outcome=_parse_enum(Outcome, _field(record, "outcome", str), "outcome"),
            node=_optional_field(record, "node", str),
            retries=_field(record, "retries", int),
            extra=extra,
        )


@dataclass(frozen=True, slots=True)
class History:
    """A whole run's operations, in recording order, checked for consistency."""

    ops: tuple[Op, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        _check_unique_op_ids(self.ops)
        _check_unique_put_values(self.ops)
        _check_processes_sequential(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def of(self, *fs: F) -> list[Op]:
        """The ops whose function is one of `fs`, in recording order."""
        return [op for op in self.ops if op.f in fs]

    def to_jsonl(self) -> str:
        """The whole history as JSON Lines, one op per line, newline-terminated."""
        return "".join(op.to_json() + "\n" for op in self.ops)

    @classmethod
    def from_lines(cls, lines: Iterable[str]) -> History:
        """Parse JSON Lines; blank lines are skipped, anything malformed raises."""
        ops: list[Op] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                ops.append(Op.from_json(line))
            except HistoryError as exc:
                raise HistoryError(f"line {number}: {exc}") from exc
        return cls(tuple(ops))

    @classmethod
    def from_jsonl(cls, text: str) -> History:
        """Parse the text of a whole history file."""
        return cls.from_lines(text.splitlines())


def _parse_enum(enum: type[_E], raw: str, name: str) -> _E:
    try:
        return enum(raw)
    except ValueError as exc:
        raise HistoryError(f"{name}={raw!r} is not one of {[str(m) for m in enum]}") from exc


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_numbers(op: Op) -> None:
    for name in ("process", "op_id", "retries", "invoke_ns"):
        value = getattr(op, name)
        if not _is_int(value) or value < 0:
            raise HistoryError(f"{name} must be a non-negative int, got {value!r}")
    if not isinstance(op.key, str) or not op.key:
        raise HistoryError(f"key must be a non-empty string, got {op.key!r}")
    if op.node is not None and not isinstance(op.node, str):
        raise HistoryError(f"node must be a string or None, got {op.node!r}")


def _check_times(op: Op) -> None:
    if op.complete_ns is None:
        if op.outcome is not Outcome.INFO:
            raise HistoryError(f"an {op.outcome} op needs complete_ns: {op.describe()}")
        return
    if not _is_int(op.complete_ns) or op.complete_ns < op.invoke_ns:
        raise HistoryError(f"complete_ns must be an int >= invoke_ns: {op.describe()}")


def _check_value(op: Op) -> None:
    if op.value is not None and not _is_int(op.value):
        raise HistoryError(f"value must be an int or None, got {op.value!r}")
    if op.f is F.PUT and op.value is None:
        raise HistoryError(f"a put needs the value it writes: {op.describe()}")
    if op.f in READS and op.outcome is not Outcome.OK and op.value is not None:
        raise HistoryError(f"only an ok get observed a value: {op.describe()}")
    if op.f in NO_VALUE and op.value is not None:
        raise HistoryError(f"a {op.f} carries no value: {op.describe()}")
    if op.f is F.ADD and (op.value is None or op.value <= 0):
        raise HistoryError(f"an add needs a positive delta: {op.describe()}")
    if op.f is F.MPU_COMPLETE and (op.value is None or op.value <= 0):
        raise HistoryError(f"a complete needs the parts' positive size: {op.describe()}")
    if op.f is F.CREATE and (op.value is None or op.value <= 0):
        raise HistoryError(f"a create needs the file's positive size: {op.describe()}")
    if op.f is F.SNAP_READ and not isinstance(op.extra.get(SNAPSHOT), str):
        raise HistoryError(f"a snapshot read needs extra[{SNAPSHOT!r}]: {op.describe()}")
    to = op.extra.get(RENAME_TO)
    if op.f is F.RENAME and (not isinstance(to, str) or not to):
        raise HistoryError(f"a rename needs extra[{RENAME_TO!r}], its destination: "
                           f"{op.describe()}")


def _check_extra(extra: Mapping[str, JsonScalar]) -> None:
    for name, value in extra.items():
        if not isinstance(name, str):
            raise HistoryError(f"extra keys must be strings, got {name!r}")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise HistoryError(f"extra[{name!r}] must be a JSON scalar, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise HistoryError(f"extra[{name!r}] must be finite, got {value!r}")


def _field(record: Mapping[str, Any], name: str, kind: type[_T]) -> _T:
    value = record.get(name)
    if value is None:
        raise HistoryError(f"missing field {name!r}")
    return _typed(value, name, kind)


def _optional_field(record: Mapping[str, Any], name: str, kind: type[_T]) -> _T | None:
    value = record.get(name)
    return None if value is None else _typed(value, name, kind)


def _typed(value: object, name: str, kind: type[_T]) -> _T:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise HistoryError(f"field {name!r} must be {kind.__name__}, got {value!r}")
    return value


def _check_unique_op_ids(ops: tuple[Op, ...]) -> None:
    seen: set[int] = set()
    for op in ops:
        if op.op_id in seen:
            raise HistoryError(f"duplicate op_id {op.op_id}")
        seen.add(op.op_id)


def _check_unique_put_values(ops: tuple[Op, ...]) -> None:
    seen: set[tuple[str, int | None]] = set()
    for op in ops:
        if op.f is not F.PUT:
            continue
        if (op.key, op.value) in seen:
            raise HistoryError(f"put value written twice to one key: {op.describe()}")
        seen.add((op.key, op.value))


def _busy_until(op: Op) -> int:
    """When the process was free again: an op without completion held it for no time."""
    return op.invoke_ns if op.complete_ns is None else op.complete_ns


def _check_processes_sequential(ops: tuple[Op, ...]) -> None:
    by_process: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        by_process[op.process].append(op)
    for process_ops in by_process.values():
        process_ops.sort(key=lambda op: (op.invoke_ns, _busy_until(op)))
        for before, after in pairwise(process_ops):
            if after.invoke_ns < _busy_until(before):
                raise HistoryError(
                    f"one process ran two ops at once: {before.describe()} and {after.describe()}"
                )
