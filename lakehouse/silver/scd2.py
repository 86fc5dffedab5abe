"""SCD type 2 apply: one row per version of a key (contract: `scd2_schema`), folded from
changes ordered by the connector's position, never by arrival; replays change nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.core.current import END_AT, END_SEQ, START_AT, START_SEQ, TARGET_SEQ
from lakehouse.core.errors import UsageError
from lakehouse.silver.changes import CHANGE_META, DELETE, OP, SEQ, TS, UPSERT_OPS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType


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


# Helper columns of the recomputation, per change event (a change of the batch, or one
# rebuilt from a target version):
_UP = "_up"  # an upsert (true) or a delete (false)
_FOLD = "_fold"  # rebuilt from a version's last folded change (its time was not kept)
# Settles two events at one (key, _seq): the batch's (0) over one rebuilt from the target: an
# opening or fold (1) over a rebuilt close (2), which only stands when no version opens there.
_PRIO = "_prio"
_ANCHOR = "_anchor"  # a target version starts at this event's _seq
_ANCHORED = "_anchored"  # some event at this (key, _seq) is an anchor
_START = "_start"  # this event opens a version
_GROUP = "_grp"  # the running count of openings: the version an event belongs to
_DELETE = "_delete"  # in the MERGE source: a target version to delete


@dataclass(frozen=True)
class _Shape:
    keys: list[str]
    values: list[str]  # the non-key row columns
    tracked: list[str]  # the values whose change opens a version
    types: dict[str, DataType]

    @property
    def key_cols(self) -> list[Column]:
        return [_col(k) for k in self.keys]

    @property
    def fields(self) -> list[str]:
        return [*self.values, SEQ, TS, _UP, _FOLD, _PRIO, _ANCHOR]


def _shape(changes: DataFrame, keys: Sequence[str], track_columns: Sequence[str]) -> _Shape:
    columns = [c for c in changes.columns if c not in CHANGE_META]
    values = [c for c in columns if c not in keys]
    tracked = [c for c in track_columns if c not in keys] or values
    unknown = sorted(set(tracked) - set(values))
    if unknown:
        raise UsageError(f"track_columns not among the row columns: {', '.join(unknown)}")
    return _Shape(list(keys), values, tracked, {f.name: f.dataType for f in changes.schema.fields})


def _scd2_merge_source(
    target: DataFrame, changes: DataFrame, keys: Sequence[str], track_columns: Sequence[str]
) -> DataFrame:
    """The recomputed versions of the batch's keys (`_delete` false) and the target versions
    they no longer have (`_delete` true): see `apply_scd2`."""
    from pyspark.sql import functions as F

    shape = _shape(changes, keys, track_columns)
    if TS not in changes.columns:
        changes = changes.withColumn(TS, F.lit(None).cast("timestamp"))
    new = _batch_events(shape, changes)
    events = _with_starts(shape, _one_per_seq(shape, new, _rebuilt_events(shape, target, new)))
    # Target rows starting where no recomputed version starts any more: deleted.
    gone = events.where(F.col(_ANCHORED) & ~F.col(_START)).select(
        *shape.key_cols, F.col(SEQ).alias(START_SEQ), F.lit(True).alias(_DELETE)
    )
    return _versions(shape, events).unionByName(gone, allowMissingColumns=True)


def _event(shape: _Shape, seq: str, ts: Column, upsert: bool, prio: int, anchor: Column) -> Column:
    """One change event as a struct of `shape.fields` (a delete carries no values)."""
    from pyspark.sql import functions as F

    return F.struct(
        *[(_col(c) if upsert else F.lit(None).cast(shape.types[c])).alias(c) for c in shape.values],
        F.col(seq).cast("long").alias(SEQ),
        ts.cast("timestamp").alias(TS),
        F.lit(upsert).alias(_UP),
        F.lit(seq == TARGET_SEQ).alias(_FOLD),
        F.lit(prio).alias(_PRIO),
        anchor.alias(_ANCHOR),
    )


def _events_of(shape: _Shape, frame: DataFrame, candidates: list[Column]) -> DataFrame:
    """The non-null `candidates` events of every row of `frame`, one row each."""
    from pyspark.sql import functions as F

    return (
        frame.select(*shape.key_cols, F.explode(F.array(*candidates)).alias("_e"))
        .where(F.col("_e").isNotNull())
        .select(*shape.key_cols, *[F.col("_e").getField(c).alias(c) for c in shape.fields])
    )


def _batch_events(shape: _Shape, changes: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    no = F.lit(False)
    batch = changes.where(F.col(OP).isin(*UPSERT_OPS, DELETE) & F.col(SEQ).isNotNull())
    upsert = F.col(OP).isin(*UPSERT_OPS)
    ts = F.col(TS)
    event = F.when(upsert, _event(shape, SEQ, ts, True, 0, no)).otherwise(
        _event(shape, SEQ, ts, False, 0, no)
    )
    return _events_of(shape, batch, [event])


def _rebuilt_events(shape: _Shape, target: DataFrame, new: DataFrame) -> DataFrame:
    """The target's versions of the batch's keys, turned back into changes: the opening, the
    last fold (its time was not kept) and the close (a delete, unless a version opens there)."""
    from pyspark.sql import functions as F

    same_key = [F.col(f"t.`{k}`").eqNullSafe(F.col(f"k.`{k}`")) for k in shape.keys]
    existing = target.alias("t").join(new.select(*shape.key_cols).alias("k"), same_key, "left_semi")
    marker = F.col(END_SEQ).isNotNull() & (F.col(START_SEQ) == F.col(END_SEQ))
    folded = ~marker & (F.col(TARGET_SEQ) > F.col(START_SEQ))
    return _events_of(
        shape,
        existing,
        [
            F.when(~marker, _event(shape, START_SEQ, F.col(START_AT), True, 1, F.lit(True))),
            F.when(folded, _event(shape, TARGET_SEQ, F.lit(None), True, 1, F.lit(False))),
            F.when(
                F.col(END_SEQ).isNotNull(),
                _event(shape, END_SEQ, F.col(END_AT), False, 2, marker),
            ),
        ],
    )


def _one_per_seq(shape: _Shape, new: DataFrame, rebuilt: DataFrame) -> DataFrame:
    """One event per (key, _seq), everything in one pass over the events partitioned by key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    at_seq = Window.partitionBy(*shape.key_cols, F.col(SEQ))
    tie_break = F.to_json(F.struct(*[_col(c) for c in shape.values], F.col(TS)))
    rank = F.row_number().over(at_seq.orderBy(_PRIO, F.col(_UP).desc(), tie_break))
    return (
        new.unionByName(rebuilt)
        .repartition(*shape.key_cols)
        .withColumn(_ANCHORED, F.max(_ANCHOR).over(at_seq))
        .withColumn("_rank", rank)
        .where("_rank = 1")
    )


