"""The SCD2 recomputation behind `lakehouse.silver.scd2.apply_scd2`: the batch's changes and
the target versions of its keys, turned back into change events, folded into versions in
`_lh_seq` order (snapshot reads placed first, `lakehouse.silver.changes.snapshot_position`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.core.columns import named
from lakehouse.core.current import END_AT, END_SEQ, SNAPSHOT, START_AT, START_SEQ, TARGET_SEQ
from lakehouse.core.errors import UsageError
from lakehouse.silver.changes import (
    ARRIVAL,
    CHANGE_META,
    DELETE,
    OP,
    SEQ,
    SNAPSHOT_READ,
    TS,
    UPSERT_OPS,
    snapshot_position,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


def has_map(dtype: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, MapType):
        return True
    if isinstance(dtype, ArrayType):
        return has_map(dtype.elementType)
    if isinstance(dtype, StructType):
        return any(has_map(f.dataType) for f in dtype.fields)
    return False


# Helper columns of the recomputation, per change event (a change of the batch, or one
# rebuilt from a target version):
_UP = "_lh_up"  # an upsert (true) or a delete (false)
_FOLD = "_lh_fold"  # rebuilt from a version's last folded change (its time was not kept)
# Settles two events at one (key, _lh_seq): the batch's (0) over one rebuilt from the target: an
# opening or fold (1) over a rebuilt close (2), which only stands when no version opens there.
_PRIO = "_lh_prio"
_ANCHOR = "_lh_anchor"  # a target version starts at this event's _lh_seq
_ANCHORED = "_lh_anchored"  # some event at this (key, _lh_seq) is an anchor
_START = "_lh_start"  # this event opens a version
_GROUP = "_lh_grp"  # the running count of openings: the version an event belongs to
DELETE_VERSION = "_lh_delete"  # in the MERGE source: a target version to delete
_SNAP = "_lh_snap"  # a snapshot read (rebuilt: the current version's last change is one)
# Arrival order: rebuilt events (0) before the batch's (1, by its `_lh_arrival` when it has one).
_ARRIVED = "_lh_arrived"


@dataclass(frozen=True)
class _Shape:
    keys: list[str]
    values: list[str]  # the non-key row columns
    tracked: list[str]  # the values whose change opens a version
    types: dict[str, DataType]
    arrival_type: DataType  # of the batch's `_lh_arrival` (long when it has none)

    @property
    def key_cols(self) -> list[Column]:
        return [named(k) for k in self.keys]

    @property
    def fields(self) -> list[str]:
        return [*self.values, SEQ, TS, _UP, _FOLD, _PRIO, _ANCHOR, _SNAP, _ARRIVED]


def _shape(changes: DataFrame, keys: Sequence[str], track_columns: Sequence[str]) -> _Shape:
    columns = [c for c in changes.columns if c not in CHANGE_META]
    values = [c for c in columns if c not in keys]
    tracked = [c for c in track_columns if c not in keys] or values
    unknown = sorted(set(tracked) - set(values))
    if unknown:
        raise UsageError(f"track_columns not among the row columns: {', '.join(unknown)}")
    from pyspark.sql.types import LongType

    types = {f.name: f.dataType for f in changes.schema.fields}
    return _Shape(list(keys), values, tracked, types, types.get(ARRIVAL, LongType()))


def merge_source(
    target: DataFrame, changes: DataFrame, keys: Sequence[str], track_columns: Sequence[str]
) -> DataFrame:
    """The recomputed versions of the batch's keys (`_lh_delete` false) and the target versions
    they no longer have (`_lh_delete` true): see `apply_scd2`."""
    from pyspark.sql import functions as F

    shape = _shape(changes, keys, track_columns)
    if TS not in changes.columns:
        changes = changes.withColumn(TS, F.lit(None).cast("timestamp"))
    new = _batch_events(shape, changes)
    placed = _placed(shape, new.unionByName(_rebuilt_events(shape, target, new)))
    events = _with_starts(shape, _one_per_seq(shape, placed))
    # Target rows starting where no recomputed version starts any more (or that a change
    # after their snapshot read moved, `_placed`): deleted.
    gone = events.where(F.col(_ANCHORED) & ~F.col(_START)).select(
        *shape.key_cols, F.col(SEQ).alias(START_SEQ), F.lit(True).alias(DELETE_VERSION)
    )
    moved = placed.where(F.col("_lh_moved_from").isNotNull()).select(
        *shape.key_cols, F.col("_lh_moved_from").alias(START_SEQ), F.lit(True).alias(DELETE_VERSION)
    )
    return _versions(shape, events).unionByName(gone.unionByName(moved), allowMissingColumns=True)


def _placed(shape: _Shape, events: DataFrame) -> DataFrame:
    """The events partitioned by key, snapshot reads moved below the changes that arrive after
    them (`snapshot_position`). A moved rebuilt opening no longer anchors its target row: that
    row's start goes to `_moved_from` (deleted; the version is written at its new start)."""
    from pyspark.sql import functions as F

    arrived = F.col(_ARRIVED)
    batch = arrived.getField("tier") == 1
    # Without `_lh_arrival` the batch's own order is unknown: only the target's read moves.
    movable = F.col(_SNAP) & (~batch | arrived.getField("at").isNotNull())
    position = snapshot_position(shape.keys, movable, arrived, batch)
    moved = F.col("_lh_position") != F.col(SEQ)
    return (
        events.repartition(*shape.key_cols)
        .withColumn("_lh_position", position)
        .withColumn("_lh_moved_from", F.when(moved & F.col(_ANCHOR), F.col(SEQ)))
        .withColumn(_ANCHOR, F.col(_ANCHOR) & ~moved)
        .withColumn(SEQ, F.col("_lh_position"))
        .drop("_lh_position")
    )


