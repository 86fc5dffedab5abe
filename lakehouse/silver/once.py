"""A refine batch's quarantine and metrics appends, each once per stream and batch, without
Delta's transaction look-up on every batch.

Delta's idempotent write (`tables.append_once`: `txnAppId`/`txnVersion`) asks the table for
the version the id last committed, which Delta 4.0 answers only by rebuilding the snapshot's
state; the quarantine and metrics tables are shared by every refine job, so each commit makes
a new snapshot and every batch rebuilt both: 21% of a small batch (bench/README.md, "the
quarantine and metrics appends checked once per query"). Yet only a query's first batch can
be a replay: Spark re-runs, once and first, the batch its offset log holds and its commit log
lacks. So the first batch looks for its own rows (`committed`: the table, run and batch,
written at or after Spark planned the batch, which tells them from an earlier stream's rows
of the same batch id after a lost checkpoint) and every later batch appends plainly. A batch
whose stream is unknown (a caller outside refine's query) keeps Delta's look-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.core import fs, tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.silver.plan import Plan


@dataclass(frozen=True)
class FirstBatch:
    """A query's first batch, the only one that may have been tried before: its id and when
    Spark planned it (the offset log's `batchTimestampMs`, kept when the batch is re-run)."""

    batch_id: int
    planned_ms: int


def first_batch(spark: SparkSession, checkpoint: str, batch_id: int) -> FirstBatch:
    """`batch_id` as the first batch of the query of `checkpoint` (from its offset log)."""
    planned_ms = fs.offset_log(spark, checkpoint, batch_id).metadata["batchTimestampMs"]
    return FirstBatch(batch_id, int(planned_ms))


def append(
    spark: SparkSession, rows: DataFrame, path: str, plan: Plan, batch_id: int, written_at: str
) -> None:
    """Append `rows` (the batch's quarantined rows or metrics: columns `table`, `run_id`,
    `batch_id` and `written_at`, the time of the write) to `path` once for the stream."""
    first = plan.first_batch
    if first is None:
        tables.append_once(rows, path, plan.app_id, batch_id)
        return
    if batch_id == first.batch_id and committed(
        spark, path, plan.name, plan.run_id, batch_id, written_at, first.planned_ms
    ):
        return
    rows.write.format("delta").mode("append").save(path)


def committed(
    spark: SparkSession,
    path: str,
    table: str,
    run_id: str,
    batch_id: int,
    written_at: str,
    planned_ms: int,
) -> bool:
    """Whether `path` holds a row of the table's run and batch written at or after
    `planned_ms`: an earlier try of this very batch (files older than that are skipped by
    their statistics, so this reads little even of a long history)."""
    from pyspark.sql import functions as F

    if not tables.exists(spark, path):
        return False
    found = (
        spark.read.format("delta")
        .load(path)
        .where(
            (F.col(written_at) >= F.timestamp_millis(F.lit(planned_ms)))
            & (F.col("table") == table)
            & (F.col("run_id") == run_id)
            & (F.col("batch_id") == batch_id)
        )
    )
    return bool(found.take(1))
