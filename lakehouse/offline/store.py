"""Offline tables: where they live, their contract, and the one way their data changes.

An offline table (`<root>/offline/<name>`) holds the realtime table's current rows of closed
time buckets: the realtime row's columns plus `__bucket`, the start of the row's bucket, by
which the table is partitioned. Every change replaces whole buckets in ONE Delta commit
(`replace_where`: an overwrite whose `replaceWhere` names exactly those buckets), so a move or
a backfill touches only its own partitions: no file of another bucket is read for the commit's
conflict check or removed, and it cannot conflict with a writer of other buckets.

Offline tables are protected from resets (`pipelines.reset.allowed=false`): a backfilled
correction exists nowhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from lakehouse.core import current, tables
from lakehouse.core.protection import RESET_ALLOWED
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import OfflineTableSettings
from lakehouse.offline import buckets

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

BUCKET = "__bucket"  # the start of the row's time bucket; the partition column
_WRITE_ATTEMPTS = 5
PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    RESET_ALLOWED: "false",
}


def offline_path(settings: Settings, name: str) -> str:
    return tables.table_path(settings, f"offline.{name}")


def realtime_path(settings: Settings, table: OfflineTableSettings) -> str:
    return tables.table_path(settings, f"silver.{table.realtime}")


def read_realtime(
    spark: SparkSession, settings: Settings, table: str, spec: OfflineTableSettings
) -> DataFrame:
    """The realtime table of offline table `table`, which must exist."""
    path = realtime_path(settings, spec)
    if not tables.exists(spark, path):
        raise SettingsError(
            f"offline.{table}: its realtime table silver.{spec.realtime} does not exist yet; "
            f"run refine_silver --table {spec.realtime} first"
        )
    return spark.read.format("delta").load(path)


def row_schema(realtime: StructType) -> StructType:
    """The columns a reader sees: the realtime table's, without its bookkeeping."""
    from pyspark.sql.types import StructType

    return StructType([f for f in realtime.fields if not current.is_bookkeeping(f.name)])


def offline_schema(realtime: StructType) -> StructType:
    from pyspark.sql.types import StructField, StructType, TimestampType

    return StructType([*row_schema(realtime).fields, StructField(BUCKET, TimestampType())])


def ensure_table(spark: SparkSession, path: str, realtime: StructType) -> None:
    """Create the offline table with the realtime table's row columns, unless it exists; a
    column the realtime table gained since (schema evolution) is added."""
    schema = offline_schema(realtime)
    if tables.create_table(spark, path, schema, PROPERTIES, (BUCKET,)):
        return
    missing = tables.missing_columns(spark, path, schema.fields)
    if missing:
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({tables.columns_ddl(missing)})")


def with_bucket(rows: DataFrame, table: OfflineTableSettings) -> DataFrame:
    """`rows` with their `__bucket` (null when the time cannot be read)."""
    time = buckets.event_time(table.time_column, table.time_format)
    return rows.withColumn(BUCKET, buckets.bucket_start(time, table.bucket_seconds))


def in_buckets(starts: Sequence[datetime]) -> Column:
    """`__bucket IN (...)`: a partition predicate Delta prunes by."""
    from pyspark.sql import functions as F

    if not starts:
        return F.lit(False)
    return F.col(BUCKET).isin(*[F.lit(s) for s in starts])


def bucket_predicate_sql(starts: Sequence[datetime]) -> str:
    """The same predicate as SQL text, for `replaceWhere` (which takes a string)."""
    if not starts:
        return "false"
    listed = ", ".join(f"TIMESTAMP'{s.isoformat(sep=' ')}'" for s in sorted(starts))
    return f"{BUCKET} IN ({listed})"


def replace_where(
    rows: DataFrame, path: str, where: str, app_id: str, version: int, retry: bool = True
) -> None:
    """Replace the rows of the offline table matching `where` (a predicate on `__bucket` only,
    so Delta resolves it to whole partitions) with `rows`, which must match it too, in one
    commit, idempotent under (`app_id`, `version`). A bucket `where` names without rows is
    emptied.

    A write conflict (a move or a backfill committed to these buckets after this write's
    snapshot) is retried with the same rows, so the later writer wins: a backfill over a move,
    or a move over a backfill, which the move then puts back (`guard`)."""
    for attempt in range(1, _WRITE_ATTEMPTS + 1):
        try:
            tables.write_once(rows, path, app_id, version, mode="overwrite", replace_where=where)
            return
        except Exception as exc:
            if not retry or attempt == _WRITE_ATTEMPTS or not tables.is_write_conflict(exc):
                raise
            log.info("%s: write conflict on %s, retrying (%d)", app_id, path, attempt)


def realtime_rows(
    spark: SparkSession, path: str, version: int, table: OfflineTableSettings
) -> DataFrame:
    """The realtime table's current rows at `version`, with their `__bucket`."""
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    return with_bucket(current.current_rows(frame), table)


def bucket_counts(frame: DataFrame, starts: Sequence[datetime]) -> dict[datetime, int]:
    """Rows per bucket among `starts` (buckets without rows are absent)."""
    counts = frame.where(in_buckets(starts)).groupBy(BUCKET).count().collect()
    return {r[BUCKET]: int(r["count"]) for r in counts}
