"""Silver throughput: `refine_silver` (the library call, no expectations) against a minimal
hand-written Spark job doing the same bronze -> silver step, same session, alternating runs.

    .venv/bin/python bench/silver_refine.py --events 1000000 --rounds 4

The events (orders, ~110 bytes of JSON, `silver_expectations.event`) are produced to Kafka and
ingested once into bronze with the real `ingest_events` path. Every round then runs, for each
mode, refine and the hand-written job over all of bronze (one micro-batch, available-now) into
a fresh table with its own checkpoint; who goes first alternates. The hand-written job:
`readStream` of bronze's change feed from version 0, inserts only, `from_json(CAST(value AS
STRING), schema)` plus the Kafka lineage columns, then a Delta append (append) or, in
`foreachBatch`, the latest record per `order_id` by `ts` (`row_number`) MERGEd into the table
(upsert). `--modes scd1` refines Debezium envelopes (`bronze_ingest.envelope`, a CDC source
of their own) into an scd1 table, against `foreachBatch` taking each envelope's row image
(`before` for a delete) with `from_json`, the latest change per key by LSN, MERGEd (a delete
deletes). `--breakdown` also times, on the same bronze rows read as a static DataFrame and
written to Spark's `noop` sink, how far each step of a refine batch gets: the hand-written
parse, refine's parse (`plan.transform`), plus the rules' evaluation, plus the cache and the
batch's one aggregation. Needs Kafka (started here if it is not running, and stopped again at
the end if it was started here). `--amounts large` sends amounts from 1e7 on, which Spark's JSON
map prints with an exponent (12345012.5 as 1.23450125E7). `--same-promises` adds, in append
mode, a third job: a hand-written one keeping refine's promises (`same_promises`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from benchlib import SHIPPED_SPARK, cpu_seconds, jvm_pid, preload
from bronze_ingest import envelope, envelope_key
from same_promises import promises_append
from silver_expectations import MAX_OFFSETS_PER_TRIGGER, PARTITIONS, SCHEMA, SOURCE, event

from lakehouse.bronze.ingest import IngestOptions, ingest
from lakehouse.core import kafka, tables
from lakehouse.core.settings import Settings, load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import SilverTableSettings, SourceSettings
from lakehouse.devstack.kafka import kafka_status, start_kafka, stop_kafka
from lakehouse.silver.refine import RefineOptions, refine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# (session, settings, bronze path, work directory) -> rows read
Job = Callable[["SparkSession", Settings, str, str], int]


CDC_SOURCE = "bench_customers"
# The row image of `bronze_ingest.envelope`, as Debezium sends it (updated_at in microseconds).
CDC_SCHEMA = "customer_id BIGINT, name STRING, email STRING, country STRING, updated_at TIMESTAMP"


def silver_table(mode: str) -> SilverTableSettings:
    if mode == "scd1":
        return SilverTableSettings(
            source=CDC_SOURCE, mode=mode, schema=CDC_SCHEMA, keys=("customer_id",)
        )
    return SilverTableSettings(
        source=SOURCE,
        mode=mode,
        schema=SCHEMA,
        keys=("order_id",),
        sequence_by="ts" if mode == "upsert" else "",
    )


def refine_job(mode: str) -> Job:
    def run(spark: SparkSession, settings: Settings, _bronze: str, _work: str) -> int:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        result = refine(
            spark, replace(settings, silver={name: silver_table(mode)}), RefineOptions(name)
        )
        if result.batches != 1:
            print(f"note: refine ran {result.batches} micro-batches")
        return result.rows_in

    return run


def parsed(batch: DataFrame) -> DataFrame:
    """The hand-written parse: the record's columns and the Kafka lineage."""
    from pyspark.sql import functions as F

    return batch.select(
        F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"),
        "topic",
        "partition",
        "offset",
        "kafka_timestamp",
    ).select("r.*", "topic", "partition", "offset", "kafka_timestamp")


def feed(spark: SparkSession, bronze: str) -> DataFrame:
    return (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(bronze)
        .where("_change_type = 'insert'")
    )


