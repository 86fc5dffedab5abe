"""SCD type 1 apply: one row per key, the latest change by the connector's position (never by
arrival). Deletes are remembered as tombstones so a late, older change cannot resurrect a row;
replays of the same changes (Debezium is at-least-once) change nothing.

Changes follow `lakehouse.silver.changes`; the target keeps, per key, the latest state with its
`__seq`, and `__deleted` for tombstones (readers use `lakehouse.core.current.current_rows`).
Truncates (`t`, table-wide) are applied with `apply_truncate_scd1`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from lakehouse.core import tables
from lakehouse.core.columns import named
from lakehouse.core.current import DELETED, DELETED_AT, SNAPSHOT, TARGET_SEQ
from lakehouse.core.spark import java_class
from lakehouse.silver.changes import (
    ARRIVAL,
    CHANGE_META,
    DELETE,
    OP,
    SEQ,
    SNAPSHOT_READ,
    UPSERT_OPS,
    latest_per_key,
    snapshot_position,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

# A batch of at most this many changes is broadcast into the SCD1 MERGE. Delta materializes a
# MERGE source without a size estimate, so Spark otherwise plans a shuffle join and shuffles the
# whole target just to find the files a few keys touch; a broadcast batch lets it scan the
# target in place (bench/silver_merge.py). Larger batches keep the shuffle join (driver
# memory), as does spark.sql.autoBroadcastJoinThreshold=-1.
BROADCAST_CHANGES = 50_000
# A batch of at most this many changes narrows the MERGE's target scans with a Bloom filter of
# its keys (`_might_contain_keys`). The filter is a literal of the MERGE condition, recorded in
# the commit's operation parameters: at 3% false positives ~7.3 bits per key, so ~45 KB here.
KEY_FILTER_CHANGES = 50_000
KEY_FILTER_FPP = 0.03
# ... into a target of at least this many bytes: below it, shuffling the touched files whole
# costs less than the filter's own Spark job (~0.1 s, a tenth of a small batch's MERGE), while
# at 2 MB a 10,000-change batch already gains from it (bench/README.md).
KEY_FILTER_TARGET_BYTES = 1024 * 1024


def scd1_schema(columns: StructType) -> StructType:
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType, TimestampType

    return StructType(
        [
            *columns.fields,
            StructField(TARGET_SEQ, LongType()),
            StructField(DELETED, BooleanType()),
            StructField(DELETED_AT, TimestampType()),
            StructField(SNAPSHOT, BooleanType()),
        ]
    )


def apply_scd1(
    spark: SparkSession,
    target_path: str,
    changes: DataFrame,
    keys: Sequence[str],
    broadcast_changes: int = BROADCAST_CHANGES,
    rows: int | None = None,
    key_filter_changes: int = KEY_FILTER_CHANGES,
    snapshot_reads: bool = True,
    key_filter_bytes: int = KEY_FILTER_TARGET_BYTES,
) -> None:
    """MERGE one batch of changes into the SCD1 target. Each key moves only forward in `_lh_seq`,
    so applying batches in any order, or twice, ends in the same state. A batch of at most
    `broadcast_changes` rows is broadcast to the MERGE's joins (0: never); one of at most
    `key_filter_changes` rows also narrows the MERGE's target scans with a Bloom filter of its
    keys (0: never; see `_might_contain_keys`) if the target holds at least `key_filter_bytes`
    (0: whatever its size). `rows`, when the caller already knows it, is at
    least the number of changes (saves counting them). `snapshot_reads` False: the caller
    knows the batch holds none (saves placing them, `snapshot_position`).

    A change arriving after a snapshot read of its key replaces it whatever its `_lh_seq`
    (`snapshot_position`): within the batch by `_lh_arrival`, against the target by its
    `__snapshot` (the row is a snapshot read no change has followed yet)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if rows is None:
        rows = changes.count()
    columns = [c for c in changes.columns if c not in CHANGE_META]
    target = DeltaTable.forPath(spark, target_path)
    if snapshot_reads and ARRIVAL in changes.columns:
        is_snapshot = F.col(OP) == SNAPSHOT_READ
        placed = snapshot_position(keys, is_snapshot, F.col(ARRIVAL), F.lit(True))
        changes = changes.withColumn(SEQ, placed)
    source = latest_per_key(changes, keys)
    if _broadcastable(spark, broadcast_changes, rows):
        source = F.broadcast(source)
    source = source.alias("s")
    on = F.expr(" AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys))
    types = {f.name.lower(): f.dataType for f in target.toDF().schema.fields}
    key_types = {k: types[k.lower()] for k in keys}  # Spark resolves names case-insensitively
    if rows <= key_filter_changes and _holds(spark, target_path, key_filter_bytes):
        on = on & _might_contain_keys(spark, changes, keys, key_types, rows)
    after_snapshot = f"(t.{SNAPSHOT} AND s.{OP} <> '{SNAPSHOT_READ}')"
    newer = f"(s.{SEQ} > t.{TARGET_SEQ} OR {after_snapshot})"
    upsert = f"s.{OP} IN ({', '.join(repr(o) for o in UPSERT_OPS)})"
    row = {
        **{f"`{c}`": f"s.`{c}`" for c in columns},
        SNAPSHOT: f"s.{OP} = '{SNAPSHOT_READ}'",
    }
    (
        target.alias("t")
        .merge(source, on)
        .whenMatchedUpdate(
            condition=f"{newer} AND {upsert}",
            set={**row, TARGET_SEQ: f"s.{SEQ}", DELETED: "false", DELETED_AT: "NULL"},
        )
        # A delete keeps the row as a tombstone (its last values, new position): under REPLICA
        # IDENTITY DEFAULT the delete carries only the key, so nothing else is overwritten.
        .whenMatchedUpdate(
            condition=f"{newer} AND s.{OP} = '{DELETE}'",
            set={
                TARGET_SEQ: f"s.{SEQ}",
                DELETED: "true",
                DELETED_AT: "current_timestamp()",
                SNAPSHOT: "false",
            },
        )
        .whenNotMatchedInsert(
            condition=upsert,
            values={**row, TARGET_SEQ: f"s.{SEQ}", DELETED: "false", DELETED_AT: "NULL"},
        )
        # A delete for a key never seen (its insert is late, or was before our history) leaves a
        # tombstone too, so that older insert cannot create the row when it finally arrives.
        .whenNotMatchedInsert(
            condition=f"s.{OP} = '{DELETE}'",
            values={
                **{f"`{k}`": f"s.`{k}`" for k in keys},
                TARGET_SEQ: f"s.{SEQ}",
                DELETED: "true",
                DELETED_AT: "current_timestamp()",
                SNAPSHOT: "false",
            },
        )
        .execute()
    )


def _broadcastable(spark: SparkSession, limit: int, rows: int) -> bool:
    if limit <= 0 or str(spark.conf.get("spark.sql.autoBroadcastJoinThreshold")) == "-1":
        return False
    return rows <= limit


def _holds(spark: SparkSession, target_path: str, size_in_bytes: int) -> bool:
    """Whether the target holds at least `size_in_bytes`. Computing its snapshot's state for
    this costs the MERGE nothing more: it reads that snapshot's files next."""
    return size_in_bytes <= 0 or tables.size_in_bytes(spark, target_path) >= size_in_bytes


def _might_contain_keys(
    spark: SparkSession,
    changes: DataFrame,
    keys: Sequence[str],
    key_types: dict[str, DataType],
    rows: int,
) -> Column:
    """A target-only conjunct for the MERGE condition: the target row's key hash is in a Bloom
    filter of the batch's keys. It holds for every target row the batch matches, so the MERGE's
    outcome is the same: a Bloom filter has no false negatives, both sides hash the key as the
    target's type, and Spark's xxhash64 hashes values that `<=>` finds equal alike (-0.0 and
    0.0, collated strings), as Spark's own runtime join filters rely on. But Spark pushes it
    into the target scans, below the outer join that applies the batch: without it, every row
    of every touched file (random keys touch them all) is shuffled into that join, and the
    MERGE grows with the table (bench/README.md). Building it is one small Spark job over the
    batch; it is one binary literal, where a list of the batch's key literals cost seconds of
    planning."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    hashed = changes.select(F.xxhash64(*[named(k).cast(key_types[k]) for k in keys]).alias("h"))
    # Spark builds no filter from an empty input (the batch may hold no upserts); one extra
    # hash in it can only let one more target row through.
    hashed = hashed.union(spark.range(1).select(F.lit(0).cast("long").alias("h")))
    bloom = hashed._jdf.stat().bloomFilter("h", rows + 1, KEY_FILTER_FPP)
    bits = java_class(spark, "java.io.ByteArrayOutputStream")()
    bloom.writeTo(bits)
    # Spark's own runtime-filter expression (what it injects for selective joins); it has no
    # SQL name, so it is built on the JVM side.
    expressions = java_class(spark, "org.apache.spark.sql.classic.ExpressionUtils")
    might_contain = "org.apache.spark.sql.catalyst.expressions.BloomFilterMightContain"
    contains = java_class(spark, might_contain)(
        expressions.expression(F.lit(bytearray(bits.toByteArray()))._jc),
        expressions.expression(F.xxhash64(*[F.col(f"t.`{k}`") for k in keys])._jc),
    )
    return Column(expressions.column(contains))


def purge_tombstones(spark: SparkSession, target_path: str, keep: timedelta) -> None:
    """Drop tombstones older than `keep`: after that, a change older than the delete is assumed
    never to arrive (set it longer than the worst replay/lag you expect)."""
    from delta.tables import DeltaTable

    seconds = int(keep.total_seconds())
    expired = f"{DELETED} AND {DELETED_AT} < current_timestamp() - INTERVAL {seconds} SECONDS"
    # Looked for first: a DELETE that matches nothing would still commit a table version.
    if spark.read.format("delta").load(target_path).where(expired).take(1):
        DeltaTable.forPath(spark, target_path).delete(expired)


def apply_truncate_scd1(
    spark: SparkSession, target_path: str, seq: int, ts: datetime | None
) -> None:
    """A table-wide truncate at position `seq`, as one Delta UPDATE: every row whose `__seq` is
    older becomes a tombstone at `seq` (`__deleted_at` now, which starts its retention). That
    includes older tombstones, so a late change between a key's delete and the truncate cannot
    resurrect it either; rows changed after the truncate stay. `ts` is unused (SCD1 keeps no
    source times). Not guarded: a late change older than the truncate for a key the table does
    not hold at all (no row carries the truncate's position for it)."""
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, target_path).update(
        condition=f"{TARGET_SEQ} < {int(seq)}",
        set={
            TARGET_SEQ: str(int(seq)),
            DELETED: "true",
            DELETED_AT: "current_timestamp()",
            SNAPSHOT: "false",
        },
    )
