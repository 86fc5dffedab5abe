"""Offline layer benchmarks, each against a reference in the same run:

1. backfill scaling: `backfill` of one day (12 buckets of 2h) into a 30-day offline table
   against the same backfill into a 3-day table. The cost must follow the window, not the
   table (goal: <= 1.2x).
2. hybrid scan: an aggregate over `read_hybrid` (boundary lookup, version pinning, the view's
   SQL) against a hand-written UNION ALL of the same two tables with the same filters, the
   boundary given as a literal (goal: <= 1.10x).

    .venv/bin/python bench/offline.py --rows-per-day 100000 --rounds 5

Runs alternate in one session (shared JIT warm-up and page cache) after warm-up rounds; every
backfill round is restored (RESTORE, not timed) and gets input with new amounts, so each round
is a real replacement (the same input twice would be a no-op by design).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core import tables
from lakehouse.core.settings import Settings, load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import OfflineTableSettings, SilverTableSettings, SourceSettings
from lakehouse.offline import boundary, hybrid, store
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.buckets import EPOCH, parse_instant
from lakehouse.silver.plan import SILVER_PROPERTIES
from lakehouse.silver.scd1 import scd1_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMA = (
    "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT, "
    "_rescued_data STRING"
)
START = parse_instant("2026-01-01T00:00Z")
DAY_MS = 86_400_000
EPOCH_MS_START = 1_767_225_600_000  # 2026-01-01T00:00Z


def orders(spark: SparkSession, days: int, per_day: int, seed: int = 0) -> DataFrame:
    """`days` days of orders, `per_day` each, spread evenly in time."""
    from pyspark.sql import functions as F

    n = days * per_day
    ids = spark.range(n)
    return ids.select(
        F.col("id").alias("order_id"),
        (F.col("id") % 997).alias("customer_id"),
        F.lit("paid").alias("order_status"),
        ((F.col("id") * 7 + seed) % 50_000 / 100).cast("decimal(12,2)").alias("amount"),
        (F.lit(EPOCH_MS_START) + F.col("id") * F.lit(DAY_MS // per_day)).alias("ts"),
        F.lit(None).cast("string").alias("_rescued_data"),
    )


def setup(spark: SparkSession, settings: Settings, name: str, days: int, per_day: int) -> Settings:
    """A realtime (SCD1) and an offline table holding `days` days; the boundary at the end
    of the last full day (the last day stays realtime)."""
    from pyspark.sql import functions as F

    realtime, offline = f"rt_{name}", f"off_{name}"
    settings = replace(
        settings,
        sources={**settings.sources, "bench": SourceSettings(kind="events", topics=("bench",))},
        silver={
            **settings.silver,
            realtime: SilverTableSettings(
                source="bench",
                mode="upsert",
                schema=SCHEMA.rsplit(", _rescued", 1)[0],
                keys=("order_id",),
                sequence_by="ts",
            ),
        },
        offline={
            **settings.offline,
            offline: OfflineTableSettings(realtime=realtime, time_column="ts", bucket="2h"),
        },
    )
    spec = settings.offline_table(offline)
    rows = orders(spark, days, per_day)
    rt_path = store.realtime_path(settings, spec)
    live = rows.select(
        "*",
        F.col("ts").alias("__seq"),
        F.lit(False).alias("__deleted"),
        F.lit(None).cast("timestamp").alias("__deleted_at"),
    )
    from pyspark.sql.types import StructType, _parse_datatype_string

    row_type = _parse_datatype_string(SCHEMA)
    assert isinstance(row_type, StructType)
    tables.create_table(spark, rt_path, scd1_schema(row_type), SILVER_PROPERTIES)
    live.orderBy("ts").write.format("delta").mode("append").save(rt_path)
    off_path = store.offline_path(settings, offline)
    store.ensure_table(spark, off_path, spark.read.format("delta").load(rt_path).schema)
    closed = START + timedelta(days=days - 1)
    offline_rows = store.with_bucket(rows, spec).where(F.col(store.BUCKET) < F.lit(closed))
    offline_rows.write.format("delta").mode("append").save(off_path)
    version = tables.latest_version(spark, off_path)
    boundary.move(spark, settings, offline, closed, "bench", "setup", version)
    return settings


def correction(spark: SparkSession, per_day: int, day: int, seed: int, directory: Path) -> str:
    """One day's orders with new amounts, as Parquet."""
    from pyspark.sql import functions as F

    rows = orders(spark, day + 1, per_day, seed).where(
        F.col("ts") >= F.lit(EPOCH_MS_START + day * DAY_MS)
    )
    path = directory / f"fix_{seed}"
    rows.drop("_rescued_data").write.mode("overwrite").parquet(str(path))
    return str(path)


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def backfill_bench(
    spark: SparkSession, settings: Settings, per_day: int, rounds: int, warmup: int, tmp: Path
) -> dict[str, list[float]]:
    days = {"3 days": 3, "30 days": 30}
    prepared = {
        label: setup(spark, settings, label.replace(" ", ""), n, per_day)
        for label, n in days.items()
    }
    restore = {
        label: tables.latest_version(spark, store.offline_path(s, f"off_{label.replace(' ', '')}"))
        for label, s in prepared.items()
    }
    results: dict[str, list[float]] = {label: [] for label in days}
    seed = 1
    for round_ in range(warmup + rounds):
        for label, n in days.items():
            s, offline = prepared[label], f"off_{label.replace(' ', '')}"
            day = n - 2  # the last closed day but one
            source = correction(spark, per_day, day, seed, tmp)
            seed += 1
            window = (START + timedelta(days=day), START + timedelta(days=day + 1))
            options = BackfillOptions(offline, source, *window, now=START + timedelta(days=n + 1))
            elapsed = timed(lambda o=options, st=s: backfill(spark, st, o))  # type: ignore[misc]
            if round_ >= warmup:
                results[label].append(elapsed)
            path = store.offline_path(s, offline)
            spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {restore[label]}")
    return results


