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
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from benchlib import alternate, print_against_baseline

from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session
from lakehouse.silver.transform import parse_records, parse_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def b64(unscaled: int) -> str:
    """Debezium's encoding, written independently: minimal big-endian two's complement."""
    size = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def plain_json(values: dict[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"


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
    seconds, cpu = alternate(spark, jobs, args.rounds, args.warmup)
    report(args, seconds, cpu, size)
    spark.stop()


def report(
    args: Any, seconds: dict[str, list[float]], cpu: dict[str, list[float]], size: int
) -> None:
    print(f"{args.rows} rows x {args.columns} DECIMAL(14,2), median of {args.rounds} rounds")
    print(f"analysed plan of parse_records: {size:,} characters")
    print_against_baseline(seconds, cpu, args.rows)


if __name__ == "__main__":
    main()