def _event(
    shape: _Shape,
    seq: str,
    ts: Column,
    upsert: bool,
    prio: int,
    anchor: Column,
    snap: Column,
    arrived: Column,
) -> Column:
    """One change event as a struct of `shape.fields` (a delete carries no values)."""
    from pyspark.sql import functions as F

    return F.struct(
        *[
            (named(c) if upsert else F.lit(None).cast(shape.types[c])).alias(c)
            for c in shape.values
        ],
        F.col(seq).cast("long").alias(SEQ),
        ts.cast("timestamp").alias(TS),
        F.lit(upsert).alias(_UP),
        F.lit(seq == TARGET_SEQ).alias(_FOLD),
        F.lit(prio).alias(_PRIO),
        anchor.alias(_ANCHOR),
        snap.alias(_SNAP),
        arrived.alias(_ARRIVED),
    )


def _events_of(shape: _Shape, frame: DataFrame, candidates: list[Column]) -> DataFrame:
    """The non-null `candidates` events of every row of `frame`, one row each."""
    from pyspark.sql import functions as F

    return (
        frame.select(*shape.key_cols, F.explode(F.array(*candidates)).alias("_lh_e"))
        .where(F.col("_lh_e").isNotNull())
        .select(*shape.key_cols, *[F.col("_lh_e").getField(c).alias(c) for c in shape.fields])
    )


