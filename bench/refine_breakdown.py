"""`silver_refine.py --breakdown`: how far each step of a refine batch gets on the same bronze
rows, read as a static DataFrame and written to Spark's `noop` sink."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from same_promises import rows_of
from silver_refine import cdc_image, parsed, silver_table, source_kind

from lakehouse.silver import batch as refine_batch
from lakehouse.silver import plan as silver_plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.settings import Settings


def breakdown(spark: SparkSession, settings: Settings, bronze: str, rounds: int, mode: str) -> None:
    """Seconds to reach each step of a refine batch (`mode`'s table, no expectations) on the
    same bronze rows, each written to the `noop` sink; medians of `rounds` after a warm-up.
    The pieces of the map parse are timed for the events modes only."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    table = silver_table(mode)
    fresh = replace(settings, silver={name: table})
    path = silver_plan.silver_path(fresh, name)
    plan = silver_plan.prepare(spark, fresh, name, table, source_kind(mode), path)
    rows = spark.read.format("delta").load(bronze)

    def noop(df: DataFrame) -> None:
        df.write.format("noop").mode("overwrite").save()

    def evaluated() -> DataFrame:
        records = silver_plan.transform(rows, plan.table, plan.kind, plan.schema)
        return plan.evaluated(records)  # as a refine batch does

    def cached_stats() -> None:
        df = evaluated().persist()
        try:
            refine_batch.batch_stats(df, plan.expectations, plan.schema.names)
            noop(df.select(*[f"`{c}`" for c in silver_plan.row_columns(df)]))
        finally:
            df.unpersist()

    from pyspark.sql import functions as F

    from lakehouse.silver import decode

    text = F.col("value").cast("string")
    as_map = F.from_json(text, "map<string,string>")
    names = plan.schema.names
    struct, encodings = plan.schema.struct, plan.schema.encodings
    hand_parse = cdc_image if mode == "scd1" else parsed
    steps: dict[str, Callable[[], None]] = {
        "hand-written parse": lambda: noop(hand_parse(rows)),
        "same-promises parse (rows_of)": lambda: noop(rows_of(rows)),
        "  map<string,string> parse": lambda: noop(
            rows.select(as_map.alias("m")).select(*[F.col("m")[n] for n in names])
        ),
        "  VARIANT parse (one field)": lambda: noop(
            rows.select(F.try_variant_get(F.try_parse_json(text), "$.amount", "string"))
        ),
        "  map parse + decoded columns": lambda: noop(
            rows.select(as_map.alias("m")).select(
                *decode.decoded_columns(F.col("m"), F.lit(None), struct, encodings)
            )
        ),
    }
    if mode == "scd1":
        steps = {"hand-written parse": steps["hand-written parse"]}  # the others read orders
    steps |= {
        "refine parse (transform)": lambda: noop(
            silver_plan.transform(rows, plan.table, plan.kind, plan.schema)
        ),
        "+ rules evaluated": lambda: noop(evaluated()),
        "+ cache, one aggregation, rows read back": cached_stats,
    }
    times: dict[str, list[float]] = {label: [] for label in steps}
    for round_no in range(rounds + 1):
        for label, step in steps.items():
            t0 = time.perf_counter()
            step()
            if round_no:  # round 0 warms up
                times[label].append(time.perf_counter() - t0)
    print(f"\nbreakdown of {mode} (static read of bronze, noop sink, medians):")
    for label, values in times.items():
        print(f"  {label:<42} {statistics.median(values):6.2f} s")
