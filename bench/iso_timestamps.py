"""Reading ISO-8601 timestamps: `lakehouse.core.instants.iso_timestamp` (silver's `iso`
decoding and the offline layer's `iso8601` event times) against Spark's plain cast.

The baseline is what a hand-written job does, `try_cast(t AS TIMESTAMP)`: it takes the forms
Spark knows, reads a zone abbreviation by Java's guess (BST as Asia/Dhaka) and the years 0000
and 10000. The lakehouse side adds the loose forms real feeds send, refuses abbreviations and
years outside 0001-9999. Texts in four forms (`Z`, an offset, none, RFC 3339's lowercase `t`
and `z`) are read from one cached DataFrame into Spark's `noop` sink, alternating, after
warm-up runs.

    .venv/bin/python bench/iso_timestamps.py --rows 2000000 --rounds 5
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from benchlib import alternate, print_against_baseline

from lakehouse.core import instants
from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    settings = load_settings("local", overrides={"spark.conf": {"spark.driver.memory": "4g"}})
    spark = build_session(settings, "bench-iso-timestamps")
    i = F.col("id")
    day = F.format_string("2024-%02d-%02d", i % 12 + 1, i % 28 + 1)
    time_of_day = F.format_string("10:%02d:%02d.%03d", i % 60, i % 59, i % 1000)
    zone = F.element_at(
        F.array(F.lit("Z"), F.lit("+01:00"), F.lit(""), F.lit("z")), (i % 4 + 1).cast("int")
    )
    sep = F.when(i % 4 == 3, F.lit("t")).otherwise(F.lit("T"))
    texts = spark.range(args.rows).select(F.concat(day, sep, time_of_day, zone).alias("t"))
    source = texts.repartition(2).cache()
    source.count()

    def read(parse: Callable[[Column], Column]) -> Callable[[], DataFrame]:
        return lambda: source.select(parse(F.col("t")).alias("at"))

    # The lakehouse reads every text, to the instant the cast reads where it reads one (it
    # does not read RFC 3339's lowercase `t`: a quarter of the texts).
    t = F.col("t")
    both = source.select(instants.iso_timestamp(t).alias("a"), t.try_cast("timestamp").alias("b"))
    a, b = F.col("a"), F.col("b")
    differ = both.where(a.isNull() | (b.isNotNull() & (a != b))).count()
    assert differ == 0, f"{differ} texts read differently"
    print(f"texts the cast does not read: {both.where(b.isNull()).count()}")
    jobs = {
        "lakehouse": read(instants.iso_timestamp),
        "baseline": read(lambda t: t.try_cast("timestamp")),
    }
    seconds, cpu = alternate(spark, jobs, args.rounds, args.warmup)
    print(f"{args.rows} ISO texts, median of {args.rounds} rounds")
    print_against_baseline(seconds, cpu, args.rows)
    spark.stop()


if __name__ == "__main__":
    main()