def _batch_events(shape: _Shape, changes: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    no = F.lit(False)
    batch = changes.where(F.col(OP).isin(*UPSERT_OPS, DELETE) & F.col(SEQ).isNotNull())
    upsert = F.col(OP).isin(*UPSERT_OPS)
    ts = F.col(TS)
    arrival = F.col(ARRIVAL) if ARRIVAL in changes.columns else F.lit(None)
    arrived = _arrived(1, arrival.cast(shape.arrival_type))
    snap = F.col(OP) == SNAPSHOT_READ
    event = F.when(upsert, _event(shape, SEQ, ts, True, 0, no, snap, arrived)).otherwise(
        _event(shape, SEQ, ts, False, 0, no, no, arrived)
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
    # Only the current version's last change can still be followed by a change after it.
    snapshot = F.coalesce(F.col(SNAPSHOT), F.lit(False)) & F.col(END_SEQ).isNull()
    no, yes = F.lit(False), F.lit(True)
    arrived = _arrived(0, F.lit(None).cast(shape.arrival_type))
    return _events_of(
        shape,
        existing,
        [
            F.when(
                ~marker,
                _event(
                    shape, START_SEQ, F.col(START_AT), True, 1, yes, snapshot & ~folded, arrived
                ),
            ),
            F.when(
                folded,
                _event(shape, TARGET_SEQ, F.lit(None), True, 1, no, snapshot, arrived),
            ),
            F.when(
                F.col(END_SEQ).isNotNull(),
                _event(shape, END_SEQ, F.col(END_AT), False, 2, marker, no, arrived),
            ),
        ],
    )


def _arrived(tier: int, arrival: Column) -> Column:
    from pyspark.sql import functions as F

    return F.struct(F.lit(tier).alias("tier"), arrival.alias("at"))


def _one_per_seq(shape: _Shape, events: DataFrame) -> DataFrame:
    """One event per (key, _lh_seq) of the events (partitioned by key)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    at_seq = Window.partitionBy(*shape.key_cols, F.col(SEQ))
    tie_break = F.to_json(F.struct(*[named(c) for c in shape.values], F.col(TS)))
    rank = F.row_number().over(at_seq.orderBy(_PRIO, F.col(_UP).desc(), tie_break))
    return (
        events.withColumn(_ANCHORED, F.max(_ANCHOR).over(at_seq))
        .withColumn("_lh_rank", rank)
        .where("_lh_rank = 1")
    )


def _with_starts(shape: _Shape, events: DataFrame) -> DataFrame:
    """Versions, in _lh_seq order: an upsert opens one at the start, after a delete, or when its
    tracked columns differ from the change before it; a delete with nothing open is a marker.
    Adds `_start` and the version number `_grp`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def comparable(name: str) -> Column:
        return F.to_json(named(name)) if has_map(shape.types[name]) else named(name)

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
        *[named(c) for c in shape.values],
        SEQ,
        # A rebuilt fold lost its time: if it reopens a version, it starts at the time of the
        # change before it (see `apply_scd2`).
        F.when(F.col(_FOLD), F.lag(TS).over(by_seq)).otherwise(F.col(TS)).alias(TS),
        _UP,
        _SNAP,
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

    values = [named(c) for c in shape.values]
    groups = events.groupBy(*shape.key_cols, _GROUP).agg(
        F.min(F.struct(SEQ, TS)).alias("_lh_first"),
        # By `_lh_seq` alone: a MAP value (an hstore) has no order, so a struct holding one
        # has none.
        F.max_by(
            F.struct(F.col(SEQ).alias("_lh_s"), *values, _SNAP), F.when(F.col(_UP), F.col(SEQ))
        ).alias("_lh_last"),
        F.max(F.when(~F.col(_UP), F.struct(SEQ, TS))).alias("_lh_close"),
    )
    by_group = Window.partitionBy(*shape.key_cols).orderBy(_GROUP)
    end = F.when(F.col("_lh_close").isNotNull(), F.col("_lh_close")).otherwise(
        F.lead("_lh_first").over(by_group)
    )
    first, last = F.col("_lh_first"), F.col("_lh_last")
    return groups.select(
        *shape.key_cols,
        *[last.getField(c).alias(c) for c in shape.values],
        first.getField(SEQ).alias(START_SEQ),
        end.getField(SEQ).alias(END_SEQ),
        first.getField(TS).alias(START_AT),
        end.getField(TS).alias(END_AT),
        F.coalesce(last.getField("_lh_s"), first.getField(SEQ)).alias(TARGET_SEQ),
        # A closed version is no snapshot read any more (see `scd2_schema`).
        (F.coalesce(last.getField(_SNAP), F.lit(False)) & end.isNull()).alias(SNAPSHOT),
        F.lit(False).alias(DELETE_VERSION),
    )
