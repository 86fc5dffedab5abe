"""Silver MERGE scaling: one 10,000-change batch applied with `scd1.apply_scd1` to SCD1 silver
tables of growing size, against a minimal hand-written Delta MERGE upsert on the same tables,
same session, alternating runs.

    .venv/bin/python bench/silver_merge.py --sizes 250000,1000000,4000000 --rounds 3

Each table is created like `lakehouse.silver.plan` creates a silver table (`scd1.scd1_schema`
of the orders row, `tables.create_table` with `plan.SILVER_PROPERTIES`), filled once with keys
0..N-1 and restored to that version after every MERGE (RESTORE is not timed). Only the MERGE
is timed. The batch (fixed seed): 7,000 updates and 1,000 deletes of existing keys, 2,000
inserts of new keys. Existing keys are drawn once over the smallest table's key range and
spread proportionally over a larger table's range (key * N / smallest), so every table sees
the same batch at the same relative positions rather than all changes in its first 250,000
keys. `--variant NAME:KEY=VALUE,...` overrides table properties to measure layouts side by side
(e.g. `cow:delta.enableDeletionVectors=false`: copy-on-write MERGEs, silver before deletion
vectors); `--compare-broadcast` adds `apply_scd1` with its broadcast of small batches off;
`--compare-key-filter` adds it without its Bloom filter of the batch's keys, and with it
whatever the target's size (`scd1.KEY_FILTER_TARGET_BYTES`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchlib import SHIPPED_SPARK, cpu_seconds, jvm_pid

from lakehouse.core import current, tables
from lakehouse.core.settings import load_settings
from lakehouse.core.spark import build_session
from lakehouse.silver import scd1
from lakehouse.silver.changes import OP, SEQ
from lakehouse.silver.plan import SILVER_PROPERTIES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

ROW_DDL = (
    "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), "
    "ts BIGINT, _rescued_data STRING"
)
KEYS = ("order_id",)
BASE_TS = 1_767_225_600_000
STATUSES = ("created", "paid", "shipped", "cancelled")
GOAL = 1.3  # #23: the largest table's MERGE over the smallest's (was 1.5 before the key filter)


# (session, table path, change batch, its row count)
Job = Callable[["SparkSession", str, "DataFrame", int], None]


@dataclass(frozen=True)
class Variant:
    name: str
    properties: dict[str, str]


@dataclass(frozen=True)
class Prepared:
    size: int
    variant: str
    path: str
    version: int  # the filled table's version, restored after every MERGE
    files: int
    mb: float


def row_schema() -> StructType:
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(ROW_DDL)
    assert isinstance(schema, StructType)
    return schema


def parse_variant(text: str) -> Variant:
    """`name` or `name:key=value,key=value` -> the silver properties plus those."""
    name, _, rest = text.partition(":")
    extra = dict(pair.split("=", 1) for pair in rest.split(",") if pair)
    return Variant(name, {**SILVER_PROPERTIES, **extra})


def change_batch(changes: int, smallest: int, seed: int) -> list[tuple[str, int, float]]:
    """(op, key position, value) per change; positions of u/d are in [0, smallest), inserts
    are numbered 0.. beyond the table's end. Distinct keys: one change per key."""
    rng = random.Random(seed)  # noqa: S311 - reproducible bench data
    inserts, deletes = changes // 5, changes // 10
    existing = rng.sample(range(smallest), changes - inserts)
    ops = ["d"] * deletes + ["u"] * (changes - inserts - deletes)
    batch = [
        (op, key, round(rng.uniform(1, 500), 2)) for op, key in zip(ops, existing, strict=True)
    ]
    batch += [("c", i, round(rng.uniform(1, 500), 2)) for i in range(inserts)]
    rng.shuffle(batch)
    return batch


def changes_frame(
    spark: SparkSession, batch: list[tuple[str, int, float]], size: int, smallest: int
) -> DataFrame:
    """The batch as normalized changes for `apply_scd1`: the row columns, `_lh_op`, `_lh_seq`."""
    from decimal import Decimal

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType(
        [*row_schema().fields, StructField(OP, StringType()), StructField(SEQ, LongType())]
    )
    rows: list[tuple[Any, ...]] = []
    for i, (op, position, amount) in enumerate(batch):
        key = size + position if op == "c" else position * size // smallest
        seq = BASE_TS + size + 1_000_000 + i  # newer than every row already in the table
        if op == "d":  # REPLICA IDENTITY DEFAULT: a delete carries only the key
            rows.append((key, None, None, None, None, None, op, seq))
        else:
            status = STATUSES[(key + i) % len(STATUSES)]
            rows.append((key, key % 997, status, Decimal(str(amount)), seq, None, op, seq))
    return spark.createDataFrame(rows, schema)


def upsert_rows(changes: DataFrame) -> DataFrame:
    """The same batch in the target's shape, for the hand-written upsert (a delete becomes a
    tombstone row: the baseline does the same number of row writes, with no conditions)."""
    from pyspark.sql import functions as F

    deleted = F.col(OP) == "d"
    return changes.select(
        *[F.col(f.name) for f in row_schema().fields],
        F.col(SEQ).alias(current.TARGET_SEQ),
        deleted.alias(current.DELETED),
        F.when(deleted, F.current_timestamp()).alias(current.DELETED_AT),
        F.lit(False).alias(current.SNAPSHOT),
    )


