"""What each of refine's record checks costs in its parse, against the same-promises parse.

    .venv/bin/python bench/refine_checks.py --rounds 4

50,000 orders events (`silver_expectations.event`) are produced to Kafka and ingested into
bronze with the real `ingest_events` path; the bronze rows, repeated 20 times (1,000,000), are
cached as a static DataFrame. Each round writes to Spark's `noop` sink: refine's parse
(`plan.transform`, an append table without expectations), the same parse with one check
replaced by a constant (so its code is gone from the plan), the parse with all four replaced,
and `same_promises.rows_of`. Medians after a warm-up round. The checks:
- `duplicate keys`: `malformed.duplicate_keys`, a field given two different values;
- `lone surrogate`: `malformed.lone_surrogate`, a `\\ud800` escape that is half of no pair;
- `exact digits, VARIANT`: `exact_digits.variant`, the record's VARIANT parse where the map
  printed a double, with the record-wide scan for a long number that spares it;
- `exact digits, texts`: `exact_digits.text`, each number column's text as written.
Needs Kafka (started here if it is not running, and stopped again at the end if it was)."""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import reduce
from typing import TYPE_CHECKING, Any

from benchlib import SHIPPED_SPARK, preload
from same_promises import rows_of
from silver_expectations import PARTITIONS, SOURCE, event
from silver_refine import silver_table

from lakehouse.bronze.ingest import IngestOptions, ingest
from lakehouse.core import kafka, tables
from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import SourceSettings
from lakehouse.devstack.kafka import kafka_status, start_kafka, stop_kafka
from lakehouse.silver import exact_digits, malformed
from lakehouse.silver import plan as silver_plan

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

ORIGINAL = {
    (malformed, "duplicate_keys"): malformed.duplicate_keys,
    (malformed, "lone_surrogate"): malformed.lone_surrogate,
    (exact_digits, "variant"): exact_digits.variant,
    (exact_digits, "text"): exact_digits.text,
}


def no_error(*_: Any) -> Column:
    from pyspark.sql import functions as F

    return F.lit(None).cast("string")


def no_variant(*_: Any) -> list[Column]:
    """Every record short (no long number) and no VARIANT: the texts read the map's."""
    from pyspark.sql import functions as F

    return [
        F.lit(True).alias(exact_digits.SHORT),
        F.lit(None).cast("variant").alias(exact_digits.VARIANT),
    ]


def map_text(_name: str, _how: str, current: Column, *_: Any) -> Column:
    return current


WITHOUT: dict[str, dict[tuple[Any, str], Callable[..., Any]]] = {
    "refine parse": {},
    "  without duplicate keys": {(malformed, "duplicate_keys"): no_error},
    "  without lone surrogate": {(malformed, "lone_surrogate"): no_error},
    "  without exact digits, VARIANT": {(exact_digits, "variant"): no_variant},
    "  without exact digits, texts": {(exact_digits, "text"): map_text},
    "  without all four": {
        (malformed, "duplicate_keys"): no_error,
        (malformed, "lone_surrogate"): no_error,
        (exact_digits, "variant"): no_variant,
        (exact_digits, "text"): map_text,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-refine-checks-")
    settings = load_settings(
        "test",
        overrides={
            "storage.root": work,
            "spark.conf": {**SHIPPED_SPARK, "spark.driver.memory": "4g"},
        },
    )
    kafka_was_running = kafka_status(settings).startswith("running")
    start_kafka(settings)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    preload(settings, topic, 50_000, event, PARTITIONS)
    source = SourceSettings(kind="events", topics=(topic,))
    settings = replace(settings, sources={SOURCE: source}, silver={})
    spark = build_session(settings, "bench-refine-checks")
    times: dict[str, list[float]] = {label: [] for label in [*WITHOUT, "same-promises parse"]}
    try:
        ingest(spark, settings, IngestOptions(SOURCE), "events")
        kafka.delete_topics(settings.kafka, [topic])
        bronze = spark.read.format("delta").load(
            tables.table_path(settings, settings.bronze_table(SOURCE))
        )
        rows = reduce(lambda a, b: a.union(b), [bronze] * 20).repartition(2).cache()
        print(f"{rows.count():,} rows")
        table = silver_table("append")
        run = replace(settings, silver={"bench_checks": table})
        path = silver_plan.silver_path(run, "bench_checks")
        plan = silver_plan.prepare(spark, run, "bench_checks", table, "events", path)

        def timed(label: str, df: DataFrame, round_no: int) -> None:
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            if round_no:  # round 0 warms up
                times[label].append(time.perf_counter() - t0)

        for round_no in range(args.rounds + 1):
            for label, patches in WITHOUT.items():
                for (module, name), original in ORIGINAL.items():
                    setattr(module, name, patches.get((module, name), original))
                parse = silver_plan.transform(rows, plan.table, plan.kind, plan.schema)
                timed(label, parse, round_no)
            for (module, name), original in ORIGINAL.items():
                setattr(module, name, original)
            timed("same-promises parse", rows_of(rows), round_no)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not kafka_was_running:
            stop_kafka(settings)
    print(f"\nnoop sink, medians of {args.rounds} rounds:")
    for label, values in times.items():
        print(f"  {label:<34} {statistics.median(values):6.2f} s")


if __name__ == "__main__":
    main()
