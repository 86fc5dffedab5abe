"""Silver expectation overhead: `refine_silver` (the library call) over one bronze table into a
silver table with 10 expectations, against the same table with none, same session,
alternating runs; then Great Expectations validating the same 10 rules over the same rows.

    .venv/bin/python bench/silver_expectations.py --events 1000000 --rounds 5

The events (orders, ~110 bytes of JSON) are produced to Kafka and ingested once into bronze with
the real `ingest_events` path; every round then refines all of bronze (one micro-batch,
available-now) into a fresh silver table with its own checkpoint. A small share of the events
breaks rules on purpose (negative amounts, unknown statuses, missing customers, old
timestamps), so drop, quarantine and warn all do work. Needs Kafka (started here if it is not
running, and stopped again at the end if it was started here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from benchlib import SHIPPED_SPARK, cpu_seconds, jvm_pid, preload

from lakehouse.bronze.ingest import IngestOptions, ingest
from lakehouse.core import kafka
from lakehouse.core.settings import Settings, load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import ExpectationSettings, SilverTableSettings, SourceSettings
from lakehouse.devstack.kafka import kafka_status, start_kafka, stop_kafka
from lakehouse.quality.expectations import evaluate, from_settings, metrics
from lakehouse.quality.suite import TableSpec, build_expectations
from lakehouse.silver.refine import RefineOptions, RefineResult, refine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PARTITIONS = 2
MAX_OFFSETS_PER_TRIGGER = 500_000
SOURCE = "bench_orders"
SCHEMA = "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT"
STATUSES = ["created", "paid", "shipped", "cancelled"]
TS_2020, TS_2100 = 1_577_836_800_000, 4_102_444_800_000


def rule(
    name: str, action: str, sql: str = "", expect: str = "", **kwargs: Any
) -> ExpectationSettings:
    return ExpectationSettings(name, action, sql, expect, kwargs)


# Ten rules as a user would declare them in conf/base/tables.yml: 6 Great Expectations types
# and 4 SQL rules; 2 drop, 2 quarantine, 6 warn.
EXPECTATIONS = (
    rule(
        "order_id_present", "drop", expect="expect_column_values_to_not_be_null", column="order_id"
    ),
    rule(
        "customer_id_present",
        "drop",
        expect="expect_column_values_to_not_be_null",
        column="customer_id",
    ),
    rule("amount_not_negative", "quarantine", sql="amount >= 0"),
    rule(
        "amount_plausible",
        "warn",
        expect="expect_column_values_to_be_between",
        column="amount",
        min_value=0,
        max_value=100_000,
    ),
    rule(
        "known_status",
        "warn",
        expect="expect_column_values_to_be_in_set",
        column="order_status",
        value_set=STATUSES,
    ),
    rule(
        "status_shaped",
        "warn",
        expect="expect_column_values_to_match_regex",
        column="order_status",
        regex="^[a-z_]+$",
    ),
    rule("ts_after_2020", "quarantine", sql=f"ts >= {TS_2020}"),
    rule(
        "ts_before_2100",
        "warn",
        expect="expect_column_values_to_be_between",
        column="ts",
        max_value=TS_2100,
    ),
    rule("customer_id_positive", "warn", sql="customer_id > 0"),
    rule("status_short", "warn", sql="length(order_status) <= 16"),
)


def event(i: int) -> dict[str, Any]:
    """Order `i`; 3.7% of the events break at least one rule."""
    return {
        "order_id": i,
        "customer_id": None if i % 200 == 11 else i % 997,
        "order_status": "unknown" if i % 50 == 3 else STATUSES[i % len(STATUSES)],
        "amount": -5.0 if i % 100 == 7 else 12.5 + i % 1000,
        "ts": 0 if i % 1000 == 13 else 1_767_225_600_000 + i,
    }


def silver_table(mode: str, expectations: tuple[ExpectationSettings, ...]) -> SilverTableSettings:
    return SilverTableSettings(
        source=SOURCE,
        mode=mode,
        schema=SCHEMA,
        keys=("order_id",),
        sequence_by="ts" if mode == "upsert" else "",
        expectations=expectations,
    )


def run_refine(spark: SparkSession, settings: Settings, table: SilverTableSettings) -> RefineResult:
    """One refine_silver run into a fresh silver table (new name: new path and checkpoint)."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    fresh = replace(settings, silver={name: table})
    result = refine(spark, fresh, RefineOptions(name))
    if result.batches != 1:
        print(f"note: {result.batches} micro-batches")
    return result


