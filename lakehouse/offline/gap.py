"""The gap of a backfill whose window starts after the time boundary: the buckets in between
move from the realtime table in the backfill's own commit, so the view has no gap when the
boundary moves to the window's end. They are read at the realtime version of the backfill's
start; a move that commits them meanwhile wrote them from a newer one, and the next move reads
changes only since that, so the backfill puts them back as the move left them (`keep_moved`).
Whatever still races with that, the next move moves the gap again (`guard.gaps_committed`)."""

from __future__ import annotations

from datetime import datetime
from functools import cache, partial
from typing import TYPE_CHECKING

from lakehouse.core import columns, tables
from lakehouse.core.settings import Settings
from lakehouse.core.specs import OfflineTableSettings
from lakehouse.offline import audit, guard, move, store
from lakehouse.offline.store import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def with_gap(
    spark: SparkSession,
    rt_path: str,
    spec: OfflineTableSettings,
    rows: DataFrame,
    boundary_at: datetime | None,
    window_start: datetime,
    owned: set[datetime],
) -> tuple[DataFrame, list[datetime]]:
    """The rows to write: the input, plus the realtime rows of the buckets between the
    boundary and the window's start when the window starts after the boundary."""
    from pyspark.sql import functions as F

    if boundary_at is not None and window_start <= boundary_at:
        return rows, []
    version = tables.latest_version(spark, rt_path)
    realtime = store.realtime_rows(spark, rt_path, version, spec)
    below = F.col(BUCKET) < F.lit(window_start)
    if boundary_at is not None:
        below = below & (F.col(BUCKET) >= F.lit(boundary_at))
    moved = realtime.where(below & ~store.in_buckets(sorted(owned)))
    starts = sorted(r[BUCKET] for r in moved.select(BUCKET).distinct().collect())
    return rows.unionByName(moved.select(*[columns.named(c) for c in rows.columns])), starts


def keep_moved(
    spark: SparkSession,
    settings: Settings,
    table: str,
    txn: guard.Txn,
    since: int,
    gap: list[datetime],
) -> list[datetime]:
    """The gap buckets a move committed while this backfill ran, put back as the move left them
    (`guard.restore_moves`). A rerun after a crash finds its commit before `since` (Delta
    skipped the write as done): the first announcement tells what that commit wrote."""
    off_path = store.offline_path(settings, table)
    announced = cache(partial(audit.announced_backfills, spark, settings, table))
    if txn not in guard.commits_since(spark, off_path, since):
        mine = [a for a in announced() if a.txn == txn]
        first = min(mine, key=lambda a: a.offline_version, default=None)
        since, gap = (first.offline_version, list(first.gap)) if first else (since, [])
    restored = guard.restore_moves(
        spark,
        off_path,
        since,
        txn,
        move.app_id(table),
        move.plan_replaces(spark, settings, table),
        gap,
        announced,
        settings.offline_table(table).bucket_seconds,
    )
    return sorted(restored)
