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
) -> None:
    """Before a backfill's commit: its window, its gap and its Delta transaction, so a move can
    tell that the commit landed before its `backfill_log` row (written at the very end), and
    a rerun after a crash what the commit wrote."""
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
        },
    )


def announced_backfills(
    spark: SparkSession, settings: Settings, table: str
) -> list[guard.Announced]:
    return [
        guard.Announced(
            (e["app_id"], int(e["seq"])),
            (datetime.fromisoformat(e["window_from"]), datetime.fromisoformat(e["window_to"])),
            int(e["offline_version"]),
            tuple(datetime.fromisoformat(b) for b in e.get("gap") or ()),
        )
        for e in system.read_log(spark, settings, system.OFFLINE_LOG, table)
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
) -> set[datetime]:
    """The bucket starts inside the window of any backfill of `table` that committed, for good
    (a run's record comes only at its end; killed after its commit, its rows are in the table
    all the same): those recorded as applied, those the last recorded move plan found owned,
    and the announced runs without a record of their own whose commit is in the offline
    table's log after that plan's offline version (a bounded read: the commits since the last
    plan). Before any plan recorded them, as they were told before: the unrecorded runs from
    the last recorded seq on."""
    runs = backfills(spark, settings, table).select(*RUN_COLUMNS).collect()
    owned: set[datetime] = set()
    for row in runs:
        if row["status"] == "applied":
            owned.update(buckets.starts(row["window_from"], row["window_to"], bucket))
    recorded = {run_txn(table, row) for row in runs}
    announced = announced or announcements(spark, settings, table)
    path = store.offline_path(settings, table)
    latest = tables.latest_version(spark, path)
    plan = _last_plan(spark, settings, table)
    if plan is not None:
        owned.update(datetime.fromisoformat(b) for b in plan["owned"])
        commits = guard.txn_commits(spark, path, int(plan["offline_version"]), latest)
        if any(guard.is_backfill(app) for app, _seq in commits):
            for a in announced(set(commits)):
                if a.txn in commits and a.txn not in recorded:
                    owned.update(buckets.starts(*a.window, bucket))
        return owned
    last = max((int(row["seq"]) for row in runs), default=0)
    pending = [a for a in announced() if a.txn[1] >= last and a.txn not in recorded]
    for a in guard.committed(spark, path, pending, latest):
        owned.update(buckets.starts(*a.window, bucket))
    return owned


def _last_plan(spark: SparkSession, settings: Settings, table: str) -> dict[str, Any] | None:
    """The last recorded move plan that kept the buckets it found owned (older plans did not)."""
    plans = [e for e in move_events(spark, settings, table) if e["event"] == MOVE_PLANNED]
    last = plans[-1] if plans else None
    if last is None or last.get("owned") is None or last.get("offline_version") is None:
        return None
    return last


def run_txn(table: str, row: Row) -> guard.Txn:
    """The Delta transaction of the recorded run `row` (of `RUN_COLUMNS`)."""
    window = (row["window_from"], row["window_to"])
    return guard.backfill_app(table, row["content_hash"], window), int(row["seq"])


def move_events(spark: SparkSession, settings: Settings, table: str) -> list[dict[str, Any]]:
    """The plans and outcomes of `realtime_to_offline` for `table`, oldest first."""
    return [
        e
        for e in system.read_log(spark, settings, system.OFFLINE_LOG, table)
        if e["event"] in (MOVE_PLANNED, MOVED)
    ]


def record_move(
    spark: SparkSession, settings: Settings, event: str, table: str, details: dict[str, Any]
) -> None:
    system.append_log(
        spark, settings, system.OFFLINE_LOG, {"event": event, "subject": table, **details}
    )
