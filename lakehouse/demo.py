"""The demo pipeline (foundation stage): produce sample `orders` events to Kafka, read them back
with Spark's Kafka source, write them to a Delta table and show what landed."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse import kafka
from lakehouse.settings import Settings
from lakehouse.transforms import decode_json_value

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

DEMO_TOPIC = "orders"
STATUSES = ("created", "paid", "shipped", "cancelled")


@dataclass(frozen=True)
class DemoResult:
    table_path: str
    rows_this_run: int
    rows_in_table: int
    delta_version: int


def orders_schema() -> StructType:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("order_id", LongType()),
            StructField("customer_id", LongType()),
            StructField("order_status", StringType()),
            StructField("amount", DoubleType()),
            StructField("ts", LongType()),
        ]
    )


def sample_orders(count: int, first_id: int, start_ms: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)  # noqa: S311 - sample data, not security
    return [
        {
            "order_id": first_id + i,
            "customer_id": rng.randint(1, 5),
            "order_status": rng.choice(STATUSES),
            "amount": round(rng.uniform(5, 500), 2),
            "ts": start_ms + i * 60_000,
        }
        for i in range(count)
    ]


def read_topic_range(
    spark: SparkSession, settings: Settings, topic: str, start: dict[int, int], end: dict[int, int]
) -> DataFrame:
    """A bounded batch read of exactly [start, end) per partition."""
    return (
        spark.read.format("kafka")
        .options(**kafka.spark_options(settings.kafka))
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in end.items()}}))
        .load()
    )


def run(spark: SparkSession, settings: Settings, events: int = 10) -> DemoResult:
    from delta.tables import DeltaTable

    kafka.ensure_topic(settings.kafka, DEMO_TOPIC, partitions=2)
    before = kafka.end_offsets(settings.kafka, DEMO_TOPIC)
    first_id = 1000 + sum(before.values())
    orders = sample_orders(events, first_id, start_ms=1_767_225_600_000, seed=first_id)
    kafka.produce(
        settings.kafka,
        DEMO_TOPIC,
        [(str(o["order_id"]).encode(), json.dumps(o).encode(), None) for o in orders],
    )
    after = kafka.end_offsets(settings.kafka, DEMO_TOPIC)
    raw = read_topic_range(spark, settings, DEMO_TOPIC, before, after)
    decoded = decode_json_value(raw, orders_schema())

    path = settings.storage.path("_demo", "orders")
    decoded.write.format("delta").mode("append").save(path)
    table = spark.read.format("delta").load(path)
    this_run = table.where(table.order_id >= first_id).orderBy("order_id")
    print(
        f"\nDemo: {events} events produced to Kafka topic '{DEMO_TOPIC}', read by Spark, "
        f"appended to Delta table {path}\n"
    )
    this_run.select(
        "topic", "partition", "offset", "order_id", "customer_id", "order_status", "amount", "ts"
    ).show(events, truncate=False)
    version = DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
    result = DemoResult(path, this_run.count(), table.count(), int(version))
    print(
        f"rows this run: {result.rows_this_run}, rows in table: {result.rows_in_table}, "
        f"Delta version: {result.delta_version}"
    )
    return result
