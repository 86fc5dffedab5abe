"""Kafka -> bronze, exactly once: the library behind `ingest_events` and `ingest_cdc`.

Exactly-once comes from Spark's checkpoint plus the Delta sink's idempotent commits (each
micro-batch commits with the query's id and batch id as a Delta transaction, so a batch replayed
after a crash is skipped). When a checkpoint is lost, `--start-from bronze` resumes one past the
highest offset bronze holds per partition, so nothing is duplicated and nothing skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse.bronze import offsets
from lakehouse.bronze import transform as bronze
from lakehouse.bronze.offsets import DataLossError, Offsets, StartFrom, StartFromError
from lakehouse.core import kafka, tables
from lakehouse.core.kafka import spark_options
from lakehouse.core.settings import Settings, SettingsError, SourceSettings
from lakehouse.core.spark import runtime_conf
from lakehouse.core.streaming import await_query, progress_reports

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

TRIGGERS = ("available-now", "continuous")
INGEST_LOG = "ingest_log"
# Every row of a micro-batch has the same partition (its source and the batch's date), so the
# partitioned write needs one open file per task, not a sort of the whole batch by it first,
# which is Spark's default (the sort cost ~20% of the write, bench/README.md). Spark falls
# back to sorting when a task sees more partition values than this.
WRITE_CONF = {"spark.sql.maxConcurrentOutputFileWriters": "2", **bronze.PARQUET_CONF}


@dataclass(frozen=True)
class IngestOptions:
    source: str
    start_from: StartFrom | None = None
    trigger: str = "available-now"
    historical: str | None = None
    allow_data_loss: bool = False


@dataclass
class IngestResult:
    source: str
    bronze_path: str
    batches: int = 0
    rows: int = 0
    historical_rows: int = 0
    gaps: list[offsets.Gap] = field(default_factory=list)


def bronze_path(settings: Settings, name: str, source: SourceSettings) -> str:
    return tables.table_path(settings, f"bronze.{source.bronze_table or name}")


def ingest(
    spark: SparkSession, settings: Settings, options: IngestOptions, kind: str
) -> IngestResult:
    """Run one ingest job for `options.source`, which must be of `kind` (events | cdc)."""
    source = settings.source(options.source)
    if source.kind != kind:
        job = "ingest_cdc" if source.kind == "cdc" else "ingest_events"
        raise SettingsError(
            f"--source {options.source!r} is a {source.kind} source; run it with {job}"
        )
    if options.trigger not in TRIGGERS:
        raise SettingsError(f"--trigger {options.trigger!r}: use one of {', '.join(TRIGGERS)}")
    path = bronze_path(settings, options.source, source)
    checkpoint = tables.checkpoint_path(settings, "ingest", options.source)
    result = IngestResult(options.source, path)

    schema = bronze.bronze_schema(kind)
    created = tables.create_table(
        spark, path, schema, bronze.bronze_properties(kind), bronze.PARTITION_COLUMNS
    )
    if not created:
        tables.require_columns(spark, path, schema)
    has_checkpoint = offsets.checkpoint_exists(spark, checkpoint)
    if has_checkpoint and (options.start_from is not None or options.historical):
        raise StartFromError(
            f"checkpoint {checkpoint} already records where {options.source!r} resumes, so "
            "--start-from/--historical would be ignored; drop those flags, or move the "
            "checkpoint away first (then --start-from bronze resumes without duplicates)"
        )
    if options.historical:
        if options.start_from is None or options.start_from.mode not in ("offsets", "bronze"):
            raise StartFromError(
                "--historical needs --start-from offsets=JSON (the first live offsets after "
                "the snapshot) or --start-from bronze"
            )
        result.historical_rows = load_historical(spark, settings, options, source, path)

    start = options.start_from or StartFrom("earliest")
    if has_checkpoint:
        starting, needed = None, offsets.checkpoint_resume_offsets(spark, checkpoint) or {}
    else:
        starting, needed = _starting_offsets(spark, settings, source, start, path)
    # Only ask Kafka for watermarks when there is an offset we rely on it still holding.
    marks = kafka.watermarks(settings.kafka, needed, source.kafka_options) if needed else {}
    gaps = offsets.find_gaps(needed, marks)
    if gaps:
        if not options.allow_data_loss:
            raise DataLossError(gaps)
        for gap in gaps:
            log.warning("data loss accepted by --allow-data-loss: %s", gap.describe())
            tables.append_system_log(
                spark,
                settings,
                INGEST_LOG,
                {"event": "gap", "subject": options.source, **gap.__dict__},
            )
        if isinstance(starting, dict):
            starting = offsets.clamp_to_available(starting, marks)
        result.gaps = gaps
    if options.historical and isinstance(starting, dict):
        _record_handoff_offsets(spark, settings, options.source, starting)

    stream = _read_kafka(spark, settings, source, start, starting, options.allow_data_loss)
    rows = bronze.kafka_to_bronze(stream, options.source, kind, source.max_value_bytes)
    # The query runs on a copy of the session taken at start(), so the settings stay with it.
    with runtime_conf(spark, WRITE_CONF):
        query = _write_bronze(rows, path, checkpoint, options, source)
    await_query(query, options.trigger)
    # Spark keeps the last 100 progress reports: exact for available-now, recent for continuous.
    progress = progress_reports(query)
    result.batches = len(progress)
    result.rows = sum(int(p["numInputRows"]) for p in progress)
    return result


def _starting_offsets(
    spark: SparkSession,
    settings: Settings,
    source: SourceSettings,
    start: StartFrom,
    path: str,
) -> tuple[Offsets | str | None, Offsets]:
    """For a new checkpoint: (what to give Spark as startingOffsets, the offsets we need Kafka
    to still hold)."""
    if start.mode in ("earliest", "latest"):
        return start.mode, {}
    if start.mode == "timestamp":
        return None, {}  # Kafka resolves the timestamp to offsets it still holds
    partitions = offsets.topic_partitions(settings.kafka, source)
    if start.mode == "offsets":
        assert start.offsets is not None
        unknown = sorted(set(start.offsets) - set(partitions))
        if unknown:
            raise StartFromError(
                f"--start-from offsets names topics this source does not read: {unknown}"
            )
        explicit = offsets.complete(start.offsets, partitions)
        return explicit, offsets.concrete(explicit)
    resume = offsets.complete(offsets.bronze_resume_offsets(spark, path), partitions)
    return resume, offsets.concrete(resume)


def _read_kafka(
    spark: SparkSession,
    settings: Settings,
    source: SourceSettings,
    start: StartFrom,
    starting: Offsets | str | None,
    allow_data_loss: bool,
) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_options(settings.kafka))
        .options(**{f"kafka.{k}": v for k, v in source.kafka_options.items()})
        .option("includeHeaders", "true")
        # We check for expired offsets ourselves (and name the ranges); with the user's
        # explicit --allow-data-loss, Spark may skip what retention removed.
        .option("failOnDataLoss", str(not allow_data_loss).lower())
    )
    if source.topics:
        reader = reader.option("subscribe", ",".join(source.topics))
    else:
        reader = reader.option("subscribePattern", source.topic_pattern)
    if source.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(source.max_offsets_per_trigger))
    if isinstance(starting, dict):
        reader = reader.option("startingOffsets", offsets.to_spark_json(starting))
    elif isinstance(starting, str):
        reader = reader.option("startingOffsets", starting)
    elif start.mode == "timestamp":
        reader = reader.option("startingTimestamp", str(start.timestamp_ms))
    return reader.load()


def _write_bronze(
    rows: DataFrame, path: str, checkpoint: str, options: IngestOptions, source: SourceSettings
) -> StreamingQuery:
    writer = (
        rows.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .queryName(f"ingest_{options.source}")
    )
    if options.trigger == "continuous":
        writer = writer.trigger(processingTime=source.trigger_interval)
    else:
        writer = writer.trigger(availableNow=True)
    return writer.start(path)


def load_historical(
    spark: SparkSession,
    settings: Settings,
    options: IngestOptions,
    source: SourceSettings,
    path: str,
) -> int:
    """Load a Delta snapshot into bronze once (a re-run finds the handoff and skips it)."""
    from delta.tables import DeltaTable

    assert options.historical is not None
    snapshot_path = _resolve_snapshot(settings, options.historical)
    version = int(DeltaTable.forPath(spark, snapshot_path).history(1).collect()[0]["version"])
    done = [
        e
        for e in tables.read_system_log(spark, settings, INGEST_LOG, options.source)
        if e["event"] == "historical_loaded"
    ]
    if done:
        previous = done[-1]
        if (previous["snapshot"], previous["version"]) != (snapshot_path, version):
            raise StartFromError(
                f"bronze.{options.source} was already seeded from {previous['snapshot']} "
                f"version {previous['version']}; refusing to load a second snapshot on top"
            )
        log.info("historical snapshot already loaded (version %s); skipping", version)
        return 0
    snapshot = spark.read.format("delta").option("versionAsOf", version).load(snapshot_path)
    rows = bronze.historical_to_bronze(
        snapshot, options.source, source.kind, version, source.max_value_bytes
    )
    # Idempotent: a crash after this commit but before the log entry replays as a no-op.
    with runtime_conf(spark, bronze.PARQUET_CONF):
        (
            rows.write.format("delta")
            .mode("append")
            .option("txnAppId", f"lakehouse-historical-{options.source}")
            .option("txnVersion", version)
            .save(path)
        )
    count = snapshot.count()
    tables.append_system_log(
        spark,
        settings,
        INGEST_LOG,
        {
            "event": "historical_loaded",
            "subject": options.source,
            "snapshot": snapshot_path,
            "version": version,
            "rows": count,
        },
    )
    return count


def _record_handoff_offsets(
    spark: SparkSession, settings: Settings, source: str, starting: Offsets
) -> None:
    tables.append_system_log(
        spark,
        settings,
        INGEST_LOG,
        {
            "event": "live_started",
            "subject": source,
            "first_live_offsets": {
                t: {str(p): o for p, o in ps.items()} for t, ps in starting.items()
            },
        },
    )


def _resolve_snapshot(settings: Settings, path_or_table: str) -> str:
    if "/" in path_or_table or ":" in path_or_table:
        return path_or_table
    try:
        return tables.table_path(settings, path_or_table)
    except ValueError as exc:
        raise StartFromError(f"--historical {path_or_table!r}: {exc}") from None
