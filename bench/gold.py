"""Gold: one incremental `build_gold` run after 10,000 changed source rows against a full
recompute of the same gold table (`--full-refresh`), at two source sizes, in one session.

Goals: incremental <= 0.25x the full recompute at 1M source rows; the incremental run at 4M
rows <= 1.5x the one at 1M (the cost follows the changes, not the table).

    .venv/bin/python bench/gold.py --sizes 1000000,4000000 --rounds 4

The source is a silver orders table (SCD1, as refine_silver writes it) spread over 30 days and
1,000 customers; gold is daily_revenue's definition (revenue and order count per UTC day and
customer) over it. Each round applies 10,000 changes to the source with silver's own MERGE (not
timed; a fifth of them move an order to another customer and day), then times an incremental
run and a full recompute, alternating.

`--in-a-row K` measures what a pipeline sees instead: K incremental runs one after another
(no rebuild in between) into two gold tables over the same source, one compacted every
`--compact-every` commits (`storage.compact_every`) and one never, alternating; it prints each
run's time and the gold table's file count.

    .venv/bin/python bench/gold.py --sizes 1000000 --in-a-row 30 --compact-every 10
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.core import tables
from lakehouse.core.settings import Settings, load_settings
from lakehouse.core.spark import build_session
from lakehouse.core.specs import GoldTableSettings, SilverTableSettings, SourceSettings
from lakehouse.gold.build import GoldOptions, build_gold
from lakehouse.silver.changes import OP, SEQ
from lakehouse.silver.plan import SILVER_PROPERTIES
from lakehouse.silver.scd1 import apply_scd1, scd1_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROW = "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00Z
SPAN_MS = 30 * 86_400_000
CHANGES = 10_000


def setup(spark: SparkSession, settings: Settings, rows: int) -> tuple[str, Settings]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    silver, gold = f"orders_{rows}", f"revenue_{rows}"
    settings = replace(
        settings,
        sources={**settings.sources, "bench": SourceSettings(kind="events", topics=("bench",))},
        silver={
            **settings.silver,
            silver: SilverTableSettings(
                source="bench", mode="upsert", schema=ROW, keys=("order_id",), sequence_by="ts"
            ),
        },
        gold={
            **settings.gold,
            gold: GoldTableSettings(
                source=silver,
                group_by={"day": "to_date(timestamp_millis(ts))", "customer_id": "customer_id"},
                aggregates={"revenue": "sum(amount)", "orders": "count(*)"},
            ),
        },
    )
    row_type = _parse_datatype_string(ROW)
    assert isinstance(row_type, StructType)
    path = tables.table_path(settings, f"silver.{silver}")
    tables.create_table(spark, path, scd1_schema(row_type), SILVER_PROPERTIES)
    spark.range(rows).select(
        F.col("id").alias("order_id"),
        (F.col("id") % 1000).alias("customer_id"),
        F.lit("paid").alias("order_status"),
        (F.col("id") % 50_000 / 100).cast("decimal(12,2)").alias("amount"),
        (F.lit(START_MS) + F.col("id") * F.lit(SPAN_MS // rows)).alias("ts"),
        F.lit(1).cast("long").alias("__seq"),
        F.lit(False).alias("__deleted"),
        F.lit(None).cast("timestamp").alias("__deleted_at"),
    ).write.format("delta").mode("append").save(path)
    build_gold(spark, settings, GoldOptions(gold))
    return gold, settings


def changes(spark: SparkSession, rows: int, seq: int) -> DataFrame:
    """10,000 updates of random orders: new amounts; every fifth also moves to another
    customer and day."""
    from pyspark.sql import functions as F

    picked = (
        spark.range(CHANGES)
        .select((F.abs(F.xxhash64(F.col("id"), F.lit(seq))) % rows).alias("order_id"))
        .distinct()
    )
    moved = (F.col("order_id") % 5) == 0
    return picked.select(
        "order_id",
        F.when(moved, (F.col("order_id") + 7) % 1000)
        .otherwise(F.col("order_id") % 1000)
        .alias("customer_id"),
        F.lit("paid").alias("order_status"),
        ((F.col("order_id") + seq) % 50_000 / 100).cast("decimal(12,2)").alias("amount"),
        (
            F.lit(START_MS)
            + (
                (F.col("order_id") * F.lit(SPAN_MS // rows))
                + F.when(moved, F.lit(86_400_000)).otherwise(0)
            )
            % F.lit(SPAN_MS)
        ).alias("ts"),
        F.lit("u").alias(OP),
        F.lit(seq).cast("long").alias(SEQ),
    )


def files(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).detail().collect()[0]["numFiles"])


def in_a_row(spark: SparkSession, settings: Settings, rows: int, runs: int, every: int) -> None:
    """`runs` incremental runs in a row into two gold tables over one source: one compacted
    every `every` commits (`storage.compact_every`), one never."""
    plain, s = setup(spark, settings, rows)
    compacted = f"{plain}_compacted"
    s = replace(s, gold={**s.gold, compacted: s.gold[plain]})
    build_gold(spark, s, GoldOptions(compacted))
    never = replace(s, storage=replace(s.storage, compact_every=0))
    every_n = replace(s, storage=replace(s.storage, compact_every=every))
    silver = tables.table_path(s, f"silver.{s.gold_table(plain).source}")
    times: dict[str, list[float]] = {plain: [], compacted: []}
    for n in range(runs):
        apply_scd1(spark, silver, changes(spark, rows, n + 2), ["order_id"])
        order = ((plain, never), (compacted, every_n))
        for gold, st in order if n % 2 == 0 else order[::-1]:
            times[gold].append(timed(lambda g=gold, x=st: build_gold(spark, x, GoldOptions(g))))
        counts = {g: files(spark, tables.table_path(s, f"gold.{g}")) for g in times}
        print(
            f"run {n + 1:3d}: never compacted {times[plain][-1]:.2f} s ({counts[plain]} files), "
            f"every {every} commits {times[compacted][-1]:.2f} s ({counts[compacted]} files)",
            flush=True,
        )
    half = runs // 2
    for gold, label in ((plain, "never compacted"), (compacted, f"every {every} commits")):
        late = times[gold][half:]
        print(f"  {label:20s} median of runs {half + 1}-{runs}: {statistics.median(late):.2f} s")


def timed(run: object) -> float:
    start = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,4000000")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--in-a-row", type=int, default=0, help="incremental runs in a row")
    parser.add_argument("--compact-every", type=int, default=10)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gold-"))
    settings = load_settings(
        "local",
        overrides={
            "storage.root": str(tmp / "lake"),
            "spark.conf": {"spark.driver.memory": args.driver_memory},
        },
    )
    spark = build_session(settings, "bench-gold")
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, list[float]] = {}
    try:
        if args.in_a_row:
            in_a_row(spark, settings, sizes[0], args.in_a_row, args.compact_every)
            return
        prepared = {rows: setup(spark, settings, rows) for rows in sizes}
        seq = 2
        for round_ in range(args.warmup + args.rounds):
            for rows, (gold, s) in prepared.items():
                silver = s.gold_table(gold).source
                apply_scd1(
                    spark,
                    tables.table_path(s, f"silver.{silver}"),
                    changes(spark, rows, seq),
                    ["order_id"],
                )
                seq += 1
                incremental = timed(lambda g=gold, st=s: build_gold(spark, st, GoldOptions(g)))
                full = timed(
                    lambda g=gold, st=s: build_gold(spark, st, GoldOptions(g, full_refresh=True))
                )
                if round_ >= args.warmup:
                    results.setdefault(f"incremental {rows:,}", []).append(incremental)
                    results.setdefault(f"full {rows:,}", []).append(full)
        print(f"\n{CHANGES:,} changed source rows per round, rounds {args.rounds} (+{args.warmup})")
        for label, values in results.items():
            print(
                f"  {label:22s} median {statistics.median(values):.2f} s  "
                f"runs {[round(v, 2) for v in values]}"
            )
        med = {k: statistics.median(v) for k, v in results.items()}
        small, large = sizes[0], sizes[-1]
        print(
            f"  incremental / full at {small:,}: "
            f"{med[f'incremental {small:,}'] / med[f'full {small:,}']:.3f} (goal <= 0.25)"
        )
        if large != small:
            print(
                f"  incremental {large:,} / incremental {small:,}: "
                f"{med[f'incremental {large:,}'] / med[f'incremental {small:,}']:.3f} (goal <= 1.5)"
            )
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
