"""Explicit Spark schemas for trace schema v1 (docs/TRACES.md).

Nothing is inferred: every field the analysis reads is declared here with the type the
contract states, and every other field in a record is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

SCHEMA_VERSION = 1

CLIENT_REQUEST = "client_request"
SERVER_REQUEST = "server_request"
SERVER_BATCH = "server_batch"
FAULT = "fault"

# The fields every record carries, whatever its kind.
COMMON_FIELDS: tuple[StructField, ...] = (
    StructField("v", LongType()),
    StructField("kind", StringType()),
    StructField("flow", StringType()),
)

# Why a line was skipped, in the order the checks run: a line gets the first that applies.
INVALID_JSON = "invalid_json"  # not a JSON object (includes truncated lines)
WRONG_VERSION = "wrong_version"  # `v` is present but is not the integer 1
MISSING_FIELD = "missing_field"  # a required field is absent
BAD_TYPE = "bad_type"  # a field is present but null or not of the stated type
UNKNOWN_KIND = "unknown_kind"  # `kind` is none of the four kinds
MALFORMED_REASONS: tuple[str, ...] = (
    INVALID_JSON,
    WRONG_VERSION,
    MISSING_FIELD,
    BAD_TYPE,
    UNKNOWN_KIND,
)


def _long(name: str) -> StructField:
    return StructField(name, LongType())


def _string(name: str) -> StructField:
    return StructField(name, StringType())


@dataclass(frozen=True)
class KindSpec:
    """One record kind: its fields beyond `v` and `kind`, and which of them may be absent.

    `fields` always starts with `flow`, the only common field a valid record keeps.
    """

    kind: str
    fields: tuple[StructField, ...]
    optional: frozenset[str] = frozenset()

    @property
    def names(self) -> tuple[str, ...]:
        """Every field name a valid record of this kind has, as columns, in order."""
        return tuple(field.name for field in self.fields)

    @property
    def required(self) -> tuple[str, ...]:
        """The field names a record of this kind must carry to be analysed."""
        return tuple(name for name in self.names if name not in self.optional)


_FLOW = COMMON_FIELDS[2]

CLIENT_REQUEST_SPEC = KindSpec(
    kind=CLIENT_REQUEST,
    fields=(
        _FLOW,
        _long("t_ns"),
        _string("op"),
        _long("latency_ns"),
        _string("status"),
        _long("retries"),
        _string("node"),
        StructField("write", BooleanType()),
    ),
    optional=frozenset({"node", "write"}),
)

SERVER_REQUEST_SPEC = KindSpec(
    kind=SERVER_REQUEST,
    fields=(
        _FLOW,
        _long("t_ns"),
        _string("node"),
        _string("op"),
        _string("status"),
        _long("lock_wait_ns"),
        _long("execute_ns"),
        _long("batch_wait_ns"),
        _long("replicate_ns"),
        _long("apply_ns"),
        _long("reply_ns"),
        _long("batch_id"),
    ),
)

SERVER_BATCH_SPEC = KindSpec(
    kind=SERVER_BATCH,
    fields=(
        _FLOW,
        _long("t_ns"),
        _string("node"),
        _long("batch_id"),
        _long("requests"),
        _long("bytes"),
        _long("replicate_ns"),
        _long("apply_ns"),
    ),
)

FAULT_SPEC = KindSpec(
    kind=FAULT,
    fields=(_FLOW, _long("t_ns"), _string("action"), _string("node")),
)

KIND_SPECS: tuple[KindSpec, ...] = (
    CLIENT_REQUEST_SPEC,
    SERVER_REQUEST_SPEC,
    SERVER_BATCH_SPEC,
    FAULT_SPEC,
)

# A server_request phase column and the label the report gives it, in request order.
PHASES: tuple[tuple[str, str], ...] = (
    ("lock_wait_ns", "lock wait"),
    ("execute_ns", "execute"),
    ("batch_wait_ns", "batch wait"),
    ("replicate_ns", "replicate"),
    ("apply_ns", "apply"),
    ("reply_ns", "reply"),
)


def line_schema() -> StructType:
    """The schema one trace line is parsed with: the union of all kinds' fields.

    Guarantees each field name appears once; raises AssertionError if two kinds declared
    the same name with different types, since one parse could not serve both.
    """
    merged: dict[str, StructField] = {field.name: field for field in COMMON_FIELDS}
    for spec in KIND_SPECS:
        for field in spec.fields:
            known = merged.setdefault(field.name, field)
            assert known.dataType == field.dataType, f"{field.name} declared with two types"
    return StructType(list(merged.values()))
