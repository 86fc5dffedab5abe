"""SCD type 2 apply: one row per version of a key (contract: `scd2_schema`), folded from
changes ordered by the connector's position, never by arrival; replays change nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.core.current import END_AT, END_SEQ, SNAPSHOT, START_AT, START_SEQ, TARGET_SEQ
from lakehouse.silver.changes import CHANGE_META
from lakehouse.silver.scd2_history import DELETE_VERSION, has_map, merge_source

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType


def scd2_schema(columns: StructType) -> StructType:
    """The SCD2 target: one row per version of a key.

    Contract:
    - the row columns, then `__start_seq`, `__end_seq`, `__start_at`, `__end_at` and `__seq`;
      `(keys, __start_seq)` is unique.
    - A version covers the positions `[__start_seq, __end_seq)` and the source times
      `[__start_at, __end_at)`; `*_seq` come from the changes' `_lh_seq`, `*_at` from their `_lh_ts`
      (so they are null when the source gave no time).
    - The current version of a key is its row with `__end_seq IS NULL` (at most one per key).
    - A change whose tracked columns differ from the version before it ends that version (at
      the change's `_lh_seq`/`_lh_ts`) and opens a new one. A change whose tracked columns are equal
      (only untracked columns changed) updates that version in place: its row columns and
      `__seq`, the last change folded into it.
    - A delete closes the key's open version (`__end_seq`/`__end_at` = the delete's
      `_lh_seq`/`_lh_ts`), adds no version and never overwrites the row's values (under REPLICA
      IDENTITY DEFAULT it carries only the key).
    - A delete with no open version before it (a key never seen, its insert still to arrive, or
      a second delete) is kept as a *delete marker*: a closed, zero-length row with
      `__start_seq = __end_seq = __seq` = the delete's `_lh_seq`, `__start_at = __end_at` = its
      `_lh_ts`, and null row columns except the key. It is never current and covers no position
      or time, so as-of queries (`__start_at <= T AND (__end_at > T OR __end_at IS NULL)`) skip
      it; `history_rows` drops markers for readers who list versions.
    - A truncate closes every open version at the truncate's `_lh_seq`/`_lh_ts`.
    - `__snapshot`: the version is current and its last change (`__seq`) is a snapshot read.
      A change arriving after it replaces it whatever its `_lh_seq`: the snapshot read moves to
      just below that change (`lakehouse.silver.changes.snapshot_position`), so its `__seq`
      (or `__start_seq`) is then that change's `_lh_seq` - 1."""
    from pyspark.sql.types import BooleanType, LongType, StructField, StructType, TimestampType

    return StructType(
        [
            *columns.fields,
            StructField(START_SEQ, LongType()),
            StructField(END_SEQ, LongType()),
            StructField(START_AT, TimestampType()),
            StructField(END_AT, TimestampType()),
            StructField(TARGET_SEQ, LongType()),
            StructField(SNAPSHOT, BooleanType()),
        ]
    )


def history_rows(target: DataFrame) -> DataFrame:
    """Every real version (current and closed), without the delete markers."""
    return target.where(f"{END_SEQ} IS NULL OR {START_SEQ} < {END_SEQ}")


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
    its marker, at `__end_seq`), combined with the batch, de-duplicated per (key, `_lh_seq`) (a
    change of the batch wins over the one rebuilt from the target, so a replay brings back an
    exact `_lh_ts`), and those keys' versions are recomputed in `_lh_seq` order. The MERGE on
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
    change's version's `__end_at`) is the late change's `_lh_ts` (a zero-length time interval for
    the late version), the version before the late change carries the untracked values of the
    last fold, and intermediate folds between the late change and `__seq` are lost. Replaying
    the folded change later restores its exact time. With every column tracked only exact
    repeats of a row fold, so this needs a row's values to come back non-adjacently.

    Changes with a null `_lh_seq` cannot be ordered and are ignored; ops other than c, u, r and
    d are ignored (truncates go to `apply_truncate_scd2`)."""
    from delta.tables import DeltaTable

    columns = [c for c in changes.columns if c not in CHANGE_META]
    types = {f.name: f.dataType for f in changes.schema.fields}
    values = [c for c in columns if c not in keys]
    source = merge_source(
        spark.read.format("delta").load(target_path), changes, keys, track_columns
    )

    def differs(name: str) -> str:
        t, s = f"t.`{name}`", f"s.`{name}`"
        if name in types and has_map(types[name]):
            t, s = f"to_json({t})", f"to_json({s})"
        return f"NOT ({t} <=> {s})"

    on = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in keys] + [f"t.{START_SEQ} = s.{START_SEQ}"])
    updated = [*values, END_SEQ, START_AT, END_AT, TARGET_SEQ, SNAPSHOT]
    row: dict[str, str | Column] = {
        f"`{c}`": f"s.`{c}`"
        for c in [*columns, START_SEQ, END_SEQ, START_AT, END_AT, TARGET_SEQ, SNAPSHOT]
    }
    (
        DeltaTable.forPath(spark, target_path)
        .alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition=f"s.{DELETE_VERSION}")
        .whenMatchedUpdate(
            condition=f"NOT s.{DELETE_VERSION} AND ({' OR '.join(differs(c) for c in updated)})",
            set={f"`{c}`": f"s.`{c}`" for c in updated},
        )
        .whenNotMatchedInsert(condition=f"NOT s.{DELETE_VERSION}", values=row)
        .execute()
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
