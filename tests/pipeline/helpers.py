"""The fault test's pipeline: its configuration (a copy of the sample pipeline over its own
topic, PostgreSQL table and tables), its jobs, its faults and its checks against the
workloads' models."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.core import kafka
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.devstack.chaos import Job
from lakehouse.devstack.workload import Order

ORDER_SCHEMA = (
    "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT"
)
CUSTOMER_SCHEMA = "customer_id INT, name STRING, email STRING, country STRING, updated_at TIMESTAMP"
CUSTOMER_DDL = (
    "CREATE TABLE public.{table} (customer_id int PRIMARY KEY, name text, email text, "
    "country text, updated_at timestamp)"
)
GOLD_SCHEMA = "day DATE, customer_id BIGINT, revenue DECIMAL(22,2), orders BIGINT"
BUCKET = "15m"
INTERVAL = "15 seconds"  # every stream; the move and the gold build run every 30 s


@dataclass(frozen=True)
class Names:
    """The sources and tables of one run (a tag keeps them apart from every other test's)."""

    tag: str

    @property
    def orders(self) -> str:  # the events source and its silver table
        return f"fo_{self.tag}"

    @property
    def customers(self) -> str:  # the CDC source and its SCD1 table
        return f"fc_{self.tag}"

    @property
    def history(self) -> str:
        return f"fch_{self.tag}"

    @property
    def offline(self) -> str:
        return f"foff_{self.tag}"

    @property
    def hybrid(self) -> str:
        return f"fo_{self.tag}_hybrid"

    @property
    def gold(self) -> str:
        return f"fg_{self.tag}"


def pipeline_conf(names: Names, orders_topic: str, cdc_topic: str) -> dict[str, object]:
    """The sample pipeline (conf/base) for this run's topic and PostgreSQL table."""
    customers = {"schema": CUSTOMER_SCHEMA, "keys": ["customer_id"]}
    return {
        "sources": {
            names.orders: {
                "kind": "events",
                "topics": [orders_topic],
                "trigger_interval": INTERVAL,
            },
            names.customers: {"kind": "cdc", "topics": [cdc_topic], "trigger_interval": INTERVAL},
        },
        "silver": {
            names.orders: {
                "source": names.orders,
                "mode": "upsert",
                "schema": ORDER_SCHEMA,
                "keys": ["order_id"],
                "sequence_by": "ts",
                "schema_drift": "rescue",
                "expectations": [
                    {"name": "amount_not_negative", "sql": "amount >= 0", "action": "quarantine"}
                ],
            },
            names.customers: {"source": names.customers, "mode": "scd1", **customers},
            names.history: {
                "source": names.customers,
                "mode": "scd2",
                "track_columns": ["name", "email", "country"],
                **customers,
            },
        },
        "offline": {
            names.offline: {
                "realtime": names.orders,
                "time_column": "ts",
                "time_format": "epoch_ms",
                "bucket": BUCKET,
                "buffer": "1m",
                "hybrid_view": names.hybrid,
            }
        },
        "gold": {
            names.gold: {
                "source": names.hybrid,
                "group_by": {"day": "to_date(timestamp_millis(ts))", "customer_id": "customer_id"},
                "aggregates": {"revenue": "sum(amount)", "orders": "count(*)"},
                "trigger_interval": "30s",
            }
        },
    }


def pipeline_jobs(names: Names, logs: Path) -> list[Job]:
    """Every job of the pipeline, as `lakehouse pipeline` plans them, each continuous."""
    refine = ("--trigger-interval", INTERVAL)
    specs = [
        ("ingest_events", names.orders, ("--source", names.orders)),
        ("ingest_cdc", names.customers, ("--source", names.customers)),
        ("refine_silver", names.orders, ("--table", names.orders, *refine)),
        ("refine_silver", names.customers, ("--table", names.customers, *refine)),
        ("refine_silver", names.history, ("--table", names.history, *refine)),
        ("realtime_to_offline", names.offline, ("--table", names.offline, "--interval", "30s")),
        ("build_gold", names.gold, ("--table", names.gold)),
    ]
    return [
        Job(f"{script}.{name}", script, args, logs / f"{script}.{name}.log")
        for script, name, args in specs
    ]


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
