"""The gap of a backfill whose window starts after the time boundary: the buckets in between
move from the realtime table in the backfill's own commit, so the view has no gap when the
boundary moves to the window's end. They are read at the realtime version of the backfill's
start; a move that commits them meanwhile wrote them from a newer one, and the next move reads
changes only since that, so the backfill puts them back as the move left them (`keep_moved`).
Whatever still races with that, the next move moves the gap again (`guard.gaps_committed`)."""

from __future__ import annotations

from datetime import datetime
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
    skipped the write as done): the first announcement tells what that commit wrote. A rerun
    under a new transaction (another backfill was recorded in between) finishes the put-backs
    of the earlier runs of the same input too (`_unfinished`)."""
    off_path = store.offline_path(settings, table)
    announced = audit.announcements(spark, settings, table)
    if txn not in guard.commits_since(spark, off_path, since):
        first = _first_announcement(announced(), txn)
        since, gap = (first.offline_version, list(first.gap)) if first else (since, [])
    earlier = _unfinished(spark, settings, table, txn, announced() if txn[1] > 1 else [])
    runs = [
        # Not over this run's gap: its rows were read from a newer realtime version.
        *((a.txn, a.offline_version, sorted(set(a.gap) - set(gap))) for a in earlier),
        (txn, since, gap),
    ]
    restored: set[datetime] = set()
    for run_txn, run_since, run_gap in runs:  # the earlier runs first
        restored |= guard.restore_moves(
            spark,
            off_path,
            run_since,
            run_txn,
            move.app_id(table),
            move.plan_replaces(spark, settings, table),
            run_gap,
            announced,
            settings.offline_table(table).bucket_seconds,
        )
    return sorted(restored)


def _first_announcement(announced: list[guard.Announced], txn: guard.Txn) -> guard.Announced | None:
    """A run's first announcement: a rerun under the same transaction announces again."""
    mine = [a for a in announced if a.txn == txn]
    return min(mine, key=lambda a: a.offline_version, default=None)


def _unfinished(
    spark: SparkSession,
    settings: Settings,
    table: str,
    txn: guard.Txn,
    announced: list[guard.Announced],
) -> list[guard.Announced]:
    """The first announcement of each earlier run of the same input (the same appId) that has no
    `backfill_log` record: killed, perhaps after its commit and before its put-backs finished.
    (A recorded run finished them; `restore_moves` does nothing for a run that never
    committed, and its put-backs are idempotent.)"""
    from pyspark.sql import functions as F

    digest = txn[0].rsplit(":", 1)[-1]
    earlier = {a.txn for a in announced if a.txn[0] == txn[0] and a.txn[1] < txn[1]}
    if not earlier:
        return []
    runs = audit.backfills(spark, settings, table).where(F.col("content_hash").startswith(digest))
    recorded = {int(r["seq"]) for r in runs.select("seq").collect()}
    firsts = (_first_announcement(announced, t) for t in sorted(earlier) if t[1] not in recorded)
    return [a for a in firsts if a is not None]
