"""The demo pipeline, through bronze and silver with the real jobs' library calls:

1. `orders`: sample events (plus a malformed message, a negative amount, an unknown status and
   a later version of one order) into Kafka, `ingest_events` into bronze.orders, `refine_silver`
   into silver.orders (upsert by `order_id` ordered by `ts`, expectations from tables.yml);
2. `customers`: inserts, updates and a delete in PostgreSQL `public.customers`, through the
   Debezium connector into Kafka, `ingest_cdc` into bronze.customers, `refine_silver` into
   silver.customers (SCD1) and silver.customers_history (SCD2), checked against PostgreSQL;
3. offline (`demo_offline`): the closed buckets of silver.orders move to offline.orders_offline,
   a backfill corrects a window, and the hybrid view silver.orders_hybrid is shown before and
   after, with the boundary's history;
4. gold (`demo_gold`): build_gold keeps daily_revenue exact before and after the backfill,
   after a late update of an order and after a delete of another (each through ingest, refine
   and a move), each time checked against a recompute from the hybrid view."""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any

from lakehouse.connectors.sources import apply_source
from lakehouse.core import kafka, tables
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.devstack import ServiceError, demo_gold, demo_offline, pg

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.silver.refine import RefineResult

log = logging.getLogger(__name__)

DEMO_TOPIC = "orders"
STATUSES = ("created", "paid", "shipped", "cancelled")
CDC_SOURCE = "customers"  # its connector is declared in conf/base/sources.yml
SPACING_MS = 20 * 60_000  # sample orders 20 minutes apart: they span two 2h buckets
START_MS = 1_767_225_600_000  # 2026-01-01T00:00Z


@dataclass(frozen=True)
class DemoResult:
    table_path: str
    rows_this_run: int
    rows_in_table: int
    delta_version: int
    silver_orders: int
    silver_customers: int
    postgres_customers: int


def sample_orders(count: int, first_id: int, start_ms: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)  # noqa: S311 - sample data, not security
    return [
        {
            "order_id": first_id + i,
            "customer_id": rng.randint(1, 5),
            "order_status": rng.choice(STATUSES),
            "amount": round(rng.uniform(5, 500), 2),
            "ts": start_ms + i * SPACING_MS,
        }
        for i in range(count)
    ]


def run(spark: SparkSession, settings: Settings, events: int = 10) -> DemoResult:
    bronze_step = _orders_to_bronze(spark, settings, events)
    silver_orders = _orders_to_silver(spark, settings, bronze_step.first_id)
    silver_customers, postgres_customers = _customers_through_debezium(spark, settings)
    demo_offline.move(spark, settings, bronze_step.first_id)
    demo_gold.build(spark, settings, "before the backfill")
    demo_offline.correct(spark, settings, bronze_step.first_id)
    demo_gold.build(spark, settings, "after the backfill: the window's groups change")
    orders = sample_orders(events, bronze_step.first_id, START_MS, seed=bronze_step.first_id)
    updated, deleted = orders[min(7, len(orders) - 1)], orders[min(8, len(orders) - 1)]
    demo_gold.update_order(settings, updated)
    _through_the_jobs(spark, settings, f"after a late update of order {updated['order_id']}")
    demo_gold.delete_order(settings, deleted)
    _through_the_jobs(spark, settings, f"after a delete of order {deleted['order_id']}")
    print(
        "\nDemo done. Explore the tables in notebooks/explore.ipynb; "
        "`lakehouse status` shows the per-table summary."
    )
    return DemoResult(
        bronze_step.path,
        bronze_step.rows_this_run,
        bronze_step.rows_in_table,
        bronze_step.version,
        silver_orders,
        silver_customers,
        postgres_customers,
    )


def _through_the_jobs(spark: SparkSession, settings: Settings, what: str) -> None:
    """A change sent to an order of the moved [02:00, 04:00) bucket, through every job:
    ingest, refine, realtime_to_offline (it moves the bucket again), build_gold."""
    from lakehouse.bronze.ingest import IngestOptions, ingest
    from lakehouse.offline.move import MoveOptions, describe, move_all
    from lakehouse.silver.refine import RefineOptions, refine

    ingest(spark, settings, IngestOptions("orders"), "events")
    refine(spark, settings, RefineOptions("orders"))
    for moved in move_all(spark, settings, MoveOptions(demo_offline.TABLE)):
        print(describe(moved))
    demo_gold.build(spark, settings, what)