def _with_starts(shape: _Shape, events: DataFrame) -> DataFrame:
    """Versions, in _seq order: an upsert opens one at the start, after a delete, or when its
    tracked columns differ from the change before it; a delete with nothing open is a marker.
    Adds `_start` and the version number `_grp`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def comparable(name: str) -> Column:
        return F.to_json(_col(name)) if _has_map(shape.types[name]) else _col(name)

    by_seq = Window.partitionBy(*shape.key_cols).orderBy(SEQ)
    prev_up = F.lag(_UP).over(by_seq)
    changed = reduce(
        lambda a, b: a | b,
        [~comparable(c).eqNullSafe(F.lag(comparable(c)).over(by_seq)) for c in shape.tracked],
        F.lit(False),
    )
    starts = F.when(F.col(_UP), F.coalesce(~prev_up | changed, F.lit(True))).otherwise(
        F.coalesce(~prev_up, F.lit(True))
    )
    return events.select(
        *shape.key_cols,
        *[_col(c) for c in shape.values],
        SEQ,
        # A rebuilt fold lost its time: if it reopens a version, it starts at the time of the
        # change before it (see `apply_scd2`).
        F.when(F.col(_FOLD), F.lag(TS).over(by_seq)).otherwise(F.col(TS)).alias(TS),
        _UP,
        _ANCHORED,
        starts.alias(_START),
    ).withColumn(
        _GROUP,
        F.sum(F.col(_START).cast("int")).over(
            by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        ),
    )


def _versions(shape: _Shape, events: DataFrame) -> DataFrame:
    """One target row per version: the values of its last upsert, opened by its first event,
    closed by its delete or else by the next version's opening."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    values = [_col(c) for c in shape.values]
    groups = events.groupBy(*shape.key_cols, _GROUP).agg(
        F.min(F.struct(SEQ, TS)).alias("_first"),
        F.max(F.when(F.col(_UP), F.struct(F.col(SEQ).alias("_s"), *values))).alias("_last"),
        F.max(F.when(~F.col(_UP), F.struct(SEQ, TS))).alias("_close"),
    )
    by_group = Window.partitionBy(*shape.key_cols).orderBy(_GROUP)
    end = F.when(F.col("_close").isNotNull(), F.col("_close")).otherwise(
        F.lead("_first").over(by_group)
    )
    first, last = F.col("_first"), F.col("_last")
    return groups.select(
        *shape.key_cols,
        *[last.getField(c).alias(c) for c in shape.values],
        first.getField(SEQ).alias(START_SEQ),
        end.getField(SEQ).alias(END_SEQ),
        first.getField(TS).alias(START_AT),
        end.getField(TS).alias(END_AT),
        F.coalesce(last.getField("_s"), first.getField(SEQ)).alias(TARGET_SEQ),
        F.lit(False).alias(_DELETE),
    )


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
