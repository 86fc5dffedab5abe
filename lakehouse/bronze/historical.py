"""`--historical`: a Delta snapshot loaded into bronze once, before the live stream starts
(Feldera's start_after). Where history ended and live began is recorded in `_system/ingest_log`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakehouse.bronze import transform as bronze
from lakehouse.bronze.offsets import Offsets, StartFromError
from lakehouse.core import faults, system, tables
from lakehouse.core.settings import Settings
from lakehouse.core.spark import runtime_conf
from lakehouse.core.specs import SourceSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def load(
    spark: SparkSession,
    settings: Settings,
    name: str,
    snapshot: str,
    source: SourceSettings,
    path: str,
) -> int:
    """Load the snapshot `snapshot` (a path or a table name) into the bronze table at `path`
    for source `name` once (a re-run finds the handoff and skips it)."""
    snapshot_path = _resolve_snapshot(spark, settings, snapshot)
    version = tables.latest_version(spark, snapshot_path)
    done = [
        e
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
        if e["event"] == "historical_loaded"
    ]
    if done:
        previous = done[-1]
        if (previous["snapshot"], previous["version"]) != (snapshot_path, version):
            raise StartFromError(
                f"bronze.{name} was already seeded from {previous['snapshot']} "
                f"version {previous['version']}; refusing to load a second snapshot on top"
            )
        log.info("historical snapshot already loaded (version %s); skipping", version)
        return 0
    landed = _landed(spark, path, name)
    if landed is not None:
        # A run cut off after its append, before its log row: bronze decides (the snapshot
        # may have moved on since, and its newer version must not land on top).
        landed_version, count = landed
        log.warning("snapshot version %s is in bronze already; recording it", landed_version)
        _record(spark, settings, name, snapshot_path, landed_version, count)
        return 0
    frame = spark.read.format("delta").option("versionAsOf", version).load(snapshot_path)
    rows = bronze.historical_to_bronze(frame, name, source.kind, version, source.max_value_bytes)
    # Idempotent: a crash after this commit but before the log entry replays as a no-op.
    with runtime_conf(spark, bronze.PARQUET_CONF):
        tables.append_once(rows, path, f"lakehouse-historical-{name}", version)
    faults.point("after_historical_append")
    count = frame.count()
    _record(spark, settings, name, snapshot_path, version, count)
    return count


def _landed(spark: SparkSession, path: str, name: str) -> tuple[int, int] | None:
    """(version, rows) of the snapshot `name` already appended to bronze, if any."""
    from pyspark.sql import functions as F

    found = (
        spark.read.format("delta")
        .load(path)
        .where((F.col("source") == name) & F.col("historical_version").isNotNull())
        .groupBy("historical_version")
        .count()
        .collect()
    )
    return (int(found[0][0]), int(found[0][1])) if found else None


def _record(
    spark: SparkSession, settings: Settings, name: str, snapshot: str, version: int, rows: int
) -> None:
    system.append_log(
        spark,
        settings,
        system.INGEST_LOG,
        {
            "event": "historical_loaded",
            "subject": name,
            "snapshot": snapshot,
            "version": version,
            "rows": rows,
        },
    )


def require_lineage(spark: SparkSession, settings: Settings, snapshot: str) -> None:
    """`--start-from bronze` after a snapshot needs the snapshot's Kafka offsets."""
    path = _resolve_snapshot(spark, settings, snapshot)
    columns = set(spark.read.format("delta").load(path).columns)
    if not {"topic", "partition", "offset"} <= columns:
        raise StartFromError(
            f"--historical {snapshot} has no Kafka lineage (topic, partition, offset), so "
            "--start-from bronze cannot know where live data starts; give the first live "
            'offsets instead: --start-from offsets={"TOPIC":{"PARTITION":OFFSET}}'
        )


def record_handoff(spark: SparkSession, settings: Settings, name: str, starting: Offsets) -> None:
    """Where the live stream starts after the snapshot."""
    first_live = {t: {str(p): o for p, o in ps.items()} for t, ps in starting.items()}
    system.append_log(
        spark,
        settings,
        system.INGEST_LOG,
        {"event": "live_started", "subject": name, "first_live_offsets": first_live},
    )


def _resolve_snapshot(spark: SparkSession, settings: Settings, path_or_table: str) -> str:
    """A path as is; `LAYER.TABLE` of this lakehouse (e.g. `silver.orders`) under the storage
    root; any other name from Spark's catalog (a metastore table of another system), by its
    location."""
    if "/" in path_or_table or ":" in path_or_table:
        return path_or_table
    try:
        return tables.table_path(settings, path_or_table)
    except ValueError:
        pass
    if spark.catalog.tableExists(path_or_table):
        detail = spark.sql(f"DESCRIBE DETAIL {path_or_table}").select("format", "location")
        row = detail.first()
        if row is not None and row["format"] == "delta":
            return str(row["location"])
        raise StartFromError(
            f"--historical {path_or_table!r}: a catalog table, but not a Delta table "
            f"({row['format'] if row else 'unknown format'}); give a Delta snapshot"
        )
    raise StartFromError(
        f"--historical {path_or_table!r}: no such path, LAYER.TABLE of this lakehouse "
        "(e.g. bronze.orders) or table in Spark's catalog"
    )
