"""The analysis results as plain Python data, for the summary, the plots and the report.

Nothing here touches Spark: the job collects each (small, aggregated) table once and
everything downstream works on these rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_analysis.runs import RunInput

Row = dict[str, Any]


@dataclass(frozen=True)
class Results:
    """Every table of one analysis, as lists of rows keyed by column name.

    Each table's rows and columns are those documented by the `metrics` function of the
    same name; `records` and `malformed` are `load.Traces.records` and `.malformed`.
    """

    runs: tuple[RunInput, ...]
    records: dict[str, int]
    malformed: dict[str, int]
    flow_summary: list[Row]
    throughput_ratios: list[Row]
    throughput_per_second: list[Row]
    latency_percentiles: list[Row]
    phase_breakdown: list[Row]
    phase_tail: list[Row]
    batch_sizes: list[Row]
    batch_size_histogram: list[Row]
    failover_gaps: list[Row]

    @property
    def several_runs(self) -> bool:
        """True when flows must be labelled with their run to stay distinct."""
        return len(self.runs) > 1

    def series_label(self, row: Row) -> str:
        """How plots and tables name the flow of `row`: `flow`, or `run/flow`."""
        return f"{row['run']}/{row['flow']}" if self.several_runs else str(row["flow"])