def drain(source: DataFrame, apply: Callable[[DataFrame, int], None], checkpoint: str) -> int:
    """`source` through `apply` per micro-batch, available-now: the rows it read."""
    query = (
        source.writeStream.foreachBatch(apply)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def hand_append(spark: SparkSession, _settings: Settings, bronze: str, work: str) -> int:
    target = f"{work}/hand_{uuid.uuid4().hex[:10]}"
    query = (
        parsed(feed(spark, bronze))
        .writeStream.format("delta")
        .option("checkpointLocation", f"{target}_checkpoint")
        .trigger(availableNow=True)
        .start(target)
    )
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def hand_upsert(spark: SparkSession, _settings: Settings, bronze: str, work: str) -> int:
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    target = f"{work}/hand_{uuid.uuid4().hex[:10]}"
    empty = parsed(spark.read.format("delta").load(bronze).limit(0))
    empty.write.format("delta").save(target)

    def upsert(batch: DataFrame, _batch_id: int) -> None:
        latest = Window.partitionBy("order_id").orderBy(F.col("ts").desc())
        rows = parsed(batch).withColumn("_n", F.row_number().over(latest)).where("_n = 1")
        (
            DeltaTable.forPath(spark, target)
            .alias("t")
            .merge(rows.drop("_n").alias("s"), "t.order_id = s.order_id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )

    return drain(feed(spark, bronze), upsert, f"{target}_checkpoint")


def cdc_image(batch: DataFrame) -> DataFrame:
    """The hand-written parse of a Debezium envelope: its row image (`before` for a delete)
    with one `from_json`, the op, LSN, source time and Kafka lineage."""
    from pyspark.sql import functions as F

    image = CDC_SCHEMA.replace("updated_at TIMESTAMP", "updated_at BIGINT")
    envelope = f"struct<before: struct<{image}>, after: struct<{image}>, op: string, " + (
        "source: struct<lsn: bigint, ts_ms: bigint>>"
    )
    e = F.from_json(F.col("value").cast("string"), envelope)
    rows = batch.select(e.alias("e"), "topic", "partition", "offset")
    row = F.when(F.col("e.op") == "d", F.col("e.before")).otherwise(F.col("e.after"))
    return rows.select(
        row.alias("r"),
        F.col("e.op").alias("_op"),
        F.col("e.source.lsn").alias("_seq"),
        F.timestamp_millis(F.col("e.source.ts_ms")).alias("_ts"),
        "topic",
        "partition",
        "offset",
    ).select(
        *[F.col(f"r.{n}") for n in ("customer_id", "name", "email", "country")],
        F.timestamp_micros(F.col("r.updated_at")).alias("updated_at"),
        "_op",
        "_seq",
        "_ts",
        "topic",
        "partition",
        "offset",
    )


def hand_scd1(spark: SparkSession, _settings: Settings, bronze: str, work: str) -> int:
    """Debezium envelopes: the row image, the latest change per key by LSN, MERGEd (a
    delete deletes)."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    changes = cdc_image
    target = f"{work}/hand_{uuid.uuid4().hex[:10]}"
    empty = changes(spark.read.format("delta").load(bronze).limit(0))
    empty.write.format("delta").save(target)

    def apply(batch: DataFrame, _batch_id: int) -> None:
        latest = Window.partitionBy("customer_id").orderBy(F.col("_seq").desc())
        rows = changes(batch).withColumn("_n", F.row_number().over(latest)).where("_n = 1")
        (
            DeltaTable.forPath(spark, target)
            .alias("t")
            .merge(rows.drop("_n").alias("s"), "t.customer_id = s.customer_id")
            .whenMatchedDelete("s._op = 'd'")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll("s._op != 'd'")
            .execute()
        )

    return drain(feed(spark, bronze), apply, f"{target}_checkpoint")


def large_event(i: int) -> dict[str, Any]:
    """Order `i` with its amount from 1e7 on (`-5.0`, a rule's break, stays)."""
    order = event(i)
    if order["amount"] > 0:
        order["amount"] += 12_345_000
    return order


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--modes", default="append,upsert")
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--same-promises", action="store_true")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--amounts", choices=("plain", "large"), default="plain")
    args = parser.parse_args()
    modes = args.modes.split(",")
    # Each refine batch's line: its phases (parse for CDC, check, silver, quarantine, metrics).
    logging.basicConfig(format="  %(message)s", level=logging.WARNING)
    logging.getLogger("lakehouse.core.streaming").setLevel(logging.INFO)

    work = tempfile.mkdtemp(prefix="bench-silver-refine-")
    settings = load_settings(
        "test",
        overrides={
            "storage.root": work,
            "spark.conf": {**SHIPPED_SPARK, "spark.driver.memory": args.driver_memory},
        },
    )
    kafka_was_running = kafka_status(settings).startswith("running")
    start_kafka(settings)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    preload(
        settings, topic, args.events, large_event if args.amounts == "large" else event, PARTITIONS
    )
    sources = {
        SOURCE: SourceSettings(
            kind="events", topics=(topic,), max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER
        )
    }
    if "scd1" in modes:  # Debezium envelopes in a CDC source of their own
        cdc_topic = f"bench-cdc-{uuid.uuid4().hex[:8]}"
        preload(settings, cdc_topic, args.events, envelope, PARTITIONS, envelope_key)
        sources[CDC_SOURCE] = SourceSettings(
            kind="cdc", topics=(cdc_topic,), max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER
        )
    settings = replace(settings, sources=sources, silver={})
    spark = build_session(settings, "bench-silver-refine")
    pid = jvm_pid(spark)
    results: list[dict[str, Any]] = []
    try:
        for name, source in sources.items():
            ingested = ingest(spark, settings, IngestOptions(name), source.kind)
            print(f"bronze of {name} holds {ingested.rows} records")
            kafka.delete_topics(settings.kafka, list(source.topics))
        bronzes = {
            kind: tables.table_path(settings, settings.bronze_table(name))
            for kind, name in (("events", SOURCE), ("cdc", CDC_SOURCE))
            if name in sources
        }
        hand = {"append": hand_append, "upsert": hand_upsert, "scd1": hand_scd1}
        jobs = {
            (m, j): refine_job(m) if j == "refine" else hand[m]
            for m in modes
            for j in ("refine", "hand")
        }
        if args.same_promises and "append" in modes:
            jobs[("append", "promises")] = promises_append
        for (mode, _), job in jobs.items():  # warm-up: JIT, class loading, the page cache
            job(spark, settings, bronzes[source_kind(mode)], work)
        for round_no in range(args.rounds):
            for mode in modes:
                order = [j for m, j in jobs if m == mode]
                for label in order if round_no % 2 == 0 else reversed(order):
                    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
                    path = bronzes[source_kind(mode)]
                    rows = jobs[(mode, label)](spark, settings, path, work)
                    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
                    record = {
                        "mode": mode,
                        "job": label,
                        "seconds": round(wall, 2),
                        "cpu_s": round(cpu, 1),
                        "rows": rows,
                    }
                    results.append(record)
                    print(json.dumps(record))
        if args.breakdown:
            from refine_breakdown import breakdown

            for mode in modes:
                breakdown(spark, settings, bronzes[source_kind(mode)], args.rounds, mode)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not kafka_was_running:
            stop_kafka(settings)
    report(results, modes, args.events)


def source_kind(mode: str) -> str:
    return "cdc" if mode == "scd1" else "events"


def report(results: list[dict[str, Any]], modes: list[str], events: int) -> None:
    def median(mode: str, job: str, key: str) -> float:
        return statistics.median(
            float(r[key]) for r in results if r["mode"] == mode and r["job"] == job
        )

    print(f"\n{events:,} events, one micro-batch per run, medians")
    print(f"{'mode':<8} {'hand-written s':>14} {'refine s':>9} {'ratio':>6} {'CPU ratio':>9}")
    for mode in modes:
        hand, ours = median(mode, "hand", "seconds"), median(mode, "refine", "seconds")
        cpu = median(mode, "hand", "cpu_s") / median(mode, "refine", "cpu_s")
        print(f"{mode:<8} {hand:>14.2f} {ours:>9.2f} {hand / ours:>5.2f}x {cpu:>8.2f}x")
    if any(r["job"] == "promises" for r in results):
        same = median("append", "promises", "seconds")
        ours = median("append", "refine", "seconds")
        cpu = median("append", "promises", "cpu_s") / median("append", "refine", "cpu_s")
        print(f"append, same-promises job {same:.2f} s: {same / ours:.2f}x (CPU {cpu:.2f}x)")


if __name__ == "__main__":
    main()
