"""Expectation metrics (`_system/expectation_metrics`): per table, batch and rule, how many
rows passed and failed, plus what the batch wrote, dropped and quarantined. Notebooks and
`lakehouse status` read them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

# When a batch's metrics were written (a replay of a batch is told from it by this time).
METRICS_AT = "at"


@dataclass(frozen=True)
class BatchCounts:
    """A batch's figures: its rows, what it wrote, dropped and quarantined, and per rule
    (passed, failed)."""

    rows: int
    written: int
    dropped: int
    quarantined: int
    per_rule: dict[str, tuple[int, int]]


def metrics_schema() -> StructType:
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    return StructType(
        [
            StructField("table", StringType()),
            StructField("run_id", StringType()),
            StructField("batch_id", LongType()),
            StructField(METRICS_AT, TimestampType()),
            StructField("rule", StringType()),
            StructField("action", StringType()),
            StructField("passed", LongType()),
            StructField("failed", LongType()),
            StructField("batch_rows", LongType()),
            StructField("batch_written", LongType()),
            StructField("batch_dropped", LongType()),
            StructField("batch_quarantined", LongType()),
        ]
    )


def metrics_rows(
    spark: SparkSession,
    table: str,
    run_id: str,
    batch_id: int,
    actions: Mapping[str, str],
    counts: BatchCounts,
    undecoded: Mapping[str, int] | None = None,
    undecoded_action: str = "rescue",
    undeclared: Mapping[str, int] | None = None,
) -> DataFrame:
    """One row per rule of the batch; `actions` maps each rule to its action. `undecoded`:
    per column, how many values did not decode into its type (`decode:<column>` rows, with
    `undecoded_action`: `rescue` for events, `quarantine` for CDC), so a column that is
    silently empty shows up next to the rules. `undeclared`: per nested column, how many
    values held a field their struct does not declare (`undeclared:<column>` rows: the value
    is kept and the field rescued)."""
    from pyspark.sql import functions as F

    failures = [
        *[(f"decode:{c}", undecoded_action, n) for c, n in (undecoded or {}).items()],
        *[(f"undeclared:{c}", "rescue", n) for c, n in (undeclared or {}).items()],
    ]
    per_rule = [
        *[(rule, action, counts.rows - failed, failed) for rule, action, failed in failures],
        *[(rule, actions[rule], *passed_failed) for rule, passed_failed in counts.per_rule.items()],
    ]
    rows = [
        (
            table,
            run_id,
            batch_id,
            None,
            rule,
            action,
            passed,
            failed,
            counts.rows,
            counts.written,
            counts.dropped,
            counts.quarantined,
        )
        for rule, action, passed, failed in per_rule
    ]
    written = spark.createDataFrame(rows, metrics_schema())
    return written.withColumn(METRICS_AT, F.current_timestamp())
