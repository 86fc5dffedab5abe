"""CDC tombstones as deletes. A tombstone is a key with no value and no source position.
After a Debezium delete (`tombstones.on.delete`, or ExtractNewRecordState's
`rewrite-with-tombstone`) it repeats that delete; under the SMT's default delete handling
(`delete.tombstone.handling.mode=tombstone`) the delete itself is dropped and the tombstone is
the only trace of it. Either way it means: the key's state just before it, in Kafka order
(one partition per key), is deleted.

So a tombstone whose key's previous change (earlier in the batch by arrival, else silver's
live row) is an upsert at position `p` becomes a delete at `p + 1`: after that change and
before the key's next one (a PostgreSQL LSN names a WAL byte and WAL records are at least 24
bytes apart, so no real change sits at `p + 1`). A tombstone whose key was already deleted,
or was never seen, changes nothing and is left out, so the tombstone that follows a delete
is a no-op. Pure DataFrame -> DataFrame; `lakehouse.silver.batch` reads silver's live rows.

Limit: a replay of bronze into a silver table that is already ahead of it (its own later
changes applied) resolves a tombstone with no earlier change in the replayed batch against
that later state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.core.current import TARGET_SEQ
from lakehouse.silver.changes import DELETE, OP, SEQ, UPSERT_OPS
from lakehouse.silver.transform import ERROR, OFFSET, PARTITION, TOMBSTONE_ROW, TOPIC

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_PRIOR = "_lh_prior"  # the key's previous change in the batch: (seq, is_upsert)


def with_batch_prior(changes: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Each tombstone's previous state of its key from the batch itself: the usable change of
    that key with the highest position among those that arrived before it (null: none)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    earlier = (
        Window.partitionBy(*[F.col(f"`{k}`") for k in keys])
        .orderBy(TOPIC, PARTITION, OFFSET)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    usable = ~F.col(TOMBSTONE_ROW) & F.col(ERROR).isNull() & F.col(OP).isin(*UPSERT_OPS, DELETE)
    state = F.struct(F.col(SEQ).alias("seq"), F.col(OP).isin(*UPSERT_OPS).alias("live"))
    prior = F.when(F.col(TOMBSTONE_ROW), F.max(F.when(usable, state)).over(earlier))
    return changes.withColumn(_PRIOR, prior)


def unresolved(changes: DataFrame) -> Column:
    """Tombstones with no previous change in the batch (after `with_batch_prior`): their key's
    state is silver's."""
    from pyspark.sql import functions as F

    return F.col(TOMBSTONE_ROW) & F.col(ERROR).isNull() & F.col(_PRIOR).isNull()


def resolve(changes: DataFrame, live: DataFrame | None, keys: Sequence[str]) -> DataFrame:
    """Tombstones (after `with_batch_prior`) as deletes at their key's previous position plus
    one, or left out when the key was not live before them. `live`: silver's live rows (with
    `__seq`), or None when no tombstone needs them."""
    from pyspark.sql import functions as F

    columns = changes.columns
    if live is not None:
        wanted = F.broadcast(changes.where(unresolved(changes)).select(*keys).distinct())
        current = live.join(wanted, list(keys), "left_semi").select(
            *[F.col(f"`{k}`") for k in keys], F.col(TARGET_SEQ).alias("_lh_live_seq")
        )
        changes = changes.join(F.broadcast(current), list(keys), "left").select(
            *[F.col(f"`{c}`") for c in columns], "_lh_live_seq"
        )
    else:
        changes = changes.withColumn("_lh_live_seq", F.lit(None).cast("long"))
    prior = F.col(_PRIOR)
    # The key's position before the tombstone, when it was live there.
    before = F.when(prior.isNotNull(), F.when(prior["live"], prior["seq"])).otherwise(
        F.col("_lh_live_seq")
    )
    tombstone, usable = F.col(TOMBSTONE_ROW), F.col(ERROR).isNull()
    keep = ~tombstone | ~usable | before.isNotNull()
    return (
        changes.where(keep)
        .withColumn(SEQ, F.when(tombstone & usable, before + 1).otherwise(F.col(SEQ)))
        .drop(_PRIOR, "_lh_live_seq")
    )
