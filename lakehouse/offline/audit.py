"""What the offline layer records: every backfill run (`_system/backfill_log`, one row per run
with who, where, when, why, the window, the input and its content hash, rows and table versions
before and after) and every move (`_system/offline_log`, the common audit log: a plan before
the move's first commit, then the outcome), and each backfill's window announced before its
commit (also in `_system/offline_log`).

A bucket inside the window of a backfill is *owned* by it: `realtime_to_offline` never moves
it again; a late realtime change to it is counted (shown by `lakehouse status`) and not
applied, so a correction is never overwritten by the stream it corrected.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from lakehouse.core import system, tables
from lakehouse.core.settings import Settings
from lakehouse.offline import buckets, guard, store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

MOVE_PLANNED, MOVED = "move_planned", "moved"
BACKFILL_ANNOUNCED = "backfill_announced"
# On a plan or an announcement: its `owned` buckets are those of every backfill committed up to
# this offline version (read before them), whatever its record says.
OWNED_THROUGH = "owned_through"


@dataclass(frozen=True)
class BackfillRecord:
    table: str
    seq: int
    status: str  # applied | no-op (the same input replayed)
    window_from: datetime
    window_to: datetime
    input_path: str
    input_format: str
    content_hash: str
    rows_before: int
    rows_after: int
    offline_version_before: int
    offline_version_after: int
    boundary_before: datetime | None
    boundary_after: datetime | None
    reason: str
    user: str
    host: str
    at: datetime


def backfill_schema() -> StructType:
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    kinds = {int: LongType(), str: StringType(), datetime: TimestampType()}
    hints = {
        "seq": int,
        "rows_before": int,
        "rows_after": int,
        "offline_version_before": int,
        "offline_version_after": int,
        "window_from": datetime,
        "window_to": datetime,
        "boundary_before": datetime,
        "boundary_after": datetime,
        "at": datetime,
    }
    return StructType(
        [StructField(name, kinds[hints.get(name, str)]) for name in BackfillRecord.__annotations__]
    )


def backfills(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    """Every backfill run of `table`, as recorded."""
    location = system.path(settings, system.BACKFILL_LOG)
    if not tables.exists(spark, location):
        return spark.createDataFrame([], backfill_schema())
    return spark.read.format("delta").load(location).where(f"`table` = '{table}'")


def record_backfill(spark: SparkSession, settings: Settings, record: BackfillRecord) -> None:
    location = system.path(settings, system.BACKFILL_LOG)
    tables.create_table(spark, location, backfill_schema(), {"delta.appendOnly": "true"})
    row = spark.createDataFrame([tuple(record.__dict__.values())], backfill_schema())
    row.write.format("delta").mode("append").save(location)


def who() -> tuple[str, str]:
    return getpass.getuser(), socket.gethostname()


def announce_backfill(
    spark: SparkSession,
    settings: Settings,
    table: str,
    txn: guard.Txn,
    window: tuple[datetime, datetime],
    offline_version: int,
    gap: list[datetime],
    owned: set[datetime],
) -> None:
    """Before a backfill's commit: its window, its gap and its Delta transaction, so a move can
    tell that the commit landed before its `backfill_log` row (written at the very end), and
    a rerun after a crash what the commit wrote; and the buckets it found owned at its start,
    through `offline_version` (read before them: `owned_buckets` starts from there)."""
    record_move(
        spark,
        settings,
        BACKFILL_ANNOUNCED,
        table,
        {
            "app_id": txn[0],
            "seq": txn[1],
            "window_from": window[0].isoformat(),
            "window_to": window[1].isoformat(),
            "offline_version": offline_version,
            "gap": [b.isoformat() for b in gap],
            "owned": [b.isoformat() for b in sorted(owned)],
            OWNED_THROUGH: offline_version,
        },
    )


@dataclass(frozen=True)
class OfflineLog:
    """A table's events in `_system/offline_log`, read once, and the offline table's latest
    version, read just before them: each backfill is announced before it commits, so every
    backfill committed up to that version is among them."""

    offline_version: int
    events: list[dict[str, Any]]


def read_offline_log(spark: SparkSession, settings: Settings, table: str) -> OfflineLog:
    latest = tables.latest_version(spark, store.offline_path(settings, table))
    return OfflineLog(latest, system.read_log(spark, settings, system.OFFLINE_LOG, table))


def announced_backfills(
    spark: SparkSession, settings: Settings, table: str
) -> list[guard.Announced]:
    return _announced(system.read_log(spark, settings, system.OFFLINE_LOG, table))


def _announced(events: list[dict[str, Any]]) -> list[guard.Announced]:
    return [
        guard.Announced(
            (e["app_id"], int(e["seq"])),
            (datetime.fromisoformat(e["window_from"]), datetime.fromisoformat(e["window_to"])),
            int(e["offline_version"]),
            tuple(datetime.fromisoformat(b) for b in e.get("gap") or ()),
        )
        for e in events
        if e["event"] == BACKFILL_ANNOUNCED
    ]


def announcements(spark: SparkSession, settings: Settings, table: str) -> guard.Announcements:
    """`announced_backfills`, read when first needed (`guard.Announcements`)."""
    return guard.Announcements(partial(announced_backfills, spark, settings, table))


RUN_COLUMNS = ("seq", "status", "content_hash", "window_from", "window_to")


def owned_buckets(
    spark: SparkSession,
    settings: Settings,
    table: str,
    bucket: int,
    announced: guard.Announcements | None = None,
    log: OfflineLog | None = None,
) -> set[datetime]:
    """The bucket starts inside the window of any backfill of `table` that committed, for good
    (a run's record comes only at its end; killed after its commit, its rows are in the table
    all the same): those recorded as applied, and those of the announced runs without a
    record of their own whose commit is in the offline table's log. The log is read from the
    latest base on (`_base`: the last move plan or backfill announcement that kept the
    buckets it found owned, through an offline version), a bounded read; with no base yet,
    from the first unrecorded announcement's offline version. `_system/offline_log` is read
    once (`log`, unless given), and `announced` takes that read."""
    runs = backfills(spark, settings, table).select(*RUN_COLUMNS).collect()
    owned: set[datetime] = set()
    for row in runs:
        if row["status"] == "applied":
            owned.update(buckets.starts(row["window_from"], row["window_to"], bucket))
    recorded = {run_txn(table, row) for row in runs}
    log = log or read_offline_log(spark, settings, table)
    announced = announced or announcements(spark, settings, table)
    announced.take(_announced(log.events))
    through, kept = _base(log.events) or (None, set[datetime]())
    owned |= kept
    if through is None:
        pending = [a.offline_version for a in announced() if a.txn not in recorded]
        if not pending:
            return owned
        through = min(pending)
    path = store.offline_path(settings, table)
    commits = guard.txn_commits(spark, path, through, log.offline_version)
    if any(guard.is_backfill(app) for app, _seq in commits):
        for a in announced(set(commits)):
            if a.txn in commits and a.txn not in recorded:
                owned.update(buckets.starts(*a.window, bucket))
    return owned


def _base(events: list[dict[str, Any]]) -> tuple[int, set[datetime]] | None:
    """(offline version, the buckets owned through it) of the latest move plan or backfill
    announcement among `events` that recorded them; None before any did (older records did
    not)."""
    kept = [e for e in events if e.get(OWNED_THROUGH) is not None and e.get("owned") is not None]
    if not kept:
        return None
    last = max(kept, key=lambda e: int(e[OWNED_THROUGH]))
    return int(last[OWNED_THROUGH]), {datetime.fromisoformat(b) for b in last["owned"]}


def run_txn(table: str, row: Row) -> guard.Txn:
    """The Delta transaction of the recorded run `row` (of `RUN_COLUMNS`)."""
    window = (row["window_from"], row["window_to"])
    return guard.backfill_app(table, row["content_hash"], window), int(row["seq"])


def is_replay(
    spark: SparkSession,
    settings: Settings,
    table: str,
    window: tuple[datetime, datetime],
    digest: str,
    announced: guard.Announcements,
) -> bool:
    """The same input over the same window, and no backfill has touched the window since:
    neither one recorded (the latest record by seq, then by time: two runs that start together
    share a seq) nor one that committed after it and was killed before its record (its rows
    are in the window all the same)."""
    applied = (
        backfills(spark, settings, table)
        .where("status = 'applied'")
        .where(f"window_from < TIMESTAMP'{window[1]}' AND window_to > TIMESTAMP'{window[0]}'")
        .orderBy(["seq", "at"], ascending=False)
        .limit(1)
        .collect()
    )
    if not applied:
        return False
    last = applied[0]
    same = (last["content_hash"], (last["window_from"], last["window_to"])) == (digest, window)
    return same and not _committed_over(spark, settings, table, window, last, announced)


def _committed_over(
    spark: SparkSession,
    settings: Settings,
    table: str,
    window: tuple[datetime, datetime],
    last: Row,
    announced: guard.Announcements,
) -> bool:
    """Whether another backfill committed over the window after the recorded run `last` (read
    from the version it started at: a replay is rare, and the read bounded by that run)."""
    path = store.offline_path(settings, table)
    since = int(last["offline_version_before"])
    commits = guard.txn_commits(spark, path, since, tables.latest_version(spark, path))
    # Not among them: an earlier run under the same transaction committed it (Delta skipped
    # this one's write as done), before `since`.
    mine = commits.get(run_txn(table, last), since)
    later = {t for t, v in commits.items() if v > mine and guard.is_backfill(t[0])}
    return any(
        a.window[0] < window[1] and a.window[1] > window[0]
        for a in (announced(later) if later else [])
        if a.txn in later
    )


def move_events(spark: SparkSession, settings: Settings, table: str) -> list[dict[str, Any]]:
    """The plans and outcomes of `realtime_to_offline` for `table`, oldest first."""
    return moves(system.read_log(spark, settings, system.OFFLINE_LOG, table))


def moves(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plans and outcomes of `realtime_to_offline` among a table's `events`."""
    return [e for e in events if e["event"] in (MOVE_PLANNED, MOVED)]


def record_move(
    spark: SparkSession, settings: Settings, event: str, table: str, details: dict[str, Any]
) -> None:
    system.append_log(
        spark, settings, system.OFFLINE_LOG, {"event": event, "subject": table, **details}
    )
