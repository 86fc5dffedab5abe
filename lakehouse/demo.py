"""The demo pipeline: sample `orders` events into Kafka, through `ingest_events`, into the
append-only bronze table, shown with their lineage and parse status. (Silver, gold and the
offline/hybrid steps join as they land.)"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse import kafka
from lakehouse.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEMO_TOPIC = "orders"
STATUSES = ("created", "paid", "shipped", "cancelled")


@dataclass(frozen=True)
class DemoResult:
    table_path: str
    rows_this_run: int
    rows_in_table: int
    delta_version: int


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


def run(spark: SparkSession, settings: Settings, events: int = 10) -> DemoResult:
    """Produce sample orders (plus one malformed message) to the `orders` topic, run the real
    `ingest_events` path into bronze.orders, and show what landed."""
    from pyspark.sql import functions as F

    from lakehouse.ingest import IngestOptions, bronze_path, ingest

    kafka.ensure_topic(settings.kafka, DEMO_TOPIC, partitions=2)
    before = kafka.end_offsets(settings.kafka, DEMO_TOPIC)
    first_id = 1000 + sum(before.values())
    orders = sample_orders(events, first_id, start_ms=1_767_225_600_000, seed=first_id)
    records: list[tuple[bytes | None, bytes | None, int | None]] = [
        (str(o["order_id"]).encode(), json.dumps(o).encode(), None) for o in orders
    ]
    records.append((b"broken", b'{"order_id": 99, "amou', None))  # kept, flagged, not lost
    kafka.produce(settings.kafka, DEMO_TOPIC, records)

    from delta.tables import DeltaTable

    result = ingest(spark, settings, IngestOptions("orders"), "events")
    path = bronze_path(settings, "orders", settings.source("orders"))
    table = spark.read.format("delta").load(path)
    # This run's rows: at or past the end offsets seen before producing, per partition.
    this_run = table.where(
        reduce(
            lambda acc, po: acc | ((F.col("partition") == po[0]) & (F.col("offset") >= po[1])),
            before.items(),
            F.lit(False),
        )
    )
    print(
        f"\nDemo: {len(records)} messages produced to Kafka topic '{DEMO_TOPIC}' and ingested "
        f"by ingest_events into bronze.orders ({path})\n"
    )
    this_run.orderBy("partition", "offset").select(
        "partition",
        "offset",
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "value_status",
        "ingest_date",
    ).show(len(records), truncate=60)
    version = DeltaTable.forPath(spark, path).history(1).collect()[0]["version"]
    demo = DemoResult(path, this_run.count(), table.count(), int(version))
    print(
        f"rows this run: {demo.rows_this_run} (ingest read {result.rows}), "
        f"rows in bronze.orders: {demo.rows_in_table}, Delta version: {demo.delta_version}"
    )
    table.groupBy("value_status").count().orderBy("value_status").show()
    return demo
