"""The change convention every keyed apply reads (SCD1, SCD2, event upserts).

A change is a row of the table's columns (the after-image; for a delete the key and whatever
the before-image carried) plus:
- `_lh_op`: c (create), u (update), r (snapshot read), d (delete) or t (a table-wide truncate);
- `_lh_seq`: a number that orders the changes of one key (PostgreSQL: the change's LSN; events:
  the `sequence_by` column), but for a snapshot read followed by an older-looking change
  (`snapshot_position`);
- `_lh_ts`: optionally the source commit time of the change (may be null);
- `_lh_arrival`: optionally where the change arrived (its bronze topic, partition and offset),
  which only breaks ties between changes of one key at the same `_lh_seq`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.core.columns import named

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

OP, SEQ, TS = "_lh_op", "_lh_seq", "_lh_ts"
# Optional: where a change arrived (anything orderable, e.g. its Kafka topic, partition and
# offset). It only breaks ties between changes of one key at the same `_lh_seq`.
ARRIVAL = "_lh_arrival"
SNAPSHOT_READ = "r"
UPSERT_OPS = ("c", "u", SNAPSHOT_READ)
DELETE, TRUNCATE = "d", "t"
CHANGE_META = (OP, SEQ, TS, ARRIVAL)


def latest_per_key(changes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The change with the highest `_lh_seq` per key. Exact replays collapse to one row; a batch
    holding several changes of a key reduces to the one MERGE must apply.

    Changes of a key at the same `_lh_seq` (two events with the same timestamp): the first to
    arrive wins when the changes carry `_lh_arrival`, as it does across batches (the MERGE applies
    only a strictly newer `_lh_seq`). Where the batches were cut then decides nothing, as long as
    a key's changes arrive in order (one Kafka partition per key). Without `_lh_arrival` a tie
    within a batch is resolved arbitrarily."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tiebreak = [F.col(ARRIVAL).asc()] if ARRIVAL in changes.columns else []
    order = Window.partitionBy(*[named(k) for k in keys]).orderBy(F.col(SEQ).desc(), *tiebreak)
    return (
        changes.where(F.col(OP).isin(*UPSERT_OPS, DELETE))
        .withColumn("_lh_rank", F.row_number().over(order))
        .where("_lh_rank = 1")
        .drop("_lh_rank")
    )


def snapshot_position(
    keys: Sequence[str], is_snapshot: Column, arrival: Column, streamed: Column
) -> Column:
    """The `_lh_seq` a change applies at: its own, but a snapshot read moves to just below the
    lowest `_lh_seq` of the changes of its key that arrive after it (`streamed` and not a snapshot
    read, later by `arrival`) when that is at or below its own.

    Why: a snapshot read's position is where the WAL was when the snapshot started (PostgreSQL:
    `pg_current_wal_lsn()`), but a transaction open then commits after the snapshot with changes
    written to the WAL before that position. The snapshot read the row as it was before that
    transaction, and the connector streams the transaction whole after the snapshot, so only
    arrival says its change is the newer one (Debezium's `source.sequence` does not: it carries
    the previous transaction's commit, null right after a snapshot). A change of a key arriving
    after the key's snapshot read was committed after the snapshot began: changes committed
    before it were in the snapshot, and the connector streams from the snapshot's position.

    Between streamed changes the position decides as before (a replay arrives after newer
    changes and must lose); a snapshot read against what came before it too (a snapshot taken
    later starts at a later WAL position than anything streamed before it). One position below
    the change is free: a WAL record starts where no other one does, and none of the key's
    changes lies between (the open transaction held the row's lock)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    later = (
        Window.partitionBy(*[named(k) for k in keys])
        .orderBy(arrival.desc_nulls_last())
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    lowest_later = F.min(F.when(streamed & ~is_snapshot, F.col(SEQ))).over(later)
    return F.when(is_snapshot & (lowest_later <= F.col(SEQ)), lowest_later - 1).otherwise(
        F.col(SEQ)
    )
