"""SCD1 CDC apply against real Delta MERGE: ordered by position, never by arrival."""

from __future__ import annotations

import random
import shutil
import uuid
from datetime import timedelta
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from lakehouse.core import tables
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings
from lakehouse.silver.changes import ARRIVAL, OP, SEQ
from lakehouse.silver.scd1 import apply_scd1, purge_tombstones, scd1_schema

COLUMNS = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("city", StringType()),
    ]
)
CHANGES = f"id long, name string, city string, {OP} string, {SEQ} long"
Change = tuple[int, str | None, str | None, str, int]


def new_target(spark: SparkSession, settings: Settings, columns: StructType = COLUMNS) -> str:
    path = settings.storage.path("silver", f"scd1_{uuid.uuid4().hex[:8]}")
    tables.create_table(spark, path, scd1_schema(columns), {"delta.enableChangeDataFeed": "true"})
    return path


def apply(spark: SparkSession, path: str, batch: list[Change]) -> None:
    apply_scd1(spark, path, spark.createDataFrame(batch, CHANGES), ["id"])


def live(spark: SparkSession, path: str) -> DataFrame:
    return current_rows(spark.read.format("delta").load(path))


def test_late_older_changes_cannot_resurrect_or_overwrite(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings)
    apply(spark, path, [(1, "ada", "london", "c", 10), (2, "alan", "wilmslow", "c", 11)])
    # Key-only delete (REPLICA IDENTITY DEFAULT), then a newer update of key 2.
    apply(spark, path, [(1, None, None, "d", 30), (2, "alan t", "manchester", "u", 31)])
    # Late arrivals, older than what silver holds: an update of the deleted key, a stale
    # update of key 2, and a delete of key 3 whose insert has not arrived yet.
    apply(
        spark,
        path,
        [(1, "ada l", "paris", "u", 20), (2, "old", "old", "u", 21), (3, None, None, "d", 50)],
    )
    apply(spark, path, [(3, "grace", "ny", "c", 40)])  # the insert behind that delete
    # Replaying everything (at-least-once delivery) changes nothing.
    apply(spark, path, [(1, "ada", "london", "c", 10), (2, "alan t", "manchester", "u", 31)])

    assert_df_equality(
        live(spark, path),
        spark.createDataFrame([(2, "alan t", "manchester")], COLUMNS),
        ignore_nullable=True,
    )
    tombstones = (
        spark.read.format("delta").load(path).where("__deleted").select("id", "__seq").collect()
    )
    assert sorted((r["id"], r["__seq"]) for r in tombstones) == [(1, 30), (3, 50)]


def test_same_position_first_arrival_wins_wherever_batches_are_cut(
    spark: SparkSession, settings: Settings
) -> None:
    # Two updates of a key at one position (events with equal timestamps), in arrival order.
    changes = [
        (1, "ada", "london", "c", 10, 1),
        (1, "first", "paris", "u", 20, 2),
        (1, "second", "rome", "u", 20, 3),
        (2, "alan", "wilmslow", "c", 11, 4),
        (2, "alan a", "leeds", "u", 21, 5),
        (2, "alan b", "york", "u", 21, 6),
    ]
    schema = f"{CHANGES}, {ARRIVAL} long"
    expected = spark.createDataFrame([(1, "first", "paris"), (2, "alan a", "leeds")], COLUMNS)

    # One batch, listed last-arrival first: `_arrival`, not the order rows come in, decides.
    one_batch = new_target(spark, settings)
    apply_scd1(spark, one_batch, spark.createDataFrame(changes[::-1], schema), ["id"])
    # One batch per change: across batches an equal position never overwrites.
    per_change = new_target(spark, settings)
    for change in changes:
        apply_scd1(spark, per_change, spark.createDataFrame([change], schema), ["id"])

    for path in (one_batch, per_change):
        assert_df_equality(live(spark, path), expected, ignore_row_order=True, ignore_nullable=True)


