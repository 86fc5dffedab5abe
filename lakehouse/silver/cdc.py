"""CDC apply toward silver, SCD type 1 and type 2: changes ordered by the connector's position,
never by arrival; deletes remembered so a late, older change cannot resurrect a row; replays of
the same changes (Debezium is at-least-once) change nothing.

Changes come normalized: the key columns, the row's columns (the after-image; for a delete the
key and whatever the before-image carried), `_op` (c, u, r or d), `_seq`, a number that orders
the changes of one key (PostgreSQL: the change's LSN), and optionally `_ts`, the source commit
time of the change (may be null; SCD1 ignores it). Truncates (`t`, table-wide) are applied with
`apply_truncate_scd1` / `apply_truncate_scd2`.

SCD1: the target keeps, per key, the latest state with its `__seq`, and `__deleted` for
tombstones; readers use `current_rows`. SCD2: see `scd2_schema` for the table contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.core.spark import java_class

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

OP, SEQ, TS = "_op", "_seq", "_ts"
TARGET_SEQ, DELETED, DELETED_AT = "__seq", "__deleted", "__deleted_at"
START_SEQ, END_SEQ, START_AT, END_AT = "__start_seq", "__end_seq", "__start_at", "__end_at"
# Optional: where a change arrived (anything orderable, e.g. its Kafka topic, partition and
# offset). It only breaks ties between changes of one key at the same `_seq`.
ARRIVAL = "_arrival"
UPSERT_OPS = ("c", "u", "r")
CHANGE_META = (OP, SEQ, TS, ARRIVAL)
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


def latest_per_key(changes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The change with the highest `_seq` per key. Exact replays collapse to one row; a batch
    holding several changes of a key reduces to the one MERGE must apply.

    Changes of a key at the same `_seq` (two events with the same timestamp): the first to
    arrive wins when the changes carry `_arrival`, as it does across batches (the MERGE applies
    only a strictly newer `_seq`). Where the batches were cut then decides nothing, as long as
    a key's changes arrive in order (one Kafka partition per key). Without `_arrival` a tie
    within a batch is resolved arbitrarily."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tiebreak = [F.col(ARRIVAL).asc()] if ARRIVAL in changes.columns else []
    order = Window.partitionBy(*keys).orderBy(F.col(SEQ).desc(), *tiebreak)
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
    spark: SparkSession,
    target_path: str,
    changes: DataFrame,
    keys: Sequence[str],
    broadcast_changes: int = BROADCAST_CHANGES,
    rows: int | None = None,
    key_filter_changes: int = KEY_FILTER_CHANGES,
) -> None:
    """MERGE one batch of changes into the SCD1 target. Each key moves only forward in `_seq`,
    so applying batches in any order, or twice, ends in the same state. A batch of at most
    `broadcast_changes` rows is broadcast to the MERGE's joins (0: never); one of at most
    `key_filter_changes` rows also narrows the MERGE's target scans with a Bloom filter of its
    keys (0: never; see `_might_contain_keys`). `rows`, when the caller already knows it, is at
    least the number of changes (saves counting them)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if rows is None:
        rows = changes.count()
    columns = [c for c in changes.columns if c not in CHANGE_META]
    target = DeltaTable.forPath(spark, target_path)
    source = latest_per_key(changes, keys)
    if _broadcastable(spark, broadcast_changes, rows):
        source = F.broadcast(source)
    source = source.alias("s")
    on = F.expr(" AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys))
    types = {f.name.lower(): f.dataType for f in target.toDF().schema.fields}
    key_types = {k: types[k.lower()] for k in keys}  # Spark resolves names case-insensitively
    if rows <= key_filter_changes:
        on = on & _might_contain_keys(spark, changes, keys, key_types, rows)
    newer = f"s.{SEQ} > t.{TARGET_SEQ}"
    upsert = f"s.{OP} IN ({', '.join(repr(o) for o in UPSERT_OPS)})"
    row = {f"`{c}`": f"s.`{c}`" for c in columns}
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


def _broadcastable(spark: SparkSession, limit: int, rows: int) -> bool:
    if limit <= 0 or str(spark.conf.get("spark.sql.autoBroadcastJoinThreshold")) == "-1":
        return False
    return rows <= limit


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

    hashed = changes.select(
        F.xxhash64(*[F.col(f"`{k}`").cast(key_types[k]) for k in keys]).alias("h")
    )
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
        set={TARGET_SEQ: str(int(seq)), DELETED: "true", DELETED_AT: "current_timestamp()"},
    )