@dataclass(frozen=True)
class _BronzeStep:
    path: str
    first_id: int
    rows_this_run: int
    rows_in_table: int
    version: int


def _banner(text: str) -> None:
    print(f"\n=== {text} ===\n")


def _orders_to_bronze(spark: SparkSession, settings: Settings, events: int) -> _BronzeStep:
    """Produce sample orders and four messages that exercise the rules, ingest into bronze."""
    from pyspark.sql import functions as F

    from lakehouse.bronze.ingest import IngestOptions, bronze_path, ingest

    kafka.ensure_topic(settings.kafka, DEMO_TOPIC, partitions=2)
    before = kafka.end_offsets(settings.kafka, DEMO_TOPIC)
    first_id = 1000 + sum(before.values())
    start_ms = START_MS
    orders: list[dict[str, object]] = sample_orders(events, first_id, start_ms, seed=first_id)
    later = {**orders[0], "order_status": "shipped", "ts": start_ms + events * SPACING_MS}
    # Two orders of today: they stay in the realtime table's open bucket, so the hybrid view
    # serves them from realtime while the January ones move offline.
    now_ms = int(time.time() * 1000)
    fresh = sample_orders(2, first_id + events + 2, now_ms, seed=first_id + 1)
    negative = {**orders[-1], "order_id": first_id + events, "amount": -3.5}
    unknown = {**orders[-1], "order_id": first_id + events + 1, "order_status": "lost"}
    records: list[tuple[bytes | None, bytes | None, int | None]] = [
        (str(o["order_id"]).encode(), json.dumps(o).encode(), None)
        for o in (*orders, later, negative, unknown, *fresh)
    ]
    records.append((b"broken", b'{"order_id": 99, "amou', None))  # kept, flagged, not lost
    kafka.produce(settings.kafka, DEMO_TOPIC, records)

    result = ingest(spark, settings, IngestOptions("orders"), "events")
    path = bronze_path(settings, "orders")
    table = spark.read.format("delta").load(path)
    # This run's rows: at or past the end offsets seen before producing, per partition.
    this_run = table.where(
        reduce(
            lambda acc, po: acc | ((F.col("partition") == po[0]) & (F.col("offset") >= po[1])),
            before.items(),
            F.lit(False),
        )
    )
    _banner(
        f"bronze.orders: {len(records)} messages produced to Kafka topic '{DEMO_TOPIC}', "
        f"ingested by ingest_events ({path})"
    )
    this_run.orderBy("partition", "offset").select(
        "partition",
        "offset",
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "value_error",
        "ingest_date",
    ).show(len(records), truncate=60)
    version = tables.latest_version(spark, path)
    step = _BronzeStep(path, first_id, this_run.count(), table.count(), version)
    print(
        f"rows this run: {step.rows_this_run} (ingest read {result.rows}), "
        f"rows in bronze.orders: {step.rows_in_table}, Delta version: {step.version}"
    )
    table.groupBy("value_error").count().orderBy("value_error").show()
    return step


def _orders_to_silver(spark: SparkSession, settings: Settings, first_id: int) -> int:
    from pyspark.sql import functions as F

    from lakehouse.silver.refine import RefineOptions, refine

    result = refine(spark, settings, RefineOptions("orders"))
    _banner(f"silver.orders: refine_silver --table orders ({result.path})")
    _print_refine(result)
    silver = current_rows(spark.read.format("delta").load(result.path))
    silver.where(F.col("order_id") >= first_id).orderBy("order_id").show(50, truncate=False)
    print("expectation metrics of this run (_system/expectation_metrics):")
    _this_run(spark, settings, "expectation_metrics", result).groupBy("rule", "action").agg(
        F.sum("passed").alias("passed"), F.sum("failed").alias("failed")
    ).orderBy("rule").show(truncate=False)
    print("quarantined by this run (_system/quarantine; `lakehouse replay orders` after a fix):")
    _this_run(spark, settings, "quarantine", result).select(
        "topic", "partition", "offset", "failed_rules", "parse_error", "record"
    ).show(truncate=60)
    return silver.count()


