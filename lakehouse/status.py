"""What `lakehouse status` shows: per source partition, how far bronze is behind Kafka; per
source, what bronze holds and whether it is protected; per silver table, its live rows, how far
it is behind bronze (commits and seconds), pending quarantine and the last batch's expectation
results;
per offline table, its boundary, moves, backfills and the late changes not applied; per gold
table, its groups, last build and source lag."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakehouse.bronze.ingest import bronze_path
from lakehouse.core import current, protection, system, tables
from lakehouse.core.settings import Settings
from lakehouse.core.streaming import delta_read_through

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SUMMARY_SCHEMA = (
    "source string, table string, rows long, bad_rows long, topic_partitions int, "
    "last_ingest_time timestamp, protected boolean, gaps_recorded int"
)


KAFKA_SCHEMA = (
    "source string, topic string, partition int, end_offset long, next_offset long, lag long"
)


def kafka_summary(spark: SparkSession, settings: Settings) -> DataFrame:
    """Per source and topic partition: Kafka's end offset, the next offset bronze needs (one
    past the highest it holds, 0 when it holds none) and the difference, the records not yet
    ingested. A configured topic that does not exist is one row with NULL partition and
    offsets."""
    from lakehouse.bronze.offsets import bronze_resume_offsets, topic_partitions
    from lakehouse.core import kafka

    rows: list[tuple[object, ...]] = []
    for name, source in sorted(settings.sources.items()):
        path = bronze_path(settings, name)
        held = bronze_resume_offsets(spark, path, name) if tables.exists(spark, path) else {}
        partitions = topic_partitions(settings.kafka, source, timeout_s=15)
        marks = kafka.watermarks(settings.kafka, partitions, source.client_options())
        for (topic, partition), (_low, high) in sorted(marks.items()):
            following = held.get(topic, {}).get(partition, 0)
            rows.append((name, topic, partition, high, following, max(high - following, 0)))
        rows.extend((name, t, None, None, None, None) for t in source.topics if t not in partitions)
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def bronze_summary(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per configured source; a source never ingested shows zero rows."""
    from pyspark.sql import functions as F

    gaps_by_source = _gap_counts(spark, settings)  # one read of the log for all sources
    rows: list[tuple[object, ...]] = []
    for name in sorted(settings.sources):
        table = settings.bronze_table(name)
        path = bronze_path(settings, name)
        gaps = gaps_by_source.get(name, 0)
        if not tables.exists(spark, path):
            rows.append((name, table, 0, 0, 0, None, None, gaps))  # no table yet
            continue
        stats = (
            spark.read.format("delta")
            .load(path)
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.count("value_error").alias("bad"),
                F.count_distinct("topic", "partition").alias("parts"),
                F.max("ingest_time").alias("last"),
            )
            .collect()[0]
        )
        props = tables.properties(spark, path)
        protected = protection.is_protected(props)
        rows.append(
            (
                name,
                table,
                stats["rows"],
                stats["bad"],
                stats["parts"],
                stats["last"],
                protected,
                gaps,
            )
        )
    return spark.createDataFrame(rows, SUMMARY_SCHEMA)


