"""CDC apply, SCD type 1 (toward silver): changes ordered by the connector's position, never by
arrival; deletes kept as tombstones so a late, older change cannot resurrect a row; replays of
the same changes (Debezium is at-least-once) change nothing.

Changes come normalized: the key columns, the row's columns (the after-image; for a delete the
key and whatever the before-image carried), `_op` (c, u, r or d) and `_seq`, a number that orders
the changes of one key (PostgreSQL: the change's LSN). The target keeps, per key, the latest
state with its `__seq`, and `__deleted` for tombstones; readers use `current_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

OP, SEQ = "_op", "_seq"
TARGET_SEQ, DELETED, DELETED_AT = "__seq", "__deleted", "__deleted_at"
UPSERT_OPS = ("c", "u", "r")


def latest_per_key(changes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The change with the highest `_seq` per key. Exact replays collapse to one row; a batch
    holding several changes of a key reduces to the one MERGE must apply."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy(*keys).orderBy(F.col(SEQ).desc())
    return (
        changes.where(F.col(OP).isin(*UPSERT_OPS, "d"))
        .withColumn("_rank", F.row_number().over(order))
        .where("_rank = 1")
        .drop("_rank")
    )


def scd1_schema(columns: StructType) -> StructType:
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType, TimestampType

    return StructType(
        [
            *columns.fields,
            StructField(TARGET_SEQ, LongType()),
            StructField(DELETED, BooleanType()),
            StructField(DELETED_AT, TimestampType()),
        ]
    )


def apply_scd1(
    spark: SparkSession, target_path: str, changes: DataFrame, keys: Sequence[str]
) -> None:
    """MERGE one batch of changes into the SCD1 target. Each key moves only forward in `_seq`,
    so applying batches in any order, or twice, ends in the same state."""
    from delta.tables import DeltaTable

    columns = [c for c in changes.columns if c not in (OP, SEQ)]
    source = latest_per_key(changes, keys).alias("s")
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    newer = f"s.{SEQ} > t.{TARGET_SEQ}"
    upsert = f"s.{OP} IN ({', '.join(repr(o) for o in UPSERT_OPS)})"
    row = {f"`{c}`": f"s.`{c}`" for c in columns}
    (
        DeltaTable.forPath(spark, target_path)
        .alias("t")
        .merge(source, on)
        .whenMatchedUpdate(
            condition=f"{newer} AND {upsert}",
            set={**row, TARGET_SEQ: f"s.{SEQ}", DELETED: "false", DELETED_AT: "NULL"},
        )
        # A delete keeps the row as a tombstone (its last values, new position): under REPLICA
        # IDENTITY DEFAULT the delete carries only the key, so nothing else is overwritten.
        .whenMatchedUpdate(
            condition=f"{newer} AND s.{OP} = 'd'",
            set={TARGET_SEQ: f"s.{SEQ}", DELETED: "true", DELETED_AT: "current_timestamp()"},
        )
        .whenNotMatchedInsert(
            condition=upsert,
            values={**row, TARGET_SEQ: f"s.{SEQ}", DELETED: "false", DELETED_AT: "NULL"},
        )
        # A delete for a key never seen (its insert is late, or was before our history) leaves a
        # tombstone too, so that older insert cannot create the row when it finally arrives.
        .whenNotMatchedInsert(
            condition=f"s.{OP} = 'd'",
            values={
                **{f"`{k}`": f"s.`{k}`" for k in keys},
                TARGET_SEQ: f"s.{SEQ}",
                DELETED: "true",
                DELETED_AT: "current_timestamp()",
            },
        )
        .execute()
    )


def current_rows(target: DataFrame) -> DataFrame:
    """What a reader of silver sees: live rows, without the bookkeeping columns."""
    return target.where(f"NOT {DELETED}").drop(TARGET_SEQ, DELETED, DELETED_AT)


def purge_tombstones(spark: SparkSession, target_path: str, keep: timedelta) -> None:
    """Drop tombstones older than `keep`: after that, a change older than the delete is assumed
    never to arrive (set it longer than the worst replay/lag you expect)."""
    from delta.tables import DeltaTable

    seconds = int(keep.total_seconds())
    DeltaTable.forPath(spark, target_path).delete(
        f"{DELETED} AND {DELETED_AT} < current_timestamp() - INTERVAL {seconds} SECONDS"
    )
