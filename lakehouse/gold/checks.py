"""A gold table's expectations, with the same machinery, actions and metrics as silver: every
recomputed group row is checked in one pass; `warn` counts, `drop` keeps the group out of gold
(it is deleted if it was there), `quarantine` does that and keeps the row in
`_system/quarantine` (table `gold.<name>`), `fail` stops the run before anything is written.
Per run and rule, passed/failed counts go to `_system/expectation_metrics`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.core import system, tables
from lakehouse.core.columns import named
from lakehouse.core.settings import Settings
from lakehouse.core.specs import GoldTableSettings
from lakehouse.quality import expectations as rules
from lakehouse.quality.metrics import BatchCounts, metrics_rows, metrics_schema
from lakehouse.quality.quarantine import QUARANTINED, QUARANTINED_AT, quarantine_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Checked:
    kept: DataFrame  # the rows that go to gold
    rejected: DataFrame | None  # rows for the quarantine (with their failed rule names)
    counts: dict[str, int]  # failed rows per rule
    batch: BatchCounts | None
    actions: dict[str, str]


def apply(
    spark: SparkSession,
    settings: Settings,
    name: str,
    gold: GoldTableSettings,
    recomputed: DataFrame,
    plan: Any,
) -> Checked:
    declared = rules.from_settings(gold.expectations)
    if not declared:
        return Checked(recomputed, None, {}, None, {})
    evaluated = rules.evaluate(recomputed, declared).persist()
    per_rule = rules.metrics(evaluated, declared)
    rules.check_fail_rules(evaluated, declared, per_rule)
    kept = rules.kept(evaluated, declared)
    rejected = rules.quarantined(evaluated, declared)
    rows = sum(per_rule[declared[0].name])
    written = kept.count()
    quarantined = rejected.count()
    batch = BatchCounts(rows, written, rows - written - quarantined, quarantined, per_rule)
    return Checked(
        kept,
        rejected,
        {r: failed for r, (_passed, failed) in per_rule.items()},
        batch,
        {e.name: e.action for e in declared},
    )


def record(
    spark: SparkSession, settings: Settings, name: str, plan: Any, checked: Checked, app_id: str
) -> None:
    """The run's metrics and quarantined rows, idempotent under the run's transaction."""
    if checked.batch is None:
        return
    from pyspark.sql import functions as F

    metrics_path = system.path(settings, system.METRICS)
    tables.create_table(spark, metrics_path, metrics_schema(), {"delta.appendOnly": "true"})
    metrics = metrics_rows(
        spark, f"gold.{name}", plan.run_id, plan.n, checked.actions, checked.batch
    )
    tables.append_once(metrics, metrics_path, app_id, plan.n)
    if checked.rejected is None or not checked.batch.quarantined:
        return
    quarantine_path = system.path(settings, system.QUARANTINE)
    tables.create_table(spark, quarantine_path, quarantine_schema(), {})
    columns = [c for c in checked.rejected.columns if c != rules.FAILED]
    rows = checked.rejected.select(
        F.expr("uuid()").alias("id"),
        F.lit(f"gold.{name}").alias("table"),
        F.lit(plan.run_id).alias("run_id"),
        F.lit(plan.n).cast("long").alias("batch_id"),
        F.current_timestamp().alias(QUARANTINED_AT),
        F.col(rules.FAILED).alias("failed_rules"),
        F.lit(None).cast("string").alias("parse_error"),
        F.to_json(F.struct(*[named(c) for c in columns])).alias("record"),
        *[
            F.lit(None).cast(kind).alias(column)
            for column, kind in (
                ("op", "string"),
                ("seq", "long"),
                ("raw_key", "binary"),
                ("raw_value", "binary"),
                ("topic", "string"),
                ("partition", "int"),
                ("offset", "long"),
            )
        ],
        F.lit(QUARANTINED).alias("status"),
        F.lit(None).cast("timestamp").alias("replayed_at"),
    )
    tables.append_once(rows, quarantine_path, app_id, plan.n)
