"""A CDC batch's tombstones and unchanged-TOAST placeholders resolved against silver as the
batch found it (`lakehouse.silver.batch.refine_batch` calls these on the batch's records; the
pure DataFrame -> DataFrame rules are in `tombstones` and `toast`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.core import current, tables
from lakehouse.silver import toast, tombstones
from lakehouse.silver import transform as silver
from lakehouse.silver.plan import Plan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def silver_as_found(spark: SparkSession, plan: Plan, batch_id: int) -> DataFrame:
    """Silver as this batch found it. A batch rerun after its silver commit (killed before
    its checkpoint's) must not resolve tombstones and placeholders against its own MERGE: it
    would quarantine and count differently from the first run. It reads the version before."""
    reader = spark.read.format("delta")
    own = tables.first_commit_of(spark, plan.path, plan.app_id, batch_id)
    if own is not None:
        log.info("silver.%s: batch %s reads silver as of version %s", plan.name, batch_id, own - 1)
        reader = reader.option("versionAsOf", own - 1)
    return reader.load(plan.path)


def tombstones_as_deletes(
    spark: SparkSession, plan: Plan, records: DataFrame, target: DataFrame
) -> DataFrame:
    """Tombstones as deletes (see `lakehouse.silver.tombstones`): bronze (the record before
    each) and silver are read only for tombstones that are first of their key in the batch."""
    from pyspark.sql import functions as F

    keys = plan.table.keys
    # Parsed once and cut from its plan: the windows and joins below read it several times,
    # and on the parse's wide expressions Spark's optimizer ran out of memory.
    records = tombstones.with_batch_prior(records.localCheckpoint(), keys).localCheckpoint()
    first = records.where(tombstones.unresolved(records)).select(
        silver.TOPIC, silver.PARTITION, silver.OFFSET, silver.RAW_KEY
    )
    ranges = first.groupBy(silver.TOPIC, silver.PARTITION).agg(
        F.min(silver.OFFSET).alias("lo"), F.max(silver.OFFSET).alias("hi")
    )
    bounds = ranges.collect()
    if not bounds:
        return tombstones.resolve(records, keys).localCheckpoint()
    near = F.lit(False)  # the records just before them: by offset, so Delta skips files
    for topic, partition, lo, hi in bounds:
        near = near | (
            (F.col("topic") == topic)
            & (F.col("partition") == partition)
            & F.col("offset").between(lo - 1, hi - 1)
        )
    bronze = (
        spark.read.format("delta")
        .load(plan.bronze_path)
        .where((F.col("source") == plan.table.source) & near)
    )
    follow = tombstones.after_deletes(first, bronze)
    live = current.live_rows(target)
    return tombstones.resolve(records, keys, live, follow).localCheckpoint()


def unchanged_toast(
    plan: Plan, records: DataFrame, columns: Sequence[str], target: DataFrame
) -> DataFrame:
    """Unchanged-TOAST placeholders in `columns` take the key's previous value (see
    `silver.toast.resolve_unchanged_toast`) in `target` (silver as the batch found it)."""
    live = current.live_rows(target)
    resolved = toast.resolve_unchanged_toast(
        records.localCheckpoint(), live, plan.table.keys, columns
    )
    return resolved.localCheckpoint()  # a flat plan for the rules, stats and MERGE after