def _customers_through_debezium(spark: SparkSession, settings: Settings) -> tuple[int, int]:
    """Changes in PostgreSQL -> Debezium -> bronze.customers -> silver (SCD1 and SCD2)."""
    from lakehouse.bronze.ingest import IngestOptions, ingest
    from lakehouse.silver.refine import RefineOptions, refine

    apply_source(settings, CDC_SOURCE)  # what `lakehouse connectors apply customers` does
    changed = _change_customers(settings)
    _wait_for_changes(settings, changed)
    ingest(spark, settings, IngestOptions("customers"), "cdc")
    _banner("silver.customers (SCD1) and silver.customers_history (SCD2) from Debezium")
    results = [
        refine(spark, settings, RefineOptions(n)) for n in ("customers", "customers_history")
    ]
    for result in results:
        _print_refine(result)
    current = current_rows(spark.read.format("delta").load(results[0].path))
    current.orderBy("customer_id").show(50, truncate=False)
    postgres = _postgres_customers(settings)
    matches = sorted(r["customer_id"] for r in current.collect()) == sorted(postgres)
    print(
        f"silver.customers: {current.count()} live rows; PostgreSQL public.customers: "
        f"{len(postgres)} rows; same keys: {'yes' if matches else 'NO'}"
    )
    print("silver.customers_history, versions of the keys this run changed:")
    history = spark.read.format("delta").load(results[1].path)
    history.where(history["customer_id"].isin(*changed.keys)).orderBy(
        "customer_id", "__start_seq"
    ).select("customer_id", "name", "country", "__start_at", "__end_at").show(50, truncate=False)
    return current.count(), len(postgres)


@dataclass(frozen=True)
class _Changes:
    keys: list[int]
    records: int  # Kafka records they make (a delete also makes a tombstone)


def _change_customers(settings: Settings) -> _Changes:
    """Three inserts, an update and a delete (of the oldest demo row, when there is one)."""
    countries = ("NO", "SE", "DK", "FI")
    with pg.connect(settings) as conn:
        first = int(_one(conn, "SELECT coalesce(max(customer_id), 0) + 1 FROM customers"))
        new = [first, first + 1, first + 2]
        for key in new:
            conn.execute(
                "INSERT INTO customers (customer_id, name, email, country) VALUES (%s, %s, %s, %s)",
                (key, f"customer {key}", f"c{key}@example.com", countries[key % 4]),
            )
        conn.execute(
            "UPDATE customers SET country = 'IS', updated_at = now() WHERE customer_id = %s",
            (first,),
        )
        records = len(new) + 1
        oldest = _one(conn, "SELECT min(customer_id) FROM customers")
        if oldest is not None and oldest < first:
            conn.execute("DELETE FROM customers WHERE customer_id = %s", (oldest,))
            new.append(int(oldest))
            records += 2
    print(f"PostgreSQL: inserted {new[:3]}, updated {first}, deleted {new[3:] or 'nothing'}")
    return _Changes(new, records)


def _wait_for_changes(settings: Settings, changes: _Changes, timeout_s: float = 120) -> None:
    """Debezium is asynchronous: wait until the topic holds at least our changes and has
    stopped growing (a first registration also snapshots the existing rows)."""
    (topic,) = settings.sources[CDC_SOURCE].topics
    deadline, last, stable_since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        try:
            seen = sum(kafka.end_offsets(settings.kafka, topic).values())
        except kafka.KafkaError:
            seen = 0
        if seen != last:
            last, stable_since = seen, time.monotonic()
        elif seen >= changes.records and time.monotonic() - stable_since > 3:
            return
        time.sleep(0.5)
    raise ServiceError(
        f"Debezium did not deliver the demo's changes to {topic} within {timeout_s:.0f} s; "
        "see .lakehouse/logs/connect.log"
    )


def _postgres_customers(settings: Settings) -> list[int]:
    with pg.connect(settings) as conn:
        return [int(r[0]) for r in conn.execute("SELECT customer_id FROM customers").fetchall()]


def _one(conn: Any, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    return row[0] if row else None


def _print_refine(result: RefineResult) -> None:
    failed = {rule: n for rule, n in result.failed.items() if n}
    print(
        f"silver.{result.table}: {result.batches} batch(es), {result.rows_in} records in, "
        f"{result.rows_written} written, {result.rows_dropped} dropped, "
        f"{result.rows_quarantined} quarantined; failed per rule: {failed or 'none'}"
    )


def _this_run(
    spark: SparkSession, settings: Settings, log_name: str, result: RefineResult
) -> DataFrame:
    """Rows of a system table written by the batches of this refine run."""
    from pyspark.sql import functions as F

    from lakehouse.core import system

    path = system.path(settings, log_name)
    return (
        spark.read.format("delta")
        .load(path)
        .where(
            (F.col("table") == result.table)
            & (F.col("run_id") == result.run_id)
            & F.col("batch_id").isin(*result.batch_ids)
        )
    )
