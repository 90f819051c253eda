"""Reading trace files into typed DataFrames, skipping and counting malformed lines.

Lines are read as text and parsed with `from_json` and the explicit schema of
`schema.line_schema()`; nothing is inferred. Blank lines are not records and are dropped
silently. Every other line is either a valid record of one kind or skipped with exactly
one reason from `schema.MALFORMED_REASONS`, the first that applies:

1. `invalid_json`: the line is not a JSON object.
2. `missing_field`: there is no `v`; `wrong_version`: `v` is not the integer 1.
3. `missing_field`: there is no `kind`; `bad_type`: `kind` is not a string;
   `unknown_kind`: it names none of the four kinds.
4. `missing_field`: a required field of the kind (or `flow`) is absent;
   `bad_type`: one is present but null or not of the stated type.

An optional field (`node`, `write` of client_request) that is null or of the wrong type
is treated as absent. Unknown extra fields are ignored.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_analysis.runs import RunInput
from spark_analysis.schema import (
    BAD_TYPE,
    CLIENT_REQUEST_SPEC,
    FAULT_SPEC,
    INVALID_JSON,
    KIND_SPECS,
    MALFORMED_REASONS,
    MISSING_FIELD,
    SCHEMA_VERSION,
    SERVER_BATCH_SPEC,
    SERVER_REQUEST_SPEC,
    UNKNOWN_KIND,
    WRONG_VERSION,
    KindSpec,
    line_schema,
)


@dataclass(frozen=True)
class Traces:
    """The valid records of every run, one DataFrame per kind, plus what was skipped.

    Each DataFrame has a `run` column (the run's label) followed by the kind's fields as
    `KindSpec.names` lists them. `records` counts valid records per kind and `malformed`
    skipped lines per reason; both have a key for every kind and reason, zeros included.
    The DataFrames share one cached parse; call `unpersist()` when done with them.
    """

    clients: DataFrame
    servers: DataFrame
    batches: DataFrame
    faults: DataFrame
    records: dict[str, int]
    malformed: dict[str, int]
    parsed: DataFrame

    def unpersist(self) -> None:
        """Release the cached parse the four DataFrames are computed from."""
        self.parsed.unpersist()


def load_traces(spark: SparkSession, runs: Sequence[RunInput]) -> Traces:
    """Parse every trace file of `runs`, classify each line, and count the outcome.

    Raises ValueError when the runs hold no trace file at all (Spark cannot read an
    empty list of files). Runs one Spark job to count records; the DataFrames returned are
    lazy over a cached parse.
    """
    frames = [
        spark.read.text([str(path) for path in run.files]).select(
            F.lit(run.label).alias("run"), F.col("value")
        )
        for run in runs
        if run.files
    ]
    if not frames:
        raise ValueError("no trace files in any run directory")
    lines = reduce(DataFrame.unionByName, frames)
    parsed = (
        lines.where(F.trim(F.col("value")) != "")
        .select(
            F.col("run"),
            F.from_json(F.col("value"), line_schema()).alias("record"),
            F.json_object_keys(F.col("value")).alias("keys"),
        )
        .select(
            F.col("run"),
            _malformed_reason(F.col("record"), F.col("keys")).alias("reason"),
            F.col("record.*"),
        )
        .cache()
    )
    records = dict.fromkeys((spec.kind for spec in KIND_SPECS), 0)
    malformed = dict.fromkeys(MALFORMED_REASONS, 0)
    for row in parsed.groupBy("reason", "kind").count().collect():
        if row["reason"] is None:
            records[row["kind"]] += row["count"]
        else:
            malformed[row["reason"]] += row["count"]
    valid = parsed.where(F.col("reason").isNull())
    return Traces(
        clients=_records_of(valid, CLIENT_REQUEST_SPEC),
        servers=_records_of(valid, SERVER_REQUEST_SPEC),
        batches=_records_of(valid, SERVER_BATCH_SPEC),
        faults=_records_of(valid, FAULT_SPEC),
        records=records,
        malformed=malformed,
        parsed=parsed,
    )


def _records_of(valid: DataFrame, spec: KindSpec) -> DataFrame:
    """The valid records of one kind, flattened to `run` plus the kind's columns."""
    return valid.where(F.col("kind") == spec.kind).select(
        F.col("run"), *(F.col(name) for name in spec.names)
    )


def _any(conditions: Iterable[Column]) -> Column:
    return reduce(operator.or_, conditions)


def _malformed_reason(record: Column, keys: Column) -> Column:
    """The first reason (see the module docstring) a line is skipped, or null if valid.

    `record` is the line parsed with the line schema; `keys` the top-level keys of the
    line, null when the line is not a JSON object.
    """

    def has(name: str) -> Column:
        return F.array_contains(keys, name)

    kind = record["kind"]
    reason = (
        F.when(keys.isNull(), INVALID_JSON)
        .when(~has("v"), MISSING_FIELD)
        .when(record["v"].isNull() | (record["v"] != SCHEMA_VERSION), WRONG_VERSION)
        .when(~has("kind"), MISSING_FIELD)
        .when(kind.isNull(), BAD_TYPE)
        .when(~kind.isin([spec.kind for spec in KIND_SPECS]), UNKNOWN_KIND)
    )
    for spec in KIND_SPECS:
        is_kind = kind == spec.kind
        reason = reason.when(
            is_kind & _any(~has(name) for name in spec.required), MISSING_FIELD
        ).when(is_kind & _any(record[name].isNull() for name in spec.required), BAD_TYPE)
    return reason