def _gap_counts(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """Losses --allow-data-loss recorded, per source: missing ranges and deleted partitions."""
    path = system.path(settings, system.INGEST_LOG)
    if not tables.exists(spark, path):
        return {}
    log = spark.read.format("delta").load(path)
    rows = log.where("event IN ('gap', 'topic_deleted')").groupBy("subject").count()
    return {r["subject"]: int(r["count"]) for r in rows.collect()}


SILVER_SCHEMA = (
    "table string, mode string, live_rows long, bronze_version long, processed_version long, "
    "lag_commits long, lag_seconds long, last_batch long, last_batch_at timestamp, "
    "last_batch_rows long, last_batch_failed string, quarantined_pending long"
)
# Beyond this many unprocessed bronze commits, each counts as one with rows (not read).
_LAG_COMMITS_READ = 500


def silver_summary(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per declared silver table; `last_batch_failed` lists `rule=failed` for the
    rules that failed rows in the newest batch."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lakehouse.silver.plan import silver_path

    metrics_path = system.path(settings, system.METRICS)
    last: dict[str, list[object]] = {}
    if tables.exists(spark, metrics_path):
        newest = Window.partitionBy("table").orderBy(F.col("at").desc(), F.col("batch_id").desc())
        latest = (
            spark.read.format("delta")
            .load(metrics_path)
            .withColumn("_rank", F.dense_rank().over(newest))
            .where("_rank = 1")
        )
        for row in latest.collect():
            entry = last.setdefault(row["table"], [row["batch_id"], row["at"], row["batch_rows"]])
            if row["failed"]:
                entry.append(f"{row['rule']}={row['failed']}")
    pending: dict[str, int] = {}
    quarantine_path = system.path(settings, system.QUARANTINE)
    if tables.exists(spark, quarantine_path):
        counts = (
            spark.read.format("delta")
            .load(quarantine_path)
            .where("status = 'quarantined'")
            .groupBy("table")
            .count()
        )
        pending = {r["table"]: int(r["count"]) for r in counts.collect()}
    rows: list[tuple[object, ...]] = []
    for name, table in sorted(settings.silver.items()):
        path = silver_path(settings, name)
        live = None
        if tables.exists(spark, path):
            live = current.live_rows(spark.read.format("delta").load(path)).count()
        batch, at, batch_rows, *failed = last.get(name, [None, None, None])
        rows.append(
            (
                f"silver.{name}",
                table.mode,
                live,
                *_bronze_lag(spark, settings, name, table.source),
                batch,
                at,
                batch_rows,
                ", ".join(map(str, failed)) or None,
                pending.get(name, 0),
            )
        )
    return spark.createDataFrame(rows, SILVER_SCHEMA)


def _bronze_lag(
    spark: SparkSession, settings: Settings, name: str, source: str
) -> tuple[int | None, int | None, int | None, int | None]:
    """(bronze's newest version, the newest version this silver table has read in full, the
    bronze commits after it that added rows, the age in seconds of the oldest of those)."""
    from lakehouse.silver.refine import checkpoint_path

    path = bronze_path(settings, source)
    if not tables.exists(spark, path):
        return None, None, None, None
    newest = tables.latest_version(spark, path)
    processed = processed_version(spark, checkpoint_path(settings, name))
    first = -1 if processed is None else processed
    pending = [v for v in range(first + 1, newest + 1) if _adds_rows(spark, path, v, first)]
    seconds = 0
    if pending:
        info = tables.commit_info(spark, path, pending[0]) or {}
        written = int(info.get("timestamp", time.time() * 1000)) / 1000
        seconds = max(0, int(time.time() - written))
    return newest, processed, len(pending), seconds


def processed_version(spark: SparkSession, checkpoint: str) -> int | None:
    """The newest source version a Delta streaming query has read in full (from its last
    committed batch); None before its first committed batch."""
    from lakehouse.core import fs

    offset = fs.committed_source_offset(spark, checkpoint)
    return None if offset is None else delta_read_through(offset)


def _adds_rows(spark: SparkSession, path: str, version: int, first: int) -> bool:
    """Whether bronze commit `version` added data (a property change or a protection record
    gives silver nothing to do, so it is no lag)."""
    import json

    from lakehouse.core import fs

    if version - first > _LAG_COMMITS_READ:
        return True
    file = f"{path.rstrip('/')}/_delta_log/{version:020d}.json"
    if not fs.exists(spark, file):
        return True  # cleaned up; assume it did
    actions = (json.loads(line) for line in fs.read_text(spark, file).splitlines() if line)
    return any("add" in action and action["add"].get("dataChange", True) for action in actions)


OFFLINE_SCHEMA = (
    "table string, hybrid_view string, boundary timestamp, buckets long, rows long, "
    "last_move_at timestamp, closed_buckets_waiting long, late_changes_pending long, "
    "late_buckets_moved_again long, late_changes_not_applied long, backfills long"
)


def offline_summary(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per declared offline table: its boundary, what it holds, what the next move
    would take as of now (closed buckets, late changes to moved buckets), its moves and the
    late realtime changes to backfilled buckets that were counted instead of applied."""
    from pyspark.sql import functions as F

    from lakehouse.offline import audit, boundary, buckets, store, waiting

    now = buckets.utc_now()

    rows: list[tuple[object, ...]] = []
    for name, spec in sorted(settings.offline.items()):
        path = store.offline_path(settings, name)
        moved = boundary.current(spark, settings, name)
        counts = (0, 0)
        if tables.exists(spark, path):
            stats = (
                spark.read.format("delta")
                .load(path)
                .agg(F.count_distinct(store.BUCKET).alias("b"), F.count(F.lit(1)).alias("r"))
                .collect()[0]
            )
            counts = (int(stats["b"]), int(stats["r"]))
        moves = [e for e in audit.move_events(spark, settings, name) if e["event"] == audit.MOVED]
        rows.append(
            (
                f"offline.{name}",
                f"silver.{spec.view}",
                moved.boundary if moved else None,
                *counts,
                moves[-1]["at"] if moves else None,
                *waiting.waiting(spark, settings, name, now),
                sum(len(e.get("late", [])) for e in moves),
                sum(sum(e.get("ignored", {}).values()) for e in moves),
                audit.backfills(spark, settings, name).where("status = 'applied'").count(),
            )
        )
    return spark.createDataFrame(rows, OFFLINE_SCHEMA)


GOLD_SCHEMA = (
    "table string, source string, groups long, last_build_at timestamp, "
    "last_run_rows_changed long, source_state string, source_lag long"
)


def gold_summary(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per declared gold table: what it holds, its last build, the source state that
    build read and how many source commits it is behind."""
    import json
    from datetime import UTC, datetime

    from lakehouse.gold import source
    from lakehouse.gold.build import gold_path, last_build, rows_changed

    rows: list[tuple[object, ...]] = []
    for name, gold in sorted(settings.gold.items()):
        path = gold_path(settings, name)
        groups = (
            spark.read.format("delta").load(path).count() if tables.exists(spark, path) else None
        )
        last = last_build(spark, path)
        lag, at, changed = None, None, None
        if last is not None:
            src = source.resolve(settings, gold)
            lag = source.source_version_lag(spark, settings, src, last["until"])
            at = datetime.fromtimestamp(int(last["at"]) / 1000, UTC).replace(tzinfo=None)
            metrics = last["metrics"]
            changed = rows_changed(metrics)
        rows.append(
            (
                f"gold.{name}",
                gold.source,
                groups,
                at,
                changed,
                json.dumps(last["until"], sort_keys=True) if last else None,
                lag,
            )
        )
    return spark.createDataFrame(rows, GOLD_SCHEMA)
