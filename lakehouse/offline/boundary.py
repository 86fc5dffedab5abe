"""The time boundary of each offline table, stored durably and versioned.

`_system/time_boundary` holds one row per change: the offline table, its sequence number
(1, 2, ... per table), the new boundary and the one before, the job and run that moved it, the
offline table version it corresponds to (the offline data for every bucket before the boundary
is committed at that version), the reason, who, where and when. The current boundary is the
row with the highest sequence number; the table's Delta history makes every earlier state
readable (time travel).

The hybrid view serves offline rows before the boundary and realtime rows from it on. Writers
commit the offline data first and move the boundary after, and readers read the boundary
first (`lakehouse.offline.hybrid`), so no reader ever sees a boundary without its data.

Appends go through a MERGE on (table, seq): two writers that race for the same sequence
number conflict in Delta instead of both landing, and the loser retries with the next number.

Reading the current boundary is on every hybrid read's path, so it is cached: after each
change, `_current/<table>.json` inside the table's directory (Delta ignores `_` paths) holds
the table's current row together with the boundary table's version it was read at. A reader
uses it only when that version is still the latest (two file probes); otherwise it reads the
table and rewrites the cache. A stale cache is never used, and a missing one costs one read.
"""

from __future__ import annotations

import getpass
import json
import logging
import socket
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from lakehouse.core import fs, system, tables
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.offline import buckets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

_RETRIES = 5


@dataclass(frozen=True)
class Boundary:
    table: str
    seq: int
    boundary: datetime
    previous: datetime | None
    job: str
    run_id: str
    offline_version: int
    reason: str
    user: str
    host: str
    at: datetime


def schema() -> StructType:
    from pyspark.sql.types import (
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("table", StringType()),
            StructField("seq", LongType()),
            StructField("boundary", TimestampType()),
            StructField("previous", TimestampType()),
            StructField("job", StringType()),
            StructField("run_id", StringType()),
            StructField("offline_version", LongType()),
            StructField("reason", StringType()),
            StructField("user", StringType()),
            StructField("host", StringType()),
            StructField("at", TimestampType()),
        ]
    )


def path(settings: Settings) -> str:
    return system.path(settings, system.TIME_BOUNDARY)


def current(spark: SparkSession, settings: Settings, table: str) -> Boundary | None:
    """The table's boundary now (None: nothing has moved offline yet, all is realtime)."""
    location = path(settings)
    if not tables.exists(spark, location):
        return None
    version = tables.latest_version(spark, location)
    cached = _cached(spark, location, table, version)
    if cached is not False:
        return cached
    rows = (
        spark.read.format("delta")
        .option("versionAsOf", version)
        .load(location)
        .where(f"`table` = '{table}'")
        .orderBy("seq", ascending=False)
        .limit(1)
        .collect()
    )
    found = Boundary(**rows[0].asDict()) if rows else None
    _cache(spark, location, table, version, found)
    return found


def _cache_file(location: str, table: str) -> str:
    return f"{location}/_current/{table}.json"


def _cached(
    spark: SparkSession, location: str, table: str, version: int
) -> Boundary | Literal[False] | None:
    """The cached current row if it was read at `version` (None: no row then), else False."""
    file = _cache_file(location, table)
    if not fs.exists(spark, file):
        return False
    try:
        entry = json.loads(fs.read_text(spark, file))
    except (ValueError, OSError):  # a torn write: read the table instead
        return False
    if entry.get("version") != version:
        return False
    row = entry.get("row")
    if row is None:
        return None
    for name in ("boundary", "previous", "at"):
        row[name] = datetime.fromisoformat(row[name]) if row[name] else None
    return Boundary(**row)


def _cache(
    spark: SparkSession, location: str, table: str, version: int, row: Boundary | None
) -> None:
    entry = {"version": version, "row": asdict(row) if row else None}
    fs.write_text(spark, _cache_file(location, table), json.dumps(entry, default=str))


def history(spark: SparkSession, settings: Settings, table: str) -> DataFrame:
    """Every boundary change of `table`, as stored."""
    location = path(settings)
    if not tables.exists(spark, location):
        return spark.createDataFrame([], schema())
    return spark.read.format("delta").load(location).where(f"`table` = '{table}'")


