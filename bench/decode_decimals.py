"""Decoding Debezium's precise decimals (base64 of the unscaled bytes) against reading the
same values as plain JSON numbers.

The lakehouse side is `silver.transform.parse_records` (the parse a CDC batch goes through)
on rows whose COLUMNS decimal fields are base64 (`decimal.handling.mode=precise`, Debezium's
default); the baseline is the minimal hand-written job for a connector set to
`decimal.handling.mode=string`: `from_json` of the same values as JSON numbers into the same
DECIMAL schema. Both read the rows from one cached DataFrame and write to Spark's `noop` sink,
alternating, after warm-up runs. Also printed: the size of the analysed expression (its
characters), which is what the optimizer's time and memory grow with on a wide table.

    .venv/bin/python bench/decode_decimals.py --rows 200000 --columns 8 --rounds 5
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import statistics
import time
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from benchlib import cpu_seconds, jvm_pid

from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session
from lakehouse.silver.transform import parse_records, parse_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def b64(unscaled: int) -> str:
    """Debezium's encoding, written independently: minimal big-endian two's complement."""
    size = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def plain_json(values: dict[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"


def timed(spark: SparkSession, job: Callable[[], DataFrame]) -> tuple[float, float]:
    pid = jvm_pid(spark)
    cpu, start = cpu_seconds(pid), time.perf_counter()
    job().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start, cpu_seconds(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--columns", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    settings = load_settings(
        "local", overrides={"spark.conf": {"spark.driver.memory": args.driver_memory}}
    )
    spark = build_session(settings, "bench-decode-decimals")
    rng = random.Random(7)  # noqa: S311 - test data, not secrets
    ddl = ", ".join(f"d{c} DECIMAL(14,2)" for c in range(args.columns))
    data = []
    for _ in range(args.rows):
        unscaled = [rng.randint(-(10**12), 10**12) for _ in range(args.columns)]
        precise = json.dumps({f"d{c}": b64(u) for c, u in enumerate(unscaled)})
        plain = plain_json({f"d{c}": str(Decimal(u).scaleb(-2)) for c, u in enumerate(unscaled)})
        data.append((precise, plain))
    source = spark.createDataFrame(data, "precise string, plain string").repartition(2).cache()
    source.count()

    base64_schema = parse_schema(ddl, encodings={f"d{c}": "base64" for c in range(args.columns)})
    struct = parse_schema(ddl).struct

    def lakehouse() -> DataFrame:
        return parse_records(
            source.select("precise"), F.col("precise"), base64_schema, F.lit(None), strict=True
        )

    def baseline() -> DataFrame:
        return source.select(F.from_json("plain", struct).alias("r")).select("r.*")

    # The two agree value for value (the baseline parses what Python wrote as text).
    decoded = lakehouse().select([f"d{c}" for c in range(args.columns)])
    assert decoded.exceptAll(baseline()).count() == 0, "decoded values differ"

    size = len(str(lakehouse()._jdf.queryExecution().analyzed()))
    jobs: dict[str, Callable[[], DataFrame]] = {"lakehouse": lakehouse, "baseline": baseline}
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
    report(args, seconds, cpu, size)
    spark.stop()


def report(
    args: Any, seconds: dict[str, list[float]], cpu: dict[str, list[float]], size: int
) -> None:
    print(f"{args.rows} rows x {args.columns} DECIMAL(14,2), median of {args.rounds} rounds")
    print(f"analysed plan of parse_records: {size:,} characters")
    for name in seconds:
        wall = statistics.median(seconds[name])
        print(
            f"{name:10s} {wall:6.2f} s  {args.rows / wall:>10,.0f} rows/s  "
            f"{statistics.median(cpu[name]):6.2f} CPU-s  "
            f"runs {[round(s, 2) for s in seconds[name]]}"
        )
    ratio = statistics.median(seconds["baseline"]) / statistics.median(seconds["lakehouse"])
    print(f"ratio (baseline time / lakehouse time): {ratio:.2f}")


if __name__ == "__main__":
    main()