def test_key_filter_matches_keys_typed_unlike_the_target_nulls_and_negative_zero(
    spark: SparkSession, settings: Settings
) -> None:
    """The MERGE narrows its target scans with a Bloom filter of the batch's key hashes; a key
    the filter misses would be inserted a second time. Here the batch's `id` is a float where
    the target's is a double (a float hashes differently unless cast), one key part is null,
    and -0.0 must find 0.0 (`<=>` finds them equal)."""
    columns = StructType(
        [
            StructField("id", DoubleType()),
            StructField("region", StringType()),
            StructField("name", StringType()),
        ]
    )
    keys = ["id", "region"]
    path = new_target(spark, settings, columns)
    first = [(0.0, "eu", "a", "c", 1), (1.0, None, "b", "c", 2), (2.0, "us", "c", "c", 3)]
    second = [(-0.0, "eu", "A", "u", 4), (1.0, None, "B", "u", 5), (3.0, "us", "d", "c", 6)]
    for id_type, batch in (("double", first), ("float", second)):
        ddl = f"id {id_type}, region string, name string, {OP} string, {SEQ} long"
        # The filter whatever the target's size (by default a small target goes without).
        apply_scd1(spark, path, spark.createDataFrame(batch, ddl), keys, key_filter_bytes=0)

    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    predicate = last["operationParameters"]["predicate"]
    assert "might_contain" in predicate  # the filter was in the MERGE, so this tests it
    expected = spark.createDataFrame(
        [(0.0, "eu", "A"), (1.0, None, "B"), (2.0, "us", "c"), (3.0, "us", "d")], columns
    )
    assert_df_equality(live(spark, path), expected, ignore_row_order=True, ignore_nullable=True)


def test_the_key_filter_is_built_only_for_a_target_of_at_least_its_size(
    spark: SparkSession, settings: Settings
) -> None:
    """Below `key_filter_bytes` the MERGE goes without the Bloom filter (shuffling a small
    target costs less than building it); from that size on it has it. The target's size here is
    its data files' on disk: one append, so every file in the directory is live."""
    path = new_target(spark, settings)
    apply(spark, path, [(1, "ada", "london", "c", 1), (2, "alan", "wilmslow", "c", 2)])
    size = sum(f.stat().st_size for f in Path(path).glob("*.parquet"))
    batch = spark.createDataFrame(
        [(1, "ada l", "paris", "u", 3), (3, "grace", "ny", "c", 4)], CHANGES
    )
    expected = spark.createDataFrame(
        [(1, "ada l", "paris"), (2, "alan", "wilmslow"), (3, "grace", "ny")], COLUMNS
    )
    filtered: list[bool] = []
    for limit in (size + 1, size):
        target = f"{path}_{limit}"
        shutil.copytree(path, target)
        apply_scd1(spark, target, batch, ["id"], key_filter_bytes=limit)
        last = spark.sql(f"DESCRIBE HISTORY delta.`{target}` LIMIT 1").collect()[0]
        filtered.append("might_contain" in last["operationParameters"]["predicate"])
        assert_df_equality(
            live(spark, target), expected, ignore_row_order=True, ignore_nullable=True
        )
    assert filtered == [False, True]


def test_tombstones_are_purged_only_after_retention(
    spark: SparkSession, settings: Settings
) -> None:
    path = new_target(spark, settings)
    apply(spark, path, [(1, "ada", "london", "c", 1), (1, None, None, "d", 2)])
    purge_tombstones(spark, path, timedelta(hours=1))
    assert spark.read.format("delta").load(path).count() == 1  # still guarding key 1
    purge_tombstones(spark, path, timedelta(seconds=0))
    assert spark.read.format("delta").load(path).count() == 0


def random_history(rng: random.Random, keys: int, steps: int) -> list[Change]:
    """A realistic per-key life: insert, updates, delete, maybe re-insert; global positions."""
    alive: dict[int, bool] = {}
    events: list[Change] = []
    for seq in range(1, steps + 1):
        key = rng.randrange(keys)
        if not alive.get(key):
            events.append((key, f"n{seq}", rng.choice(["a", "b", None]), "c", seq))
            alive[key] = True
        elif rng.random() < 0.25:
            events.append((key, None, None, "d", seq))
            alive[key] = False
        else:
            events.append((key, f"n{seq}", rng.choice(["a", "b", None]), "u", seq))
    return events


def model(events: list[Change]) -> list[tuple[int, str | None, str | None]]:
    state: dict[int, tuple[int, str | None, str | None] | None] = {}
    for key, name, city, op, _seq in sorted(events, key=lambda e: e[4]):
        state[key] = None if op == "d" else (key, name, city)
    return [row for row in state.values() if row is not None]


def test_property_shuffled_duplicated_batches_match_the_model(
    spark: SparkSession, settings: Settings
) -> None:
    for seed in (1, 2, 3):
        rng = random.Random(seed)  # noqa: S311 - reproducible test data
        events = random_history(rng, keys=12, steps=120)
        delivered = events + rng.sample(events, 30)  # at-least-once: some arrive twice
        rng.shuffle(delivered)
        path = new_target(spark, settings)
        start = 0
        while start < len(delivered):
            size = rng.randint(1, 40)
            apply(spark, path, delivered[start : start + size])
            start += size
        expected = spark.createDataFrame(model(events), COLUMNS)
        assert_df_equality(live(spark, path), expected, ignore_row_order=True, ignore_nullable=True)