def prepare(
    spark: SparkSession, work: str, size: int, variant: Variant, rows_per_file: int
) -> Prepared:
    """Create the SCD1 table like refine does and fill it with keys 0..size-1 in key order
    (the order an upsert stream of increasing order ids leaves it in)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    path = f"{work}/{variant.name}_{size}"
    tables.create_table(spark, path, scd1.scd1_schema(row_schema()), variant.properties)
    ids = F.col("id")
    statuses = F.array(*[F.lit(s) for s in STATUSES])
    (
        spark.range(0, size, numPartitions=max(1, -(-size // rows_per_file)))
        .select(
            ids.alias("order_id"),
            (ids % 997).alias("customer_id"),
            F.element_at(statuses, (ids % len(STATUSES) + 1).cast("int")).alias("order_status"),
            ((ids % 50_000) / 100).cast("decimal(12,2)").alias("amount"),
            (ids + BASE_TS).alias("ts"),
            F.lit(None).cast("string").alias("_rescued_data"),
            (ids + BASE_TS).alias(current.TARGET_SEQ),
            F.lit(False).alias(current.DELETED),
            F.lit(None).cast("timestamp").alias(current.DELETED_AT),
            F.lit(False).alias(current.SNAPSHOT),
        )
        .write.format("delta")
        .mode("append")
        .save(path)
    )
    version = int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])
    parquet = list(Path(path).glob("*.parquet"))
    mb = sum(p.stat().st_size for p in parquet) / 1e6
    return Prepared(size, variant.name, path, version, len(parquet), round(mb, 1))


def ours(spark: SparkSession, path: str, changes: DataFrame, rows: int) -> None:
    """As refine calls it: with the batch's row count, which refine has from its own pass."""
    scd1.apply_scd1(spark, path, changes, KEYS, rows=rows)


def ours_shuffled(spark: SparkSession, path: str, changes: DataFrame, rows: int) -> None:
    """apply_scd1 without its broadcast of small batches (for --compare-broadcast)."""
    scd1.apply_scd1(spark, path, changes, KEYS, rows=rows, broadcast_changes=0)


def ours_unfiltered(spark: SparkSession, path: str, changes: DataFrame, rows: int) -> None:
    """apply_scd1 without the Bloom filter of the batch's keys (for --compare-key-filter)."""
    scd1.apply_scd1(spark, path, changes, KEYS, rows=rows, key_filter_changes=0)


def ours_filtered(spark: SparkSession, path: str, changes: DataFrame, rows: int) -> None:
    """apply_scd1 with the Bloom filter whatever the target's size (for --compare-key-filter)."""
    scd1.apply_scd1(spark, path, changes, KEYS, rows=rows, key_filter_bytes=0)


