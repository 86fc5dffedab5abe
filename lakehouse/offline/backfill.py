"""`backfill`: corrected records replace whole closed buckets of an offline table in ONE Delta
commit (Pinot's segment replace, done as a `replaceWhere` overwrite of exactly the window's
partitions), and the time boundary follows the newest offline data.

Rules:
- The window `[from, to)` lies on bucket edges and is closed (`to` plus the buffer is at or
  before now), so a backfill never touches a bucket the streaming path still writes.
- The input is checked first (`backfill_input`); any problem refuses the whole backfill before
  anything is written. `--dry-run` prints the plan (per bucket: rows before and after, rows only
  before and only after) and writes nothing.
- A window after the boundary may be backfilled: the buckets between the boundary and the
  window's start move from the realtime table in the same commit (so the view has no gap),
  and the boundary moves to the window's end.
- The buckets of the window are then owned by the backfill: `realtime_to_offline` does not move
  them again and reports late realtime changes to them instead of applying them. The window is
  announced (`_system/offline_log`) before the commit, so a move running at the same time
  never undoes it (`guard`).
- Every run is recorded in `_system/backfill_log`; the same input over the same window,
  replayed while it is still the window's latest backfill, is a no-op (and recorded as one).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.core import faults, tables
from lakehouse.core.columns import named
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.core.specs import OfflineTableSettings
from lakehouse.offline import audit, backfill_input, boundary, buckets, gap, guard, store
from lakehouse.offline.backfill_input import BackfillRefused, Check
from lakehouse.offline.store import BUCKET

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

JOB = "backfill"


@dataclass(frozen=True)
class BackfillOptions:
    table: str
    input: str
    start: datetime  # --from
    end: datetime  # --to
    format: str | None = None
    dry_run: bool = False
    reason: str = ""
    now: datetime | None = None


@dataclass
class BucketDiff:
    before: int = 0
    after: int = 0
    only_before: int = 0
    only_after: int = 0


@dataclass
class BackfillReport:
    table: str
    status: str  # applied | no-op | dry-run
    start: datetime
    end: datetime
    content_hash: str = ""
    buckets: dict[datetime, BucketDiff] = field(default_factory=dict)
    gap: list[datetime] = field(default_factory=list)  # buckets moved from realtime with it
    # Of those (or of a killed earlier run's), the buckets a move committed while it ran:
    # they keep the move's newer rows.
    kept_moved: list[datetime] = field(default_factory=list)
    rule_failures: dict[str, int] = field(default_factory=dict)
    boundary_before: datetime | None = None
    boundary_after: datetime | None = None
    offline_version_before: int = -1
    offline_version_after: int = -1

    def render(self) -> str:
        lines = [
            f"backfill of offline.{self.table} [{self.start.isoformat()}, "
            f"{self.end.isoformat()}): {self.status}; input hash {self.content_hash[:16]}",
            "  bucket                 before   after   only_before  only_after",
            *(
                f"  {b.isoformat():<21}{d.before:>7} {d.after:>7} {d.only_before:>13} "
                f"{d.only_after:>11}"
                for b, d in sorted(self.buckets.items())
            ),
            f"  rows before {sum(d.before for d in self.buckets.values())}, after "
            f"{sum(d.after for d in self.buckets.values())}; offline version "
            f"{self.offline_version_before} -> {self.offline_version_after}",
            f"  boundary {_show(self.boundary_before)} -> {_show(self.boundary_after)}",
        ]
        if self.gap:
            lines.append(
                f"  {len(self.gap)} bucket(s) between the boundary and the window move from "
                "the realtime table in the same commit"
            )
        if self.kept_moved:
            lines.append(
                f"  {len(self.kept_moved)} gap bucket(s) a move committed while this backfill "
                "(or its killed earlier run) ran keep the move's newer rows, put back in one "
                "more commit"
            )
        if any(self.rule_failures.values()):
            lines.append(f"  expectation failures (warn/drop): {self.rule_failures}")
        return "\n".join(lines)


def backfill_parser() -> argparse.ArgumentParser:
    from lakehouse.core.jobs import base_parser

    parser = base_parser(JOB, "corrected records replace closed buckets of an offline table")
    parser.add_argument("--table", required=True, help="an offline table from conf/*/offline.yml")
    parser.add_argument("--input", required=True, help="Delta table, Parquet, JSON lines or CSV")
    parser.add_argument(
        "--from", dest="start", required=True, type=buckets.instant_argument, help="window start"
    )
    parser.add_argument(
        "--to", dest="end", required=True, type=buckets.instant_argument, help="window end"
    )
    parser.add_argument("--format", choices=backfill_input.FORMATS, help="override the guess")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.add_argument("--reason", default="", help="why; kept in _system/backfill_log")
    parser.add_argument(
        "--now", type=buckets.instant_argument, help="the time to judge closed buckets by"
    )
    return parser


def options_from_args(args: argparse.Namespace) -> BackfillOptions:
    return BackfillOptions(
        args.table,
        args.input,
        args.start,
        args.end,
        args.format,
        args.dry_run,
        args.reason,
        args.now,
    )


def run(spark: SparkSession, settings: Settings, options: BackfillOptions) -> None:
    """The job: one backfill (or its plan, with --dry-run), printed."""
    print(backfill(spark, settings, options).render(), flush=True)


def backfill(spark: SparkSession, settings: Settings, options: BackfillOptions) -> BackfillReport:
    spec = settings.offline_table(options.table)
    _check_window(options, spec)
    rt_path = store.realtime_path(settings, spec)
    off_path = store.offline_path(settings, options.table)
    realtime = store.read_realtime(spark, settings, options.table, spec)
    store.ensure_table(spark, off_path, realtime.schema)
    rows, digest, failures = _checked_input(spark, settings, options, spec, realtime.schema)
    report = BackfillReport(options.table, "dry-run", options.start, options.end, digest)
    report.rule_failures = failures
    before = boundary.current(spark, settings, options.table)
    report.boundary_before = before.boundary if before else None
    report.offline_version_before = tables.latest_version(spark, off_path)
    announced = audit.announcements(spark, settings, options.table)
    owned = audit.owned_buckets(spark, settings, options.table, spec.bucket_seconds, announced)
    gap_start = before.boundary if before else None
    new_rows, report.gap = gap.with_gap(spark, rt_path, spec, rows, gap_start, options.start, owned)
    where = _predicate(options, report.gap)
    offline = spark.read.format("delta").load(off_path).where(where)
    report.buckets = _diff(offline, new_rows, options, report.gap, spec)
    report.boundary_after = _new_boundary(report.boundary_before, options.end)
    report.offline_version_after = report.offline_version_before
    if options.dry_run:
        return report
    seq = audit.backfills(spark, settings, options.table).count() + 1
    window = (options.start, options.end)
    if audit.is_replay(spark, settings, options.table, window, digest, announced):
        report.status = "no-op"
        report.boundary_after = report.boundary_before
        _record(spark, settings, options, report, seq, spec)
        return report
    txn = (guard.backfill_app(options.table, digest, window), seq)
    columns = spark.read.format("delta").load(off_path).columns
    since = report.offline_version_before  # read before the gap's realtime rows
    # A backfill committed since this one read the gap owns its window: look again, as a move
    # does, and leave it out (one committing after this look is put back: `gap.keep_moved`).
    taken = guard.backfilled_in(
        guard.commits_since(spark, off_path, since), announced, spec.bucket_seconds
    ) & set(report.gap)
    if taken:
        report.gap = sorted(set(report.gap) - taken)
        report.buckets = {b: d for b, d in report.buckets.items() if b not in taken}
        new_rows = new_rows.where(~store.in_buckets(sorted(taken)))
        where = _predicate(options, report.gap)
    audit.announce_backfill(spark, settings, options.table, txn, window, since, report.gap, owned)
    store.replace_where(new_rows.select(*[f"`{c}`" for c in columns]), off_path, where, *txn)
    report.kept_moved = gap.keep_moved(
        spark, settings, options.table, txn, since, report.gap, announced
    )
    faults.point("after_offline_commit")
    report.offline_version_after = tables.latest_version(spark, off_path)
    if report.boundary_after != report.boundary_before and report.boundary_after is not None:
        # A move may have advanced the boundary past the window since this run read it.
        report.boundary_after = boundary.move(
            spark,
            settings,
            options.table,
            report.boundary_after,
            JOB,
            f"backfill-{seq}",
            report.offline_version_after,
            options.reason or "backfill",
            txn=txn,
        ).boundary
    report.status = "applied"
    _record(spark, settings, options, report, seq, spec)
    return report


def _check_window(options: BackfillOptions, spec: OfflineTableSettings) -> None:
    bucket = spec.bucket_seconds
    for flag, at in (("--from", options.start), ("--to", options.end)):
        if not buckets.is_edge(at, bucket):
            raise UsageError(
                f"{flag} {at.isoformat()} is not on a bucket edge of offline.{options.table} "
                f"(buckets of {spec.bucket}); e.g. {buckets.floor(at, bucket).isoformat()}"
            )
    if options.end <= options.start:
        raise UsageError(f"--to {options.end.isoformat()} must be after --from")
    now = options.now or buckets.utc_now()
    closes = buckets.closes_at(options.end, spec.buffer_seconds)
    if closes > now:
        raise UsageError(
            f"the window [{options.start.isoformat()}, {options.end.isoformat()}) is not closed "
            f"yet: it closes at {closes.isoformat()} (its end plus the {spec.buffer} buffer), in "
            f"{closes - now}; realtime data may still arrive for it. Run the backfill after that"
        )


def _checked_input(
    spark: SparkSession,
    settings: Settings,
    options: BackfillOptions,
    spec: OfflineTableSettings,
    realtime: StructType,
) -> tuple[DataFrame, str, dict[str, int]]:
    """The input's rows with their buckets (cached), its content hash and the failures per
    warn/drop rule; refuses the backfill on any failed check."""
    schema = store.row_schema(realtime)
    kind = options.format or backfill_input.guess_format(spark, options.input)
    silver = settings.silver_table(spec.realtime)
    conformed, columns_check = backfill_input.read(
        spark, options.input, kind, schema, silver.encodings
    )
    conformed = conformed.persist()
    checks: list[Check | None] = [columns_check, backfill_input.check_values(conformed, schema)]
    rows = backfill_input.with_buckets(
        conformed.select(*[f"`{f.name}`" for f in schema.fields]), spec
    )
    checks.append(backfill_input.check_window(rows, spec, options.start, options.end))
    checks.append(backfill_input.check_keys(rows, silver.keys))
    kept, refusing, failures = backfill_input.check_rules(rows, silver)
    problems = [c for c in [*checks, *refusing] if c is not None]
    if problems:
        conformed.unpersist()
        raise BackfillRefused(options.table, problems)
    kept = kept.persist()
    digest = backfill_input.content_hash(kept, schema.fieldNames())
    return kept, digest, failures


def _predicate(options: BackfillOptions, gap_starts: list[datetime]) -> str:
    window = (
        f"({BUCKET} >= {buckets.timestamp_sql(options.start)} AND "
        f"{BUCKET} < {buckets.timestamp_sql(options.end)})"
    )
    return f"{window} OR {store.bucket_predicate_sql(gap_starts)}" if gap_starts else window


def _diff(
    offline: DataFrame,
    new_rows: DataFrame,
    options: BackfillOptions,
    gap_starts: list[datetime],
    spec: OfflineTableSettings,
) -> dict[datetime, BucketDiff]:
    """Per bucket of the window and the gap: rows before and after, and the rows only on
    one side (as multisets of whole rows)."""
    starts = buckets.starts(options.start, options.end, spec.bucket_seconds) + gap_starts
    diffs = {b: BucketDiff() for b in starts}
    columns = [f"`{c}`" for c in new_rows.columns]
    for row in bucket_diffs(offline.select(*columns), new_rows.select(*columns)).collect():
        diffs[row[BUCKET]] = BucketDiff(
            int(row["before"]), int(row["after"]), int(row["only_before"]), int(row["only_after"])
        )
    return diffs


def bucket_diffs(old: DataFrame, new: DataFrame) -> DataFrame:
    """Per bucket: rows before, rows after, and the rows only before and only after as
    multisets of whole rows (`exceptAll`'s semantics: nulls equal, a row kept fewer times counts
    its extra copies). One aggregation counts each distinct row on both sides, so the plan is
    read once instead of twice per `exceptAll` and once per count. Both sides have the same
    columns, the bucket (`store.BUCKET`) among them."""
    from pyspark.sql import functions as F

    side = "__lakehouse_side"
    counted = (
        old.withColumn(side, F.lit(0))
        .unionByName(new.withColumn(side, F.lit(1)))
        .groupBy(*[named(c) for c in old.columns])
        .agg(
            F.count_if(F.col(side) == 0).alias("o"),
            F.count_if(F.col(side) == 1).alias("n"),
        )
    )
    return counted.groupBy(BUCKET).agg(
        F.sum("o").alias("before"),
        F.sum("n").alias("after"),
        F.sum(F.greatest(F.col("o") - F.col("n"), F.lit(0))).alias("only_before"),
        F.sum(F.greatest(F.col("n") - F.col("o"), F.lit(0))).alias("only_after"),
    )


def _new_boundary(before: datetime | None, end: datetime) -> datetime | None:
    """The boundary follows the newest offline data: it moves to the window's end if later."""
    return end if before is None or end > before else before


def _record(
    spark: SparkSession,
    settings: Settings,
    options: BackfillOptions,
    report: BackfillReport,
    seq: int,
    spec: OfflineTableSettings,
) -> None:
    user, host = audit.who()
    kind = options.format or backfill_input.guess_format(spark, options.input)
    audit.record_backfill(
        spark,
        settings,
        audit.BackfillRecord(
            table=options.table,
            seq=seq,
            status=report.status,
            window_from=options.start,
            window_to=options.end,
            input_path=options.input,
            input_format=kind,
            content_hash=report.content_hash,
            rows_before=sum(d.before for d in report.buckets.values()),
            rows_after=sum(d.after for d in report.buckets.values()),
            offline_version_before=report.offline_version_before,
            offline_version_after=report.offline_version_after,
            boundary_before=report.boundary_before,
            boundary_after=report.boundary_after,
            reason=options.reason,
            user=user,
            host=host,
            at=buckets.utc_now(),
        ),
    )


def _show(at: datetime | None) -> str:
    return at.isoformat() if at else "none"
