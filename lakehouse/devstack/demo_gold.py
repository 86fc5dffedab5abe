"""The demo's gold steps, with the job's own library calls: build_gold keeps daily_revenue (per
UTC day and customer, from the hybrid view) exact through a backfill, a late update and a
delete of an order, each time checked against a recompute from the view (the demo stops
with exit 1 when they differ)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from lakehouse.core import kafka
from lakehouse.core.errors import CheckFailed
from lakehouse.core.settings import Settings
from lakehouse.gold import aggregate
from lakehouse.gold.build import GoldOptions, build_gold, gold_path
from lakehouse.offline import hybrid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLE = "daily_revenue"


def build(spark: SparkSession, settings: Settings, what: str) -> None:
    """One build_gold run, the January rows of daily_revenue, and the check."""
    print(f"\n=== build_gold --table {TABLE} ({what}) ===\n")
    print(build_gold(spark, settings, GoldOptions(TABLE)).describe())
    gold = spark.read.format("delta").load(gold_path(settings, TABLE))
    gold.where("day = DATE'2026-01-01'").orderBy("customer_id").show(truncate=False)
    recompute = aggregate.aggregate(
        hybrid.read_hybrid(spark, settings, settings.gold_table(TABLE).source),
        settings.gold_table(TABLE),
    )
    same = gold.exceptAll(recompute).isEmpty() and recompute.exceptAll(gold).isEmpty()
    source = settings.gold_table(TABLE).source
    print(
        f"gold.{TABLE}: {gold.count()} group(s); equal to a full recompute from "
        f"silver.{source}: {'yes' if same else 'NO'}"
    )
    if not same:
        raise CheckFailed(f"demo: gold.{TABLE} differs from a full recompute of silver.{source}")


def update_order(settings: Settings, order: dict[str, object]) -> None:
    """A later version of a January order (new amount and customer, a minute later: silver
    orders versions by `ts`) to Kafka: ingest and refine take it from there; it is late for its
    moved bucket."""
    changed = {**order, "amount": 1.0, "customer_id": 5, "ts": int(str(order["ts"])) + 60_000}
    _send(settings, changed, f"a later version of order {order['order_id']}")


def delete_order(settings: Settings, order: dict[str, object]) -> None:
    """A delete of a January order: a later event with status `deleted`, which silver.orders
    applies as a delete of its key (`apply_as_deletes` in tables.yml)."""
    deleted = {**order, "order_status": "deleted", "ts": int(str(order["ts"])) + 60_000}
    _send(settings, deleted, f"order {order['order_id']} deleted")


def _send(settings: Settings, order: dict[str, object], what: str) -> None:
    kafka.produce(
        settings.kafka,
        "orders",
        [(str(order["order_id"]).encode(), json.dumps(order).encode(), None)],
    )
    print(f"\nKafka 'orders': {what}: {order}")