def baseline(spark: SparkSession, path: str, changes: DataFrame, rows: int) -> None:
    from delta.tables import DeltaTable

    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(upsert_rows(changes).alias("s"), "t.order_id = s.order_id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


METRICS = (
    "numTargetFilesRemoved",
    "numTargetFilesAdded",
    "numTargetRowsCopied",
    "numTargetDeletionVectorsAdded",
    "scanTimeMs",
    "rewriteTimeMs",
)


def measure(
    spark: SparkSession,
    label: str,
    run: Job,
    table: Prepared,
    changes: DataFrame,
    changes_rows: int,
    pid: int,
) -> dict[str, Any]:
    from delta.tables import DeltaTable

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    run(spark, table.path, changes, changes_rows)
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds(pid) - cpu0
    delta = DeltaTable.forPath(spark, table.path)
    last = delta.history(1).collect()[0]
    metrics = dict(last["operationMetrics"] or {})
    if last["operation"] != "MERGE":
        raise RuntimeError(f"{label}: expected a MERGE commit, found {last['operation']}")
    delta.restoreToVersion(table.version)  # not timed: back to the prepared state
    return {
        "job": label,
        "size": table.size,
        "variant": table.variant,
        "seconds": round(seconds, 2),
        "cpu_s": round(cpu, 1),
        "load1": round(os.getloadavg()[0], 1),
        **{m: int(metrics.get(m, 0)) for m in METRICS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="250000,1000000,4000000")
    parser.add_argument("--changes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--rows-per-file", type=int, default=250_000, help="rows per file of the filled table"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME[:delta.prop=value,...] the silver properties as refine sets them, overridden "
        "by these (repeatable); default: one variant 'silver', unchanged",
    )
    parser.add_argument(
        "--compare-broadcast",
        action="store_true",
        help="also time apply_scd1 with broadcast_changes=0 (shuffle join, the former plan)",
    )
    parser.add_argument(
        "--compare-key-filter",
        action="store_true",
        help="also time apply_scd1 without its Bloom filter of the batch's keys, and with it "
        "whatever the target's size",
    )
    parser.add_argument(
        "--driver-memory",
        default="2g",
        help="spark.driver.memory (with Spark's 1g the hand-written MERGE's broadcast ran out of "
        "memory on 4,000,000 rows)",
    )
    parser.add_argument(
        "--conf", action="append", default=[], help="KEY=VALUE Spark SQL conf for this run"
    )
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    variants = [parse_variant(v) for v in args.variant] or [Variant("silver", SILVER_PROPERTIES)]
    if args.changes > sizes[0]:
        parser.error("--changes must not exceed the smallest size")

    work = tempfile.mkdtemp(prefix="bench-merge-")
    settings = load_settings(
        "test",
        overrides={
            "storage.root": work,
            "spark.conf": {**SHIPPED_SPARK, "spark.driver.memory": args.driver_memory},
        },
    )
    spark = build_session(settings, "bench-silver-merge")
    pid = jvm_pid(spark)
    for pair in args.conf:
        key, _, value = pair.partition("=")
        spark.conf.set(key, value)
    results: list[dict[str, Any]] = []
    prepared: list[Prepared] = []
    try:
        batch = change_batch(args.changes, sizes[0], args.seed)
        t0 = time.perf_counter()
        for variant in variants:
            for size in sizes:
                prepared.append(prepare(spark, work, size, variant, args.rows_per_file))
        print(f"prepared {len(prepared)} tables in {time.perf_counter() - t0:.1f}s")
        for p in prepared:
            print(f"  {p.variant} {p.size:>10,} rows: {p.files} files, {p.mb} MB")
        frames = {p.size: changes_frame(spark, batch, p.size, sizes[0]) for p in prepared}
        jobs: list[tuple[str, Job]] = [
            ("apply_scd1", ours),
            ("baseline", baseline),
        ]
        if args.compare_key_filter:
            jobs.insert(1, ("apply_scd1_unfiltered", ours_unfiltered))
            jobs.insert(1, ("apply_scd1_filtered", ours_filtered))
        if args.compare_broadcast:
            jobs.insert(1, ("apply_scd1_shuffle", ours_shuffled))
        # Warm-up (not reported): JIT and class loading for both MERGEs, on the smallest table.
        for label, run in jobs:
            measure(spark, label, run, prepared[0], frames[prepared[0].size], args.changes, pid)
        for round_no in range(args.rounds):
            # Alternate the size order and who goes first each round.
            order = prepared if round_no % 2 == 0 else list(reversed(prepared))
            for table in order:
                turn = (round_no + prepared.index(table)) % len(jobs)
                for label, run in jobs[turn:] + jobs[:turn]:  # rotate who goes first
                    result = measure(
                        spark, label, run, table, frames[table.size], args.changes, pid
                    )
                    results.append(result)
                    print(json.dumps(result))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, prepared, sizes, variants)


def report(
    results: list[dict[str, Any]],
    prepared: list[Prepared],
    sizes: list[int],
    variants: list[Variant],
) -> None:
    def median(job: str, size: int, variant: str, key: str = "seconds") -> float:
        return statistics.median(
            float(r[key])
            for r in results
            if r["job"] == job and r["size"] == size and r["variant"] == variant
        )

    files = {(p.variant, p.size): p.files for p in prepared}
    jobs = list(dict.fromkeys(str(r["job"]) for r in results))
    print(
        f"\n{'variant':<8} {'rows':>10} {'files':>5}  {'job':<18} {'median s':>8} {'CPU-s':>6} "
        f"{'vs baseline':>11}  {'files rewritten':>15} {'rows copied':>11} {'DVs':>4}"
    )
    for variant in variants:
        for size in sizes:
            base = median("baseline", size, variant.name)
            for job in jobs:
                seconds = median(job, size, variant.name)
                print(
                    f"{variant.name:<8} {size:>10,} {files[(variant.name, size)]:>5}  {job:<18} "
                    f"{seconds:>8.2f} {median(job, size, variant.name, 'cpu_s'):>6.1f} "
                    f"{seconds / base:>11.2f}  "
                    f"{median(job, size, variant.name, 'numTargetFilesRemoved'):>15.0f} "
                    f"{median(job, size, variant.name, 'numTargetRowsCopied'):>11,.0f} "
                    f"{median(job, size, variant.name, 'numTargetDeletionVectorsAdded'):>4.0f}"
                )
    for variant in variants:
        for job in jobs:
            ratio = median(job, sizes[-1], variant.name) / median(job, sizes[0], variant.name)
            cpu = median(job, sizes[-1], variant.name, "cpu_s") / median(
                job, sizes[0], variant.name, "cpu_s"
            )
            verdict = "met" if ratio <= GOAL else "NOT met"
            print(
                f"{variant.name} {job}: {sizes[-1]:,} rows take {ratio:.2f}x the time "
                f"({cpu:.2f}x the CPU) of {sizes[0]:,} (goal <= {GOAL}x: {verdict})"
            )
    loads = [float(r["load1"]) for r in results]
    print(f"1-min load average during the runs: {min(loads)}-{max(loads)} (2 cores)")


if __name__ == "__main__":
    main()
