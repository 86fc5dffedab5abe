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
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from benchlib import cpu_seconds, jvm_pid

from lakehouse.core import instants
from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def timed(spark: SparkSession, job: Callable[[], DataFrame]) -> tuple[float, float]:
    pid = jvm_pid(spark)
    cpu, start = cpu_seconds(pid), time.perf_counter()
    job().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start, cpu_seconds(pid) - cpu


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
    clock = F.format_string("2024-%02d-%02d", i % 12 + 1, i % 28 + 1)
    time_of_day = F.format_string("10:%02d:%02d.%03d", i % 60, i % 59, i % 1000)
    zone = F.element_at(
        F.array(F.lit("Z"), F.lit("+01:00"), F.lit(""), F.lit("z")), (i % 4 + 1).cast("int")
    )
    sep = F.when(i % 4 == 3, F.lit("t")).otherwise(F.lit("T"))
    texts = spark.range(args.rows).select(F.concat(clock, sep, time_of_day, zone).alias("t"))
    source = texts.repartition(2).cache()
    source.count()

    def read(parse: Callable[[Column], Column]) -> Callable[[], DataFrame]:
        return lambda: source.select(parse(F.col("t")).alias("at"))

    jobs = {
        "lakehouse": read(instants.iso_timestamp),
        "baseline": read(lambda t: t.try_cast("timestamp")),
    }
    for _ in range(args.warmup):
        for job in jobs.values():
            timed(spark, job)
    seconds: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(args.rounds):
        for name, job in jobs.items():
            wall, used = timed(spark, job)
            seconds[name].append(wall)
            cpu[name].append(used)
    print(f"{args.rows} ISO texts, median of {args.rounds} rounds")
    for name in jobs:
        wall = statistics.median(seconds[name])
        print(
            f"{name:10s} {wall:6.2f} s  {statistics.median(cpu[name]):6.2f} CPU-s  "
            f"runs {[round(s, 2) for s in seconds[name]]}"
        )
    ratio = statistics.median(seconds["baseline"]) / statistics.median(seconds["lakehouse"])
    print(f"ratio (baseline time / lakehouse time): {ratio:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
