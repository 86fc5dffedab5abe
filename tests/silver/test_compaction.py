"""Compaction (`storage.compact_every`) of a silver table refined batch after batch, against a
real broker and real Delta: it rewrites files, never rows, and adds nothing to the change feed
that gold and the offline layer read."""

from __future__ import annotations

from dataclasses import replace

from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from lakehouse.core import system, tables
from lakehouse.core.settings import Settings
from tests.bronze.helpers import run_ingest
from tests.silver.helpers import (
    ORDER_SCHEMA,
    current,
    events_pipeline,
    metrics,
    produce,
    quarantine,
    rule,
    run_refine,
)

ROW = "order_id bigint, customer_id bigint, order_status string, amount double, ts bigint"


def order(order_id: int, amount: float, ts: int) -> object:
    return {
        "order_id": order_id,
        "customer_id": 7,
        "order_status": "paid",
        "amount": amount,
        "ts": ts,
    }


def test_a_compacted_silver_table_keeps_its_rows_and_its_change_feed(
    spark: SparkSession, kafka_up: Settings
) -> None:
    settings = replace(kafka_up, storage=replace(kafka_up.storage, compact_every=2))
    source, topic, name, settings = events_pipeline(
        spark,
        settings,
        [order(1, 1.0, 1), order(2, 2.0, 1)],
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
    )
    run_refine(spark, settings, name)
    rounds = [
        [order(1, 1.5, 2), order(3, 3.0, 1)],
        [order(2, 2.5, 2), order(4, 4.0, 1)],
        [order(1, 1.75, 3), order(5, 5.0, 1)],
        [order(3, 3.5, 2)],
    ]
    for events in rounds:
        produce(settings, topic, events)
        run_ingest(spark, settings, source)
        run_refine(spark, settings, name)

    path = settings.storage.path("silver", name)
    operations = [r["operation"] for r in DeltaTable.forPath(spark, path).history().collect()]
    assert operations.count("OPTIMIZE") >= 2, operations  # it did compact, more than once
    assert_df_equality(
        current(spark, settings, name).select(
            "order_id", "customer_id", "order_status", "amount", "ts"
        ),
        spark.createDataFrame(
            [
                (1, 7, "paid", 1.75, 3),
                (2, 7, "paid", 2.5, 2),
                (3, 7, "paid", 3.5, 2),
                (4, 7, "paid", 4.0, 1),
                (5, 7, "paid", 5.0, 1),
            ],
            ROW,
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Every change once, in the feed's images, whatever the compactions rewrote.
    feed = tables.change_feed(spark, path, 0, tables.latest_version(spark, path))
    assert_df_equality(
        feed.select("order_id", "amount", "_change_type"),
        spark.createDataFrame(
            [
                (1, 1.0, "insert"),
                (2, 2.0, "insert"),
                (1, 1.0, "update_preimage"),
                (1, 1.5, "update_postimage"),
                (3, 3.0, "insert"),
                (2, 2.0, "update_preimage"),
                (2, 2.5, "update_postimage"),
                (4, 4.0, "insert"),
                (1, 1.5, "update_preimage"),
                (1, 1.75, "update_postimage"),
                (5, 5.0, "insert"),
                (3, 3.0, "update_preimage"),
                (3, 3.5, "update_postimage"),
            ],
            "order_id bigint, amount double, _change_type string",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_the_quarantine_and_metrics_tables_are_compacted_and_keep_every_batchs_rows_once(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Refine appends to the shared system tables every batch: they are compacted after a
    write like silver (every `compact_every` versions), rewriting files, never rows."""
    settings = replace(kafka_up, storage=replace(kafka_up.storage, compact_every=2))
    source, topic, name, settings = events_pipeline(
        spark,
        settings,
        [order(1, 1.0, 1), order(2, -2.0, 1)],
        schema=ORDER_SCHEMA,
        keys=("order_id",),
        sequence_by="ts",
        expectations=(rule("amount_not_negative", "quarantine", sql="amount >= 0"),),
    )
    system_tables = [system.path(settings, t) for t in (system.QUARANTINE, system.METRICS)]
    run_refine(spark, settings, name)
    before = [tables.latest_version(spark, p) for p in system_tables]
    for i in range(3, 7):
        produce(settings, topic, [order(i, float(i), 1), order(-i, -float(i), 1)])
        run_ingest(spark, settings, source)
        run_refine(spark, settings, name)

    for path, since in zip(system_tables, before, strict=True):
        history = DeltaTable.forPath(spark, path).history().where(f"version > {since}")
        operations = [r["operation"] for r in history.collect()]
        assert "OPTIMIZE" in operations, (path, operations)
    assert_df_equality(
        quarantine(spark, settings, name).selectExpr("batch_id", "offset", "failed_rules"),
        spark.createDataFrame(
            [(b, 2 * b + 1, ["amount_not_negative"]) for b in range(5)],
            "batch_id bigint, offset bigint, failed_rules array<string>",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert_df_equality(
        metrics(spark, settings, name).selectExpr(
            "batch_id", "rule", "passed", "failed", "batch_rows", "batch_quarantined"
        ),
        spark.createDataFrame(
            [(b, "amount_not_negative", 1, 1, 2, 1) for b in range(5)]
            + [(b, "parsable", 2, 0, 2, 1) for b in range(5)],  # every events table's rule
            "batch_id bigint, rule string, passed bigint, failed bigint, batch_rows bigint, "
            "batch_quarantined bigint",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
