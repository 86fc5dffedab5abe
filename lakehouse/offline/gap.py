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
from lakehouse.offline import audit, guard, plans, store
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
    announced: guard.Announcements,
) -> list[datetime]:
    """The gap buckets a move committed while this backfill ran, put back as the move left them
    (`guard.restore_moves`). A rerun after a crash finds its commit before `since` (Delta
    skipped the write as done): the first announcement tells what that commit wrote. A rerun
    under a new transaction (another backfill was recorded in between) finishes the put-backs
    of its killed earlier runs too (`_unfinished`); their buckets are among those returned."""
    off_path = store.offline_path(settings, table)
    if txn not in guard.commits_since(spark, off_path, since):
        first = guard.first_announcement(announced(), txn)
        since, gap = (first.offline_version, list(first.gap)) if first else (since, [])
    earlier = _unfinished(spark, settings, table, txn, announced() if txn[1] > 1 else [])
    # The earlier runs first: Delta skips a put-back under `<appId>:restore` whose seq is not
    # above the last one committed, so a later run's would make theirs a silent no-op.
    runs = [*((a.txn, a.offline_version, list(a.gap)) for a in earlier), (txn, since, gap)]
    replaced = plans.plan_replaces(spark, settings, table)
    restored: set[datetime] = set()
    for run_txn, run_since, run_gap in runs:
        keep_out = frozenset(gap) if run_txn != txn else frozenset()
        restored |= guard.restore_moves(
            spark,
            off_path,
            run_since,
            run_txn,
            plans.app_id(table),
            replaced,
            run_gap,
            announced,
            settings.offline_table(table).bucket_seconds,
            # Not over this run's gap: its rows were read from a newer realtime version.
            keep_out,
        )
    return sorted(restored)


def finish_killed(
    spark: SparkSession,
    settings: Settings,
    table: str,
    runs: set[guard.Txn],
    announced: guard.Announcements,
) -> bool:
    """A backfill killed anywhere after its commit, and perhaps never rerun, left put-backs
    undone (`keep_moved`): older rows in buckets a backfill owns, which no move rewrites. The
    next move finishes them before it plans: for each backfill among `runs` (committed, or put
    back, since its predecessor planned: `guard.backfill_runs`), its latest run there and
    that run's unfinished earlier runs, as its own rerun would (idempotent under the same
    transactions; a backfill still running and doing the same is harmless). A run recorded
    as applied is skipped: its record comes after its put-backs (an idle move, whose
    predecessor's plan stays, would otherwise redo them on each poll). False on a write
    conflict (a backfill committing to those buckets): the move then waits for its next run,
    which looks again from the same version."""
    latest: dict[str, int] = {}
    for app, seq in runs:
        latest[app] = max(seq, latest.get(app, seq))
    if not latest:
        return True
    applied = audit.backfills(spark, settings, table).where("status = 'applied'")
    finished = {audit.run_txn(table, r) for r in applied.select(*audit.RUN_COLUMNS).collect()}
    for txn in sorted(latest.items() - finished):
        first = guard.first_announcement(announced([txn]), txn)
        if first is None:
            continue  # not announced: not a backfill's
        try:
            keep_moved(
                spark, settings, table, txn, first.offline_version, list(first.gap), announced
            )
        except Exception as exc:
            if not tables.is_write_conflict(exc):
                raise
            return False
    return True


def _unfinished(
    spark: SparkSession,
    settings: Settings,
    table: str,
    txn: guard.Txn,
    announced: list[guard.Announced],
) -> list[guard.Announced]:
    """The first announcement of each earlier run of this backfill (the same input over the
    same window: the same appId) that has no record as applied: killed, perhaps after its
    commit and before its put-backs finished. However many backfills were recorded since, a
    committed one owns its window for good (`audit.owned_buckets`), so its put-backs are
    due; `restore_moves` does nothing for a run that never committed, and its put-backs are
    idempotent. (Each such run costs a read of the Delta log since its start: a rerun of the
    same input over the same window after a kill is rare.)"""
    from pyspark.sql import functions as F

    earlier = {a.txn for a in announced if a.txn[0] == txn[0] and a.txn[1] < txn[1]}
    if not earlier:
        return []
    recorded = audit.backfills(spark, settings, table)
    digest = txn[0].split(":")[-2]
    window_from, window_to = next(a.window for a in announced if a.txn in earlier)
    mine = recorded.where(
        (F.col("status") == "applied")
        & F.col("content_hash").startswith(digest)
        & (F.col("window_from") == F.lit(window_from))
        & (F.col("window_to") == F.lit(window_to))
    )
    applied = {int(r["seq"]) for r in mine.select("seq").collect()}
    runs = sorted(t for t in earlier if t[1] not in applied)
    return [a for a in (guard.first_announcement(announced, t) for t in runs) if a is not None]