def move(
    spark: SparkSession,
    settings: Settings,
    table: str,
    to: datetime,
    job: str,
    run_id: str,
    offline_version: int,
    reason: str = "",
    txn: tuple[str, int] | None = None,
    forward_only: bool = True,
) -> Boundary:
    """Record the boundary of `table` at `to` (its offline data for everything before `to` is
    committed at `offline_version`). `txn` (app id, version) makes a replay after a crash a
    no-op: the earlier attempt's row stands. A job's boundary only moves forward
    (`forward_only`): when another writer has taken it to `to` or past it since the job read
    it, the boundary stays and is returned; only a hand may set it back."""
    location = path(settings)
    tables.create_table(spark, location, schema(), {"delta.appendOnly": "true"})
    for _attempt in range(_RETRIES):
        before = current(spark, settings, table)
        if forward_only and before is not None and before.boundary >= to:
            return before
        row = Boundary(
            table=table,
            seq=(before.seq + 1) if before else 1,
            boundary=to,
            previous=before.boundary if before else None,
            job=job,
            run_id=run_id,
            offline_version=offline_version,
            reason=reason,
            user=getpass.getuser(),
            host=socket.gethostname(),
            at=buckets.utc_now(),
        )
        try:
            _insert(spark, location, row, txn)
        except Exception as exc:
            if not tables.is_write_conflict(exc):
                raise
            log.info("boundary of %s: another writer took seq %d; retrying", table, row.seq)
            continue
        now = current(spark, settings, table)  # also refreshes the cache
        return now or row
    raise RuntimeError(f"boundary of {table}: {_RETRIES} concurrent writers in a row; try again")


def _insert(spark: SparkSession, location: str, row: Boundary, txn: tuple[str, int] | None) -> None:
    from delta.tables import DeltaTable

    new = spark.createDataFrame([tuple(row.__dict__.values())], schema())
    merge = (
        DeltaTable.forPath(spark, location)
        .alias("t")
        .merge(new.alias("s"), "t.`table` = s.`table` AND t.seq = s.seq")
        .whenNotMatchedInsertAll()
    )
    if txn is None:
        merge.execute()
        return
    with tables.transaction(spark, *txn):
        merge.execute()


def set_by_hand(
    spark: SparkSession, settings: Settings, table: str, to: datetime, reason: str
) -> Boundary:
    """`lakehouse boundary TABLE --set TS`: move the boundary to a bucket edge no later than
    the offline data's end (earlier serves more from realtime, which keeps every row)."""
    from lakehouse.offline import store

    spec = settings.offline_table(table)
    off_path = store.offline_path(settings, table)
    if not tables.exists(spark, off_path):
        raise UsageError(f"offline.{table} has no data yet; run realtime_to_offline first")
    # The offline data reaches as far as the boundary ever went (a boundary set back by hand
    # leaves the offline buckets after it in place).
    reached = history(spark, settings, table).agg({"boundary": "max"}).collect()[0][0]
    check_settable(to, spec.bucket_seconds, reached, table)
    version = tables.latest_version(spark, off_path)
    return move(
        spark,
        settings,
        table,
        to,
        "lakehouse boundary",
        "by-hand",
        version,
        reason,
        forward_only=False,
    )


def check_settable(to: datetime, bucket: int, offline_end: datetime | None, table: str) -> None:
    """A boundary set by hand must be a bucket edge and must not pass the offline data (the
    view would have a gap between the newest offline bucket and the boundary)."""
    if not buckets.is_edge(to, bucket):
        raise UsageError(
            f"boundary of {table}: {to.isoformat()} is not a bucket edge; use a multiple of "
            f"{bucket} s since midnight UTC, e.g. {buckets.floor(to, bucket).isoformat()}"
        )
    if offline_end is None or to > offline_end:
        have = offline_end.isoformat() if offline_end else "nothing yet"
        raise UsageError(
            f"boundary of {table}: {to.isoformat()} is past the offline data (it ends at "
            f"{have}); the view would miss the rows in between. Move buckets first with "
            f"realtime_to_offline --table {table}, or backfill them"
        )