def hybrid_bench(
    spark: SparkSession, settings: Settings, per_day: int, rounds: int, warmup: int
) -> dict[str, list[float]]:
    from pyspark.sql import functions as F

    s = setup(spark, settings, "scan", 30, per_day)
    offline = "off_scan"
    spec = s.offline_table(offline)
    moved = boundary.current(spark, s, offline)
    assert moved is not None
    boundary_ms = (moved.boundary - EPOCH) // timedelta(milliseconds=1)

    def aggregate(frame: DataFrame) -> object:
        return frame.groupBy("customer_id").agg(F.sum("amount"), F.count(F.lit(1))).collect()

    def ours() -> object:
        return aggregate(hybrid.read_hybrid(spark, s, offline))

    def hand_written() -> object:
        off = (
            spark.read.format("delta")
            .load(store.offline_path(s, offline))
            .where(F.col(store.BUCKET) < F.lit(moved.boundary))
            .drop(store.BUCKET)
        )
        rt = (
            spark.read.format("delta")
            .load(store.realtime_path(s, spec))
            .where("NOT __deleted")
            .where(F.col("ts") >= F.lit(boundary_ms))
            .drop("__seq", "__deleted", "__deleted_at")
        )
        return aggregate(off.unionByName(rt))

    results: dict[str, list[float]] = {"read_hybrid": [], "hand-written": []}
    for round_ in range(warmup + rounds):
        for label, run in (("read_hybrid", ours), ("hand-written", hand_written)):
            elapsed = timed(run)
            if round_ >= warmup:
                results[label].append(elapsed)
    return results


def report(title: str, results: dict[str, list[float]], ours: str, reference: str) -> None:
    print(f"\n{title}")
    for label, values in results.items():
        print(
            f"  {label:14s} median {statistics.median(values):.2f} s  "
            f"runs {[round(v, 2) for v in values]}"
        )
    ratio = statistics.median(results[ours]) / statistics.median(results[reference])
    print(f"  ratio {ours} / {reference}: {ratio:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows-per-day", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--only", choices=("backfill", "hybrid"))
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-offline-"))
    settings = load_settings(
        "local",
        overrides={
            "storage.root": str(tmp / "lake"),
            "spark.conf": {"spark.driver.memory": args.driver_memory},
        },
    )
    spark = build_session(settings, "bench-offline")
    try:
        print(f"rows per day {args.rows_per_day:,}, rounds {args.rounds} (+{args.warmup} warm-up)")
        if args.only in (None, "backfill"):
            results = backfill_bench(
                spark, settings, args.rows_per_day, args.rounds, args.warmup, tmp
            )
            report("backfill of one day (12 buckets)", results, "30 days", "3 days")
        if args.only in (None, "hybrid"):
            results = hybrid_bench(spark, settings, args.rows_per_day, args.rounds, args.warmup)
            report(
                "hybrid view scan (sum and count per customer, 30 days)",
                results,
                "read_hybrid",
                "hand-written",
            )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
