"""The change convention every keyed apply reads (SCD1, SCD2, event upserts).

A change is a row of the table's columns (the after-image; for a delete the key and whatever
the before-image carried) plus:
- `_op`: c (create), u (update), r (snapshot read), d (delete) or t (a table-wide truncate);
- `_seq`: a number that orders the changes of one key (PostgreSQL: the change's LSN; events:
  the `sequence_by` column);
- `_ts`: optionally the source commit time of the change (may be null);
- `_arrival`: optionally where the change arrived (its bronze topic, partition and offset),
  which only breaks ties between changes of one key at the same `_seq`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OP, SEQ, TS = "_op", "_seq", "_ts"
# Optional: where a change arrived (anything orderable, e.g. its Kafka topic, partition and
# offset). It only breaks ties between changes of one key at the same `_seq`.
ARRIVAL = "_arrival"
UPSERT_OPS = ("c", "u", "r")
DELETE, TRUNCATE = "d", "t"
CHANGE_META = (OP, SEQ, TS, ARRIVAL)


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
        changes.where(F.col(OP).isin(*UPSERT_OPS, DELETE))
        .withColumn("_rank", F.row_number().over(order))
        .where("_rank = 1")
        .drop("_rank")
    )