def gx_validate(spark: SparkSession, rows: DataFrame) -> Callable[[], Any]:
    """A prepared Great Expectations run of the 10 rules (the suite `lakehouse validate` builds
    from the same declarations) over `rows`; call it to validate once."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    spec = TableSpec("silver", "bench", "append", EXPECTATIONS, (), "bench")
    context: Any = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    batch = (
        context.data_sources.add_spark(name="bench", persist=False)
        .add_dataframe_asset(name="rows")
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = context.suites.add(
        gx.ExpectationSuite(name="bench", expectations=build_expectations(spec))
    )
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name="bench", data=batch, suite=suite)
    )

    def run() -> Any:
        result = definition.run(batch_parameters={"dataframe": rows}, result_format="SUMMARY")
        if len(result.results) != len(EXPECTATIONS):
            raise RuntimeError(f"GX ran {len(result.results)} expectations")
        return result

    return run


def one_pass(rows: DataFrame) -> Callable[[], Any]:
    """The lakehouse engine's own evaluation of the same rules over the same rows: one
    projection plus one aggregation (per-rule pass/fail counts), as refine does per batch."""
    rules = from_settings(EXPECTATIONS)
    return lambda: metrics(evaluate(rows, rules), rules)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gx-rounds", type=int, default=3)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also time the 10 rules all as warn (evaluation and counts, no drop/quarantine)",
    )
    parser.add_argument(
        "--driver-memory", default="2g", help="spark.driver.memory (same as silver_merge.py)"
    )
    parser.add_argument(
        "--mode",
        choices=("append", "upsert"),
        default="append",
        help="silver mode of both tables (append isolates the expectations' cost; upsert adds "
        "the same MERGE to both)",
    )
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-silver-exp-")
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
    t0 = time.perf_counter()
    preload(settings, topic, args.events, event, PARTITIONS)
    print(f"preloaded {args.events} events into {topic} in {time.perf_counter() - t0:.1f}s")
    source = SourceSettings(
        kind="events", topics=(topic,), max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER
    )
    settings = replace(settings, sources={SOURCE: source}, silver={})

    spark = build_session(settings, "bench-silver-expectations")
    pid = jvm_pid(spark)
    results: list[dict[str, Any]] = []
    gx_results: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        ingested = ingest(spark, settings, IngestOptions(SOURCE), "events")
        print(f"ingested {ingested.rows} events into bronze in {time.perf_counter() - t0:.1f}s")
        kafka.delete_topics(settings.kafka, [topic])

        tables = {
            "expectations": silver_table(args.mode, EXPECTATIONS),
            "none": silver_table(args.mode, ()),
        }
        if args.breakdown:
            warn_only = tuple(replace(e, action="warn") for e in EXPECTATIONS)
            tables["warn_only"] = silver_table(args.mode, warn_only)
        # Warm-up (not reported): JIT, class loading, bronze files in the page cache.
        for table in tables.values():
            run_refine(spark, settings, table)
        last_none = ""
        for round_no in range(args.rounds):
            order = list(tables.items())
            turn = round_no % len(order)
            for label, table in order[turn:] + order[:turn]:  # rotate who goes first
                cpu0, t0 = cpu_seconds(pid), time.perf_counter()
                result = run_refine(spark, settings, table)
                wall = time.perf_counter() - t0
                cpu = cpu_seconds(pid) - cpu0
                if label == "none":
                    last_none = result.path
                record = {
                    "job": label,
                    "seconds": round(wall, 2),
                    "records_per_s": round(result.rows_in / wall),
                    "cpu_s": round(cpu, 1),
                    "rows_in": result.rows_in,
                    "written": result.rows_written,
                    "dropped": result.rows_dropped,
                    "quarantined": result.rows_quarantined,
                    "load1": round(os.getloadavg()[0], 1),
                }
                results.append(record)
                print(json.dumps(record))

        # Great Expectations over the same rows: the parsed silver rows of a no-expectation run,
        # cached, so both sides time only the validation.
        rows = spark.read.format("delta").load(last_none).persist()
        print(f"validating {rows.count()} cached silver rows with the same 10 rules")
        checks = {"gx": gx_validate(spark, rows), "one_pass": one_pass(rows)}
        for round_no in range(args.gx_rounds + 1):
            pair = list(checks.items())
            if round_no % 2:
                pair.reverse()
            for label, check in pair:
                t0 = time.perf_counter()
                check()
                wall = time.perf_counter() - t0
                if round_no:  # round 0 is the warm-up
                    gx_results.append({"job": label, "seconds": round(wall, 2)})
                    print(json.dumps(gx_results[-1]))
        rows.unpersist()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not kafka_was_running:
            stop_kafka(settings)
    report(results, gx_results, args.events, args.mode)


def report(
    results: list[dict[str, Any]], gx_results: list[dict[str, Any]], events: int, mode: str
) -> None:
    def median(rows: list[dict[str, Any]], job: str, key: str = "seconds") -> float:
        return statistics.median(float(r[key]) for r in rows if r["job"] == job)

    print(f"\nmode {mode}, {events:,} events, one micro-batch per run")
    print(f"{'silver table':<24} {'median s':>8} {'records/s':>10} {'CPU-s':>6}")
    labels = {
        "expectations": "10 expectations",
        "warn_only": "10 rules, all warn",
        "none": "no expectations",
    }
    for job, label in labels.items():
        if not any(r["job"] == job for r in results):
            continue
        print(
            f"{label:<24} {median(results, job):>8.2f} "
            f"{median(results, job, 'records_per_s'):>10,.0f} "
            f"{median(results, job, 'cpu_s'):>6.1f}"
        )
    ratio = median(results, "expectations") / median(results, "none")
    cpu = median(results, "expectations", "cpu_s") / median(results, "none", "cpu_s")
    verdict = "met" if ratio <= 1.10 else "NOT met"  # #23: <= 1.10x on top
    print(f"ratio expectations/none: {ratio:.2f}x, CPU {cpu:.2f}x (goal <= 1.10x: {verdict})")
    if any(r["job"] == "warn_only" for r in results):
        print(
            f"ratio warn-only/none: {median(results, 'warn_only') / median(results, 'none'):.2f}x"
        )
    overhead = median(results, "expectations") - median(results, "none")
    print(f"expectation overhead inside refine: {overhead:+.2f} s")
    loads = [float(r["load1"]) for r in results]
    print(f"1-min load average during the runs: {min(loads)}-{max(loads)} (2 cores)")
    if gx_results:
        gx, ours = median(gx_results, "gx"), median(gx_results, "one_pass")
        print(
            f"same 10 rules over the same cached rows: Great Expectations {gx:.2f} s, "
            f"lakehouse one-pass evaluation {ours:.2f} s ({gx / ours:.1f}x)"
        )


if __name__ == "__main__":
    main()
