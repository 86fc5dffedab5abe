"""The fault test's checks against the workloads' models (the pipeline it runs, its
configuration and jobs, is `lakehouse.devstack.sample_pipeline`)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core import kafka
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.devstack.workload import Order

GOLD_SCHEMA = "day DATE, customer_id BIGINT, revenue DECIMAL(22,2), orders BIGINT"


def day(ts_ms: int) -> date:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).date()


def gold_model(rows: list[Order]) -> list[tuple[date, int, Decimal, int]]:
    """daily_revenue recomputed from the expected hybrid rows, in Python."""
    groups: dict[tuple[date, int], tuple[Decimal, int]] = {}
    for row in rows:
        key = (day(row["ts"]), row["customer_id"])
        revenue, count = groups.get(key, (Decimal(0), 0))
        groups[key] = (revenue + row["amount"], count + 1)
    return [(d, c, revenue, n) for (d, c), (revenue, n) in groups.items()]


def order_tuples(rows: list[Order]) -> list[tuple[Any, ...]]:
    return [
        (o["order_id"], o["customer_id"], o["order_status"], o["amount"], o["ts"]) for o in rows
    ]


def same_rows(actual: DataFrame, expected: DataFrame) -> None:
    assert_df_equality(
        actual,
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        underline_cells=True,
    )


def exactly_once(spark: SparkSession, settings: Settings, source: str, topic: str) -> int:
    """Every offset of `topic` once in bronze `source`: per partition, offsets 0 .. end - 1,
    each once. Returns the records checked."""
    ends = kafka.end_offsets(settings.kafka, topic)
    bronze = spark.read.format("delta").load(settings.storage.path("bronze", source))
    summary = bronze.groupBy("partition").agg(
        F.count("*").alias("records"),
        F.count_distinct("offset").alias("offsets"),
        F.min("offset").alias("first"),
        F.max("offset").alias("last"),
    )
    expected = spark.createDataFrame(
        [(p, e, e, 0, e - 1) for p, e in ends.items() if e > 0],
        "partition INT, records BIGINT, offsets BIGINT, first BIGINT, last BIGINT",
    )
    same_rows(summary, expected)
    return sum(ends.values())


def wait_for(what: str, done: Any, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(1.0)


def current(spark: SparkSession, settings: Settings, layer: str, name: str) -> DataFrame:
    return current_rows(spark.read.format("delta").load(settings.storage.path(layer, name)))