# --- SCD type 2 -------------------------------------------------------------------------------


def scd2_schema(columns: StructType) -> StructType:
    """The SCD2 target: one row per version of a key.

    Contract:
    - the row columns, then `__start_seq`, `__end_seq`, `__start_at`, `__end_at` and `__seq`;
      `(keys, __start_seq)` is unique.
    - A version covers the positions `[__start_seq, __end_seq)` and the source times
      `[__start_at, __end_at)`; `*_seq` come from the changes' `_seq`, `*_at` from their `_ts`
      (so they are null when the source gave no time).
    - The current version of a key is its row with `__end_seq IS NULL` (at most one per key).
    - A change whose tracked columns differ from the version before it ends that version (at
      the change's `_seq`/`_ts`) and opens a new one. A change whose tracked columns are equal
      (only untracked columns changed) updates that version in place: its row columns and
      `__seq`, the last change folded into it.
    - A delete closes the key's open version (`__end_seq`/`__end_at` = the delete's
      `_seq`/`_ts`), adds no version and never overwrites the row's values (under REPLICA
      IDENTITY DEFAULT it carries only the key).
    - A delete with no open version before it (a key never seen, its insert still to arrive, or
      a second delete) is kept as a *delete marker*: a closed, zero-length row with
      `__start_seq = __end_seq = __seq` = the delete's `_seq`, `__start_at = __end_at` = its
      `_ts`, and null row columns except the key. It is never current and covers no position
      or time, so as-of queries (`__start_at <= T AND (__end_at > T OR __end_at IS NULL)`) skip
      it; `history_rows` drops markers for readers who list versions.
    - A truncate closes every open version at the truncate's `_seq`/`_ts`."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    return StructType(
        [
            *columns.fields,
            StructField(START_SEQ, LongType()),
            StructField(END_SEQ, LongType()),
            StructField(START_AT, TimestampType()),
            StructField(END_AT, TimestampType()),
            StructField(TARGET_SEQ, LongType()),
        ]
    )


def current_versions(target: DataFrame) -> DataFrame:
    """The current version of every live key, without the bookkeeping columns."""
    return target.where(f"{END_SEQ} IS NULL").drop(START_SEQ, END_SEQ, START_AT, END_AT, TARGET_SEQ)


def history_rows(target: DataFrame) -> DataFrame:
    """Every real version (current and closed), without the delete markers."""
    return target.where(f"{END_SEQ} IS NULL OR {START_SEQ} < {END_SEQ}")


def _has_map(dtype: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, MapType):
        return True
    if isinstance(dtype, ArrayType):
        return _has_map(dtype.elementType)
    if isinstance(dtype, StructType):
        return any(_has_map(f.dataType) for f in dtype.fields)
    return False


def _col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"`{name}`")


def apply_scd2(
    spark: SparkSession,
    target_path: str,
    changes: DataFrame,
    keys: Sequence[str],
    track_columns: Sequence[str],
) -> None:
    """Fold one batch of changes into the SCD2 target (contract: `scd2_schema`) in ONE Delta
    MERGE, so the caller can make the batch idempotent with txnAppId/txnVersion.

    `track_columns` empty tracks every non-key row column. For the keys in the batch only, the
    versions already in the target are turned back into changes (a version's opening change at
    `__start_seq`, the last change folded into it at `__seq`, and the delete that closed it, or
    its marker, at `__end_seq`), combined with the batch, de-duplicated per (key, `_seq`) (a
    change of the batch wins over the one rebuilt from the target, so a replay brings back an
    exact `_ts`), and those keys' versions are recomputed in `_seq` order. The MERGE on
    (keys, `__start_seq`) updates versions that changed, inserts new ones and deletes those
    that are no longer part of the recomputed history. Exact replays change nothing, and
    batches applied in any order give the history of the in-order changes, with one
    inexactness:

    A version keeps only the values and position of the last change folded into it. When a
    late change whose tracked columns differ lands strictly inside a version's folded range
    (after `__start_seq`, before `__seq`: the tracked values went A -> B -> A, or a delete and
    re-insert with equal tracked values, and the B or the delete arrived last), the version is
    split and the folded change at `__seq` reopens a version after the late change; but the
    folded change's own time was not kept, so that version's `__start_at` (and the late
    change's version's `__end_at`) is the late change's `_ts` (a zero-length time interval for
    the late version), the version before the late change carries the untracked values of the
    last fold, and intermediate folds between the late change and `__seq` are lost. Replaying
    the folded change later restores its exact time. With every column tracked only exact
    repeats of a row fold, so this needs a row's values to come back non-adjacently.

    Changes with a null `_seq` cannot be ordered and are ignored; ops other than c, u, r and
    d are ignored (truncates go to `apply_truncate_scd2`)."""
    from delta.tables import DeltaTable

    columns = [c for c in changes.columns if c not in CHANGE_META]
    types = {f.name: f.dataType for f in changes.schema.fields}
    values = [c for c in columns if c not in keys]
    source = _scd2_merge_source(
        spark.read.format("delta").load(target_path), changes, keys, track_columns
    )

    def differs(name: str) -> str:
        t, s = f"t.`{name}`", f"s.`{name}`"
        if name in types and _has_map(types[name]):
            t, s = f"to_json({t})", f"to_json({s})"
        return f"NOT ({t} <=> {s})"

    on = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in keys] + [f"t.{START_SEQ} = s.{START_SEQ}"])
    updated = [*values, END_SEQ, START_AT, END_AT, TARGET_SEQ]
    row: dict[str, str | Column] = {
        f"`{c}`": f"s.`{c}`" for c in [*columns, START_SEQ, END_SEQ, START_AT, END_AT, TARGET_SEQ]
    }
    (
        DeltaTable.forPath(spark, target_path)
        .alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition="s._delete")
        .whenMatchedUpdate(
            condition=f"NOT s._delete AND ({' OR '.join(differs(c) for c in updated)})",
            set={f"`{c}`": f"s.`{c}`" for c in updated},
        )
        .whenNotMatchedInsert(condition="NOT s._delete", values=row)
        .execute()
    )


def _scd2_merge_source(
    target: DataFrame, changes: DataFrame, keys: Sequence[str], track_columns: Sequence[str]
) -> DataFrame:
    """The recomputed versions of the batch's keys (`_delete` false) and the target versions
    they no longer have (`_delete` true): see `apply_scd2`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = [c for c in changes.columns if c not in CHANGE_META]
    types = {f.name: f.dataType for f in changes.schema.fields}
    values = [c for c in columns if c not in keys]
    tracked = [c for c in track_columns if c not in keys] or values
    unknown = sorted(set(tracked) - set(values))
    if unknown:
        raise ValueError(f"track_columns not among the row columns: {', '.join(unknown)}")
    if TS not in changes.columns:
        changes = changes.withColumn(TS, F.lit(None).cast("timestamp"))
    key_cols = [_col(k) for k in keys]

    # Every change as a struct. `_prio` settles two changes at one (key, _seq): the batch's
    # (0) over one rebuilt from the target: an opening or fold (1) over a rebuilt close (2), which
    # only stands when no version opens there. `_anchor`: a target row starts at this `_seq`.
    fields = [*values, SEQ, TS, "_up", "_fold", "_prio", "_anchor"]

    def event(seq: str, ts: Column, upsert: bool, prio: int, anchor: Column) -> Column:
        return F.struct(
            *[(_col(c) if upsert else F.lit(None).cast(types[c])).alias(c) for c in values],
            F.col(seq).cast("long").alias(SEQ),
            ts.cast("timestamp").alias(TS),
            F.lit(upsert).alias("_up"),
            F.lit(seq == TARGET_SEQ).alias("_fold"),
            F.lit(prio).alias("_prio"),
            anchor.alias("_anchor"),
        )

    def events_of(frame: DataFrame, candidates: list[Column]) -> DataFrame:
        return (
            frame.select(*key_cols, F.explode(F.array(*candidates)).alias("_e"))
            .where(F.col("_e").isNotNull())
            .select(*key_cols, *[F.col("_e").getField(c).alias(c) for c in fields])
        )

    no = F.lit(False)
    batch = changes.where(F.col(OP).isin(*UPSERT_OPS, "d") & F.col(SEQ).isNotNull())
    upsert = F.col(OP).isin(*UPSERT_OPS)
    new = events_of(
        batch,
        [
            F.when(upsert, event(SEQ, F.col(TS), True, 0, no)).otherwise(
                event(SEQ, F.col(TS), False, 0, no)
            )
        ],
    )
    # The target's versions of the batch's keys, turned back into changes: the opening, the
    # last fold (its time was not kept) and the close (a delete, unless a version opens there).
    same_key = [F.col(f"t.`{k}`").eqNullSafe(F.col(f"k.`{k}`")) for k in keys]
    existing = target.alias("t").join(new.select(*key_cols).alias("k"), same_key, "left_semi")
    marker = F.col(END_SEQ).isNotNull() & (F.col(START_SEQ) == F.col(END_SEQ))
    rebuilt = events_of(
        existing,
        [
            F.when(~marker, event(START_SEQ, F.col(START_AT), True, 1, F.lit(True))),
            F.when(
                ~marker & (F.col(TARGET_SEQ) > F.col(START_SEQ)),
                event(TARGET_SEQ, F.lit(None), True, 1, no),
            ),
            F.when(F.col(END_SEQ).isNotNull(), event(END_SEQ, F.col(END_AT), False, 2, marker)),
        ],
    )

    # One change per (key, _seq), everything in one pass over the changes partitioned by key.
    def comparable(name: str) -> Column:
        return F.to_json(_col(name)) if _has_map(types[name]) else _col(name)

    at_seq = Window.partitionBy(*key_cols, F.col(SEQ))
    tie_break = F.to_json(F.struct(*[_col(c) for c in values], F.col(TS)))
    events = (
        new.unionByName(rebuilt)
        .repartition(*key_cols)
        .withColumn("_anchored", F.max("_anchor").over(at_seq))
        .withColumn(
            "_rank",
            F.row_number().over(at_seq.orderBy("_prio", F.col("_up").desc(), tie_break)),
        )
        .where("_rank = 1")
    )
    # Versions, in _seq order: an upsert opens one at the start, after a delete, or when its
    # tracked columns differ from the change before it; a delete with nothing open is a marker.
    by_seq = Window.partitionBy(*key_cols).orderBy(SEQ)
    prev_up = F.lag("_up").over(by_seq)
    changed = reduce(
        lambda a, b: a | b,
        [~comparable(c).eqNullSafe(F.lag(comparable(c)).over(by_seq)) for c in tracked],
        no,
    )
    starts = F.when(F.col("_up"), F.coalesce(~prev_up | changed, F.lit(True))).otherwise(
        F.coalesce(~prev_up, F.lit(True))
    )
    events = events.select(
        *key_cols,
        *[_col(c) for c in values],
        SEQ,
        # A rebuilt fold lost its time: if it reopens a version, it starts at the time of the
        # change before it (see `apply_scd2`).
        F.when(F.col("_fold"), F.lag(TS).over(by_seq)).otherwise(F.col(TS)).alias(TS),
        "_up",
        "_anchored",
        starts.alias("_start"),
    ).withColumn(
        "_grp",
        F.sum(F.col("_start").cast("int")).over(
            by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        ),
    )
    groups = events.groupBy(*key_cols, "_grp").agg(
        F.min(F.struct(SEQ, TS)).alias("_first"),
        F.max(
            F.when(F.col("_up"), F.struct(F.col(SEQ).alias("_s"), *[_col(c) for c in values]))
        ).alias("_last"),
        F.max(F.when(~F.col("_up"), F.struct(SEQ, TS))).alias("_close"),
    )
    by_group = Window.partitionBy(*key_cols).orderBy("_grp")
    end = F.when(F.col("_close").isNotNull(), F.col("_close")).otherwise(
        F.lead("_first").over(by_group)
    )
    versions = groups.select(
        *key_cols,
        *[F.col("_last").getField(c).alias(c) for c in values],
        F.col("_first").getField(SEQ).alias(START_SEQ),
        end.getField(SEQ).alias(END_SEQ),
        F.col("_first").getField(TS).alias(START_AT),
        end.getField(TS).alias(END_AT),
        F.coalesce(F.col("_last").getField("_s"), F.col("_first").getField(SEQ)).alias(TARGET_SEQ),
        no.alias("_delete"),
    )
    # Target rows starting where no recomputed version starts any more: deleted.
    gone = events.where(F.col("_anchored") & ~F.col("_start")).select(
        *key_cols, F.col(SEQ).alias(START_SEQ), F.lit(True).alias("_delete")
    )
    return versions.unionByName(gone, allowMissingColumns=True)


def apply_truncate_scd2(
    spark: SparkSession, target_path: str, seq: int, ts: datetime | None
) -> None:
    """A table-wide truncate at position `seq`, as one Delta UPDATE: every open version that
    started before it closes at `seq`/`ts`. Not guarded: a late change older than the truncate
    for a key with no open version then (closed, or never seen) still opens a version."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    DeltaTable.forPath(spark, target_path).update(
        condition=F.col(END_SEQ).isNull() & (F.col(START_SEQ) < F.lit(int(seq))),
        set={END_SEQ: F.lit(int(seq)), END_AT: F.lit(ts).cast("timestamp")},
    )
