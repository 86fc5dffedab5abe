"""CDC tombstones as deletes. A tombstone is a key with no value and no source position.
After a Debezium delete (`tombstones.on.delete`, or ExtractNewRecordState's
`rewrite-with-tombstone`) it repeats that delete; under the SMT's default delete handling
(`delete.tombstone.handling.mode=tombstone`) the delete itself is dropped and the tombstone is
the only trace of it. Either way it means: the key's state just before it, in Kafka order
(one partition per key), is deleted.

So a tombstone becomes a delete at `p + 1` when its key's previous change is an upsert at
position `p`: after that change and before the key's next one (a PostgreSQL LSN names a WAL
byte and WAL records are at least 24 bytes apart, so no real change sits at `p + 1`). The
previous change is the last one of the key that arrived before the tombstone in the batch;
for a tombstone first of its key in the batch, the record just before it in its Kafka
partition when that is a delete of the same key (the usual pair, cut by the batch), else
silver's live row. A tombstone whose key was already deleted, or was never seen, changes
nothing and is left out. Its time is Kafka's timestamp, capped by the key's next change in
the batch.

Limit: with the SMT's default delete handling, a connector that restarts and re-sends changes
it already sent (Debezium is at-least-once) can re-send a tombstone after changes that
followed the delete; a re-sent tombstone whose batch holds no earlier change of its key is
then taken for a new delete of the key's current row. Deletes that carry their own position
(the envelope, or `rewrite-with-tombstone`) are exact. Pure DataFrame -> DataFrame;
`lakehouse.silver.batch` reads bronze and silver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.bronze.transform import CDC_LSN, CDC_OP
from lakehouse.core.columns import named
from lakehouse.core.current import TARGET_SEQ
from lakehouse.silver.changes import DELETE, OP, SEQ, TS, UPSERT_OPS
from lakehouse.silver.transform import ERROR, OFFSET, PARTITION, RAW_KEY, TOMBSTONE_ROW, TOPIC

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_PRIOR = "_lh_prior"  # the key's previous change in the batch: (seq, live)
_NEXT_TS = "_lh_next_ts"  # the time of the key's next change in the batch
_BEFORE_IS_DELETE = "_lh_after_delete"  # the record before it in Kafka deletes its key


def with_batch_prior(changes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Each tombstone's previous state of its key from the batch itself (the last usable
    change of the key to arrive before it; null: none) and the time of the key's next change.
    Only the rows of keys that have a tombstone go through the window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keyed = [named(k) for k in keys]
    tombstoned = F.broadcast(changes.where(F.col(TOMBSTONE_ROW)).select(*keyed).distinct())
    involved = changes.join(tombstoned, list(keys), "left_semi")
    rest = changes.join(tombstoned, list(keys), "left_anti")
    by_arrival = Window.partitionBy(*keyed).orderBy(TOPIC, PARTITION, OFFSET)
    earlier = by_arrival.rowsBetween(Window.unboundedPreceding, -1)
    later = by_arrival.rowsBetween(1, Window.unboundedFollowing)
    usable = ~F.col(TOMBSTONE_ROW) & F.col(ERROR).isNull() & F.col(OP).isin(*UPSERT_OPS, DELETE)
    state = F.struct(F.col(SEQ).alias("seq"), F.col(OP).isin(*UPSERT_OPS).alias("live"))
    tombstone = F.col(TOMBSTONE_ROW)
    windowed = involved.select(
        *[named(c) for c in changes.columns],
        F.when(tombstone, F.last(F.when(usable, state), ignorenulls=True).over(earlier)).alias(
            _PRIOR
        ),
        F.when(tombstone, F.min(F.when(usable, F.col(TS))).over(later)).alias(_NEXT_TS),
    )
    none = rest.withColumn(_PRIOR, F.lit(None).cast(windowed.schema[_PRIOR].dataType))
    return windowed.unionByName(none.withColumn(_NEXT_TS, F.lit(None).cast("timestamp")))


def unresolved(changes: DataFrame) -> Column:
    """Tombstones with no previous change in the batch (after `with_batch_prior`)."""
    from pyspark.sql import functions as F

    return F.col(TOMBSTONE_ROW) & F.col(ERROR).isNull() & F.col(_PRIOR).isNull()


def after_deletes(tombstones: DataFrame, bronze: DataFrame) -> DataFrame:
    """Of `tombstones` (topic, partition, offset, raw key), those whose record just before
    them in their Kafka partition, in `bronze`, is a positioned delete of the same key."""
    from pyspark.sql import functions as F

    deletes = bronze.where((F.col(CDC_OP) == DELETE) & F.col(CDC_LSN).isNotNull()).select(
        F.col("topic").alias(TOPIC),
        F.col("partition").alias(PARTITION),
        (F.col("offset") + 1).alias(OFFSET),
        F.col("key").alias(RAW_KEY),
    )
    return tombstones.join(deletes, [TOPIC, PARTITION, OFFSET, RAW_KEY], "left_semi")


def resolve(
    changes: DataFrame,
    keys: Sequence[str],
    live: DataFrame | None = None,
    follow_deletes: DataFrame | None = None,
) -> DataFrame:
    """Tombstones (after `with_batch_prior`) as deletes at their key's previous position plus
    one, or left out when the key was not live before them. For tombstones first of their key
    in the batch: `follow_deletes` (topic, partition, offset of those that follow a delete of
    their key, from `after_deletes`) and `live` (silver's live rows, with `__seq`)."""
    from pyspark.sql import functions as F

    columns = [named(c) for c in changes.columns]
    if follow_deletes is not None:
        flagged = follow_deletes.select(TOPIC, PARTITION, OFFSET).withColumn(
            _BEFORE_IS_DELETE, F.lit(True)
        )
        changes = changes.join(F.broadcast(flagged), [TOPIC, PARTITION, OFFSET], "left")
    else:
        changes = changes.withColumn(_BEFORE_IS_DELETE, F.lit(None).cast("boolean"))
    changes = changes.select(*columns, _BEFORE_IS_DELETE)
    if live is not None:
        keyed = [named(k) for k in keys]
        wanted = F.broadcast(changes.where(unresolved(changes)).select(*keyed).distinct())
        current = live.join(wanted, list(keys), "left_semi").select(
            *keyed, F.col(TARGET_SEQ).alias("_lh_live_seq")
        )
        changes = changes.join(F.broadcast(current), list(keys), "left").select(
            *columns, _BEFORE_IS_DELETE, "_lh_live_seq"
        )
    else:
        changes = changes.withColumn("_lh_live_seq", F.lit(None).cast("long"))
    prior = F.col(_PRIOR)
    # The key's position before the tombstone, when it was live there.
    before = (
        F.when(prior.isNotNull(), F.when(prior["live"], prior["seq"]))
        .when(F.col(_BEFORE_IS_DELETE).isNotNull(), F.lit(None))
        .otherwise(F.col("_lh_live_seq"))
    )
    tombstone, usable = F.col(TOMBSTONE_ROW), F.col(ERROR).isNull()
    keep = ~tombstone | ~usable | before.isNotNull()
    at = F.least(F.col(TS), F.col(_NEXT_TS))
    return (
        changes.where(keep)
        .withColumn(SEQ, F.when(tombstone & usable, before + 1).otherwise(F.col(SEQ)))
        .withColumn(TS, F.when(tombstone, at).otherwise(F.col(TS)))
        .drop(_PRIOR, _NEXT_TS, _BEFORE_IS_DELETE, "_lh_live_seq")
    )
