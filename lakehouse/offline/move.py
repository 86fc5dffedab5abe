"""`realtime_to_offline`: closed time buckets of a realtime (silver) table move to its offline
table, then the time boundary advances (Pinot's RealtimeToOfflineSegmentsTask, on Delta).

A run:
1. reads the realtime table's Change Data Feed since the version the previous move read, to
   find *late* changes: changes to buckets already moved (Pinot never looks at a moved window
   again; we do). Their buckets move again, unless a backfill owns them: then the changes are
   counted, not applied (`lakehouse status` shows them). The gap of every backfill committed
   since the previous move planned moves again too (`guard.gaps_committed`): the backfill
   copied it from an older realtime version;
2. plans the move: every closed bucket (end plus buffer at or before now) from the boundary on,
   plus the late buckets, at one realtime version. The plan (`plans.Plan`) is recorded in
   `_system/offline_log` before the first commit;
3. replaces exactly those buckets of the offline table with the realtime table's current rows
   of that version, in one commit; a backfill that committed to any of them after the plan
   read the owned buckets is put back right after (`guard`);
4. moves the boundary to the end of the newest closed bucket; records the outcome.

Idempotent: the plan fixes the realtime version (read by time travel) and the buckets, and both
commits carry the plan's number as their Delta transaction, so a re-run, or a run after a crash
anywhere in between, redoes the unfinished plan and commits nothing twice.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakehouse.core import faults, tables
from lakehouse.core.jobs import base_parser
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import OfflineTableSettings, parse_duration
from lakehouse.core.streaming import check_trigger, repeat
from lakehouse.offline import audit, boundary, buckets, changes, gap, guard, plans, store
from lakehouse.offline.buckets import instant_argument
from lakehouse.offline.plans import JOB
from lakehouse.offline.store import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MoveOptions:
    table: str
    now: datetime | None = None  # default: the clock
    trigger: str = "available-now"
    interval: str = "1m"  # between runs with --trigger continuous


def move_parser() -> argparse.ArgumentParser:
    parser = base_parser(JOB, "closed time buckets of a realtime table -> its offline table")
    parser.add_argument("--table", required=True, help="an offline table from conf/*/offline.yml")
    parser.add_argument(
        "--now", type=instant_argument, help="judge closed buckets as of this instant"
    )
    parser.add_argument(
        "--interval", default="1m", help="with --trigger continuous: time between runs (1m)"
    )
    return parser


def options_from_args(args: argparse.Namespace) -> MoveOptions:
    return MoveOptions(args.table, args.now, args.trigger, args.interval)


def run(spark: SparkSession, settings: Settings, options: MoveOptions) -> None:
    """The job: one move (available-now), or one every interval (continuous); prints each."""
    try:
        seconds = parse_duration(options.interval)
    except ValueError as exc:
        raise SettingsError(f"--interval: {exc}") from None
    check_trigger(options.trigger)

    def one_run() -> None:
        for moved in move_all(spark, settings, options):
            print(describe(moved), flush=True)

    repeat(one_run, options.trigger, seconds)


def move_all(spark: SparkSession, settings: Settings, options: MoveOptions) -> list[MoveResult]:
    """A run's moves: a move a crash left unfinished is finished first (at the realtime version
    its plan fixed), then what closed or changed since moves too, so one available-now run
    leaves nothing closed behind."""
    results = [realtime_to_offline(spark, settings, options)]
    if results[0].resumed:
        results.append(realtime_to_offline(spark, settings, options))
    return results


@dataclass
class MoveResult:
    table: str
    plan: plans.Plan | None = None
    rows: dict[str, int] = field(default_factory=dict)  # bucket -> rows moved
    boundary_before: datetime | None = None
    boundary_after: datetime | None = None
    resumed: bool = False
    restored: set[datetime] = field(default_factory=set)  # buckets a backfill wrote meanwhile


def realtime_to_offline(
    spark: SparkSession, settings: Settings, options: MoveOptions
) -> MoveResult:
    """Move the closed buckets of offline table `options.table` (see the module docstring)."""
    spec = settings.offline_table(options.table)
    now = options.now if options.now is not None and options.trigger != "continuous" else None
    now = now or buckets.utc_now()
    off_path = store.offline_path(settings, options.table)
    realtime = store.read_realtime(spark, settings, options.table, spec)
    columns = store.row_schema(realtime.schema).fieldNames()
    if spec.time_column not in columns:
        raise SettingsError(
            f"offline.{options.table}.time_column {spec.time_column!r} is not a column of "
            f"silver.{spec.realtime} (columns: {', '.join(columns)})"
        )
    store.ensure_table(spark, off_path, realtime.schema)
    result = MoveResult(options.table)
    before = boundary.current(spark, settings, options.table)
    result.boundary_before = before.boundary if before else None
    pending, done = plans.progress(spark, settings, options.table)
    if pending is not None:
        plan, result.resumed = pending, True
        log.info("%s: resuming unfinished move %d", options.table, plan.n)
    else:
        planned = _plan(spark, settings, options.table, spec, now, before, done)
        if planned is None:
            result.boundary_after = result.boundary_before
            return result
        plan = planned
        audit.record_move(spark, settings, audit.MOVE_PLANNED, options.table, asdict(plan))
    result.plan = plan
    _execute(spark, settings, options.table, spec, plan, result)
    return result


def _plan(
    spark: SparkSession,
    settings: Settings,
    table: str,
    spec: OfflineTableSettings,
    now: datetime,
    before: boundary.Boundary | None,
    done: dict[str, Any] | None,
) -> plans.Plan | None:
    """The next move, or None when there is nothing to do (or a backfill's put-back that it
    finishes first raced it: the next run looks again from the same version)."""
    rt_path = store.realtime_path(settings, spec)
    version = tables.latest_version(spark, rt_path)
    start = before.boundary if before else None
    end = buckets.closed_until(now, spec.bucket_seconds, spec.buffer_seconds)
    if start is not None and end < start:
        end = start  # the clock is behind the boundary (a backfill or a hand set moved it)
    last_version = int(done["realtime_version"]) if done else None
    changed = changes.changed_buckets(spark, rt_path, spec, table, last_version, version)
    # The offline version first: a backfill committing after it is put back (`guard`).
    off_path = store.offline_path(settings, table)
    offline_version = tables.latest_version(spark, off_path)
    announced = audit.announcements(spark, settings, table)
    owned = audit.owned_buckets(spark, settings, table, spec.bucket_seconds, announced)
    moved_before = [b for b in changed if start is not None and b < start]
    since = plans.planned_at(done)
    # The backfills committed, or put back, since the previous plan (None: ever): one log read.
    commits = guard.txn_commits(spark, off_path, -1 if since is None else since, offline_version)
    runs = guard.backfill_runs(commits)
    if not gap.finish_killed(spark, settings, table, runs, announced):
        log.warning("%s: a backfill's put-back raced this move; the next run finishes it", table)
        return None
    # A backfill's gap came from an older realtime version than this one: move it again.
    regap = guard.gaps_committed(announced, runs)
    late = sorted(b for b in moved_before if b not in owned)
    regap -= {*late, *owned}
    ignored = {b.isoformat(): changed[b] for b in sorted(moved_before) if b in owned}
    idle = last_version == version and start is not None and end <= start
    if idle and not late and not regap:
        return None
    n = int(done["n"]) + 1 if done else 1
    return plans.Plan(
        n=n,
        realtime_version=version,
        range_start=start.isoformat() if start else None,
        range_end=end.isoformat(),
        late=[b.isoformat() for b in late],
        regap=[b.isoformat() for b in sorted(regap)],
        ignored=ignored,
        offline_version=offline_version,
        owned=[b.isoformat() for b in sorted(owned)],
        owned_through=offline_version,
    )


def _execute(
    spark: SparkSession,
    settings: Settings,
    table: str,
    spec: OfflineTableSettings,
    plan: plans.Plan,
    result: MoveResult,
) -> None:
    """Commit the plan: the offline buckets, then the boundary, then the record."""
    from pyspark.sql import functions as F

    rt_path, off_path = store.realtime_path(settings, spec), store.offline_path(settings, table)
    txn = (plans.app_id(table), plan.n)
    if plan.replaces_buckets:
        owned = (
            {plans.at(b) for b in plan.owned}
            if plan.owned is not None
            else audit.owned_buckets(spark, settings, table, spec.bucket_seconds)
        )
        announced = audit.announcements(spark, settings, table)
        # A backfill committed since the plan wins: the write leaves its window out. Only
        # while the write is to come: a resume after it cannot tell which backfills that look
        # saw, so the restore below puts back every backfill committed before the write (a
        # window the write had left out is rewritten as it was: same rows, one more commit).
        if plan.offline_version is not None:
            commits = guard.commits_since(spark, off_path, plan.offline_version)
            if txn not in commits:
                owned |= guard.backfilled_in(commits, announced, spec.bucket_seconds)
        where = plan.buckets_sql(owned)
        rows = store.realtime_rows(spark, rt_path, plan.realtime_version, spec).where(F.expr(where))
        columns = spark.read.format("delta").load(off_path).columns
        rows = rows.select(*[f"`{c}`" for c in columns if c in rows.columns])
        counts = rows.groupBy(BUCKET).count().collect()
        result.rows = {r[BUCKET].isoformat(): int(r["count"]) for r in counts}
        store.replace_where(rows, off_path, where, *txn)
        if plan.offline_version is not None:
            result.restored = guard.restore_backfills(
                spark,
                off_path,
                announced,
                plan.offline_version,
                txn,
                lambda b: plan.replaces(b, owned),
                spec.bucket_seconds,
            )
    faults.point("after_offline_commit")
    end = plans.at(plan.range_end)
    # Forward only: a boundary already at `end` or past it (a resume, a backfill) is kept.
    moved = boundary.move(
        spark,
        settings,
        table,
        end,
        JOB,
        f"move-{plan.n}",
        tables.latest_version(spark, off_path),
        reason="closed buckets moved",
        txn=txn,
    )
    faults.point("after_boundary_commit")
    result.boundary_after = moved.boundary
    audit.record_move(
        spark,
        settings,
        audit.MOVED,
        table,
        {
            "n": plan.n,
            "realtime_version": plan.realtime_version,
            "offline_version": tables.latest_version(spark, off_path),
            "planned_offline_version": plan.offline_version,
            "rows": result.rows,
            "late": plan.late,
            "regap": plan.regap,
            "ignored": plan.ignored,
            "boundary": moved.boundary.isoformat(),
        },
    )


def describe(result: MoveResult) -> str:
    """The line the job prints for a move (two after a crash: the resumed move, then the new)."""
    if result.plan is None:
        return f"offline.{result.table}: nothing to move (boundary {_show(result.boundary_after)})"
    moved = sum(result.rows.values())
    ignored = sum(result.plan.ignored.values())
    regap = result.plan.regap
    return (
        f"offline.{result.table}: {'resumed move' if result.resumed else 'move'} "
        f"{result.plan.n} at realtime version {result.plan.realtime_version}: {moved} row(s) in "
        f"{len(result.rows)} bucket(s), {len(result.plan.late)} late bucket(s) moved again"
        + (f", {len(regap)} backfill gap bucket(s) moved again" if regap else "")
        + (f", {ignored} late change(s) to backfilled buckets not applied" if ignored else "")
        + f"; boundary {_show(result.boundary_before)} -> {_show(result.boundary_after)}"
    )


def _show(at: datetime | None) -> str:
    return at.isoformat() if at else "none"
