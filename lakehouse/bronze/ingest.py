"""Kafka -> bronze, exactly once: the library behind `ingest_events` and `ingest_cdc`.

Exactly-once comes from Spark's checkpoint plus the Delta sink's idempotent commits (each
micro-batch commits with the query's id and batch id as a Delta transaction, so a batch replayed
after a crash is skipped). When a checkpoint is lost, the job resumes one past the highest offset
bronze holds per partition (`--start-from bronze`, also the default without a checkpoint), so
nothing is duplicated and nothing skipped. What Kafka no longer holds is `retention`'s.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lakehouse.bronze import historical, offsets, retention
from lakehouse.bronze import transform as bronze
from lakehouse.bronze.offsets import Offsets, StartFrom, StartFromError
from lakehouse.core import compaction, fs, kafka, protection, tables
from lakehouse.core.jobs import base_parser
from lakehouse.core.kafka import spark_options
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.spark import runtime_conf
from lakehouse.core.specs import SourceSettings
from lakehouse.core.streaming import await_query, check_trigger, with_trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

CHECKPOINTS = "ingest"  # checkpoints live in _checkpoints/ingest/<source>
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

    def summary(self) -> str:
        """The run in one line (a job prints it last on stdout)."""
        extra = f", {self.historical_rows} historical row(s) loaded" if self.historical_rows else ""
        if self.gaps:
            extra += f", {len(self.gaps)} gap(s) recorded in _system/ingest_log"
        return (
            f"{self.source}: {self.rows} record(s) ingested into {self.bronze_path} "
            f"in {self.batches} batch(es){extra}"
        )


def ingest_parser(job: str, description: str) -> argparse.ArgumentParser:
    """The flags of `ingest_events` and `ingest_cdc` (the same flags, a different kind)."""
    parser = base_parser(job, description)
    parser.add_argument("--source", required=True, help="a source from conf/*/sources.yml")
    parser.add_argument(
        "--start-from",
        type=_start_from,
        default=None,
        help='earliest | latest | bronze | offsets={"topic":{"0":42}} | timestamp=MS '
        "(only for a new checkpoint; default: the checkpoint, else where bronze ends, "
        "else earliest)",
    )
    parser.add_argument(
        "--historical",
        metavar="PATH_OR_TABLE",
        help="load this Delta snapshot into bronze first, then go live from --start-from",
    )
    parser.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="continue past offsets Kafka no longer holds, recording each gap",
    )
    return parser


def _start_from(text: str) -> StartFrom:
    try:
        return offsets.parse_start_from(text)
    except StartFromError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def options_from_args(args: argparse.Namespace) -> IngestOptions:
    return IngestOptions(
        args.source, args.start_from, args.trigger, args.historical, args.allow_data_loss
    )


def bronze_path(settings: Settings, source: str) -> str:
    return tables.table_path(settings, settings.bronze_table(source))


def ingest(
    spark: SparkSession, settings: Settings, options: IngestOptions, kind: str
) -> IngestResult:
    """Run one ingest job for `options.source`, which must be of `kind` (events | cdc)."""
    source = _check(settings, options, kind)
    path = bronze_path(settings, options.source)

    def read_topics() -> set[str]:
        if not tables.exists(spark, path):
            return set()
        return set(offsets.bronze_resume_offsets(spark, path, options.source))

    offsets.require_topics(settings.kafka, options.source, source, read_topics)
    result = IngestResult(options.source, path)
    if not _ensure_table(spark, path, kind):
        protection.require_intact(spark, settings, settings.bronze_table(options.source), path)
    lost: retention.LostWhileReading | None = None
    while True:
        try:
            _run(spark, settings, options, source, kind, result, lost)
            return result
        except retention.LostWhileReading as exc:
            if not options.allow_data_loss:
                raise
            log.warning("%s; --allow-data-loss: recording the gap and going on", exc)
            # The checkpoint stops where the loss began: the next pass finds it as a gap.
            lost, options = exc, replace(options, start_from=None, historical=None)


def _run(
    spark: SparkSession,
    settings: Settings,
    options: IngestOptions,
    source: SourceSettings,
    kind: str,
    result: IngestResult,
    lost: retention.LostWhileReading | None,
) -> None:
    """One query: from the checkpoint (or the start asked for) until it ends or stops."""
    path = result.bronze_path
    checkpoint = tables.checkpoint_path(settings, CHECKPOINTS, options.source)
    has_checkpoint = offsets.checkpoint_exists(spark, checkpoint)
    if has_checkpoint and (options.start_from is not None or options.historical):
        raise StartFromError(
            f"checkpoint {checkpoint} already records where {options.source!r} resumes, so "
            "--start-from/--historical would be ignored; drop those flags, or move the "
            "checkpoint away first (then --start-from bronze resumes without duplicates)"
        )
    if options.historical:
        if options.start_from and options.start_from.mode == "bronze":
            historical.require_lineage(spark, settings, options.historical)
        result.historical_rows = historical.load(
            spark, settings, options.source, options.historical, source, path
        )
    if has_checkpoint:
        # The checkpoint decides where the query resumes; `start` is not read.
        start = StartFrom("earliest")
        starting, needed = None, offsets.checkpoint_resume_offsets(spark, checkpoint) or {}
    else:
        start = options.start_from or _default_start(spark, path, options.source)
        starting, needed = _starting_offsets(spark, settings, source, start, path, options.source)
    deleted = retention.deleted_topics(settings, source, needed)
    if deleted:
        retention.accept_deleted(spark, settings, options.source, deleted, options.allow_data_loss)
        if has_checkpoint:
            # Spark refuses to resume a checkpoint with partitions that are gone: start a new
            # one where bronze ends in the topics that remain (as after a gap, below).
            fs.delete(spark, checkpoint)
            has_checkpoint, start = False, StartFrom("bronze")
            starting, needed = _starting_offsets(
                spark, settings, source, start, path, options.source
            )
        needed = {t: parts for t, parts in needed.items() if t not in deleted}
    gaps, marks = retention.find(settings, source, needed)
    rewound = offsets.find_rewound(needed, marks)
    if rewound:
        raise offsets.TopicRewound(rewound)  # no flag makes skipping new records right
    if lost is not None and not gaps:
        raise lost  # a loss the offsets do not explain (e.g. a deleted partition): stop
    if gaps:
        retention.accept(spark, settings, options.source, gaps, options.allow_data_loss)
        result.gaps += gaps
        if has_checkpoint:
            # Spark resumes a checkpoint exactly where it stopped, inside the gap. Start a new
            # one where bronze ends instead (never a duplicate: bronze holds what was written,
            # also a batch the old checkpoint had not marked committed).
            fs.delete(spark, checkpoint)
            start = StartFrom("bronze")
            starting, _ = _starting_offsets(spark, settings, source, start, path, options.source)
        if isinstance(starting, dict):
            starting = offsets.clamp_to_available(starting, marks)
    if options.historical and isinstance(starting, dict):
        historical.record_handoff(spark, settings, options.source, starting)

    stream = _read_kafka(spark, settings, source, start, starting)
    rows = bronze.kafka_to_bronze(stream, options.source, kind, source.max_value_bytes)
    before = tables.latest_version(spark, path)
    # The query runs on a copy of the session taken at start(), so the settings stay with it.
    with runtime_conf(spark, WRITE_CONF):
        query = _write_bronze(rows, path, checkpoint, options, source)
    # Spark's Delta sink adds files every batch: compacted between the query's polls.
    compactor = compaction.Compactor(spark, path, settings.storage.compact_every)
    try:
        await_query(query, options.trigger, progress=True, between=lambda: compactor.poll(query))
    except Exception as exc:
        lost = retention.lost_while_reading(options.source, exc)
        if lost is None:
            raise
        raise lost from exc
    finally:
        # Counted from the query's commits: Spark keeps only its last 100 progress reports.
        written = tables.query_commits(spark, path, str(query.id), before)
        result.batches += len(written)
        result.rows += sum(written)


def _default_start(spark: SparkSession, path: str, name: str) -> StartFrom:
    """No checkpoint and no --start-from: where this source's rows in bronze end (a lost
    checkpoint must not re-read, and so duplicate, what Kafka still holds), else earliest."""
    if offsets.bronze_resume_offsets(spark, path, name):
        log.warning("no checkpoint for %r: resuming where its rows in bronze end", name)
        return StartFrom("bronze")
    return StartFrom("earliest")


def _check(settings: Settings, options: IngestOptions, kind: str) -> SourceSettings:
    source = settings.source(options.source)
    if source.kind != kind:
        job = "ingest_cdc" if source.kind == "cdc" else "ingest_events"
        raise SettingsError(
            f"--source {options.source!r} is a {source.kind} source; run it with {job}"
        )
    check_trigger(options.trigger)
    if options.historical and (
        options.start_from is None or options.start_from.mode not in ("offsets", "bronze")
    ):
        raise StartFromError(
            "--historical needs --start-from offsets=JSON (the first live offsets after "
            "the snapshot) or --start-from bronze"
        )
    return source


def _ensure_table(spark: SparkSession, path: str, kind: str) -> bool:
    """Create the bronze table with its contract (True), or check the one there has it."""
    schema = bronze.bronze_schema(kind)
    created = tables.create_table(
        spark, path, schema, bronze.bronze_properties(kind), bronze.PARTITION_COLUMNS
    )
    if not created:
        tables.require_columns(spark, path, schema)
    return created


def _starting_offsets(
    spark: SparkSession,
    settings: Settings,
    source: SourceSettings,
    start: StartFrom,
    path: str,
    name: str,
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
    written = offsets.bronze_resume_offsets(spark, path, name)
    resume = offsets.complete(written, partitions)
    # A topic bronze read that the broker no longer has: not read again, but what it held
    # after bronze's last offset is gone, so it stays in what is needed, to be named.
    unread = {t: parts for t, parts in written.items() if t not in partitions}
    existing = kafka.topic_names(settings.kafka, source.client_options()) if unread else set()
    gone = {t: parts for t, parts in unread.items() if t not in existing}
    return resume, {**offsets.concrete(resume), **gone}


def _read_kafka(
    spark: SparkSession,
    settings: Settings,
    source: SourceSettings,
    start: StartFrom,
    starting: Offsets | str | None,
) -> DataFrame:
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_options(settings.kafka))
        # Records of aborted transactions stay in the log; they never happened, so they are
        # not bronze data. A source may still ask for `isolation.level: read_uncommitted`.
        .option("kafka.isolation.level", "read_committed")
        .options(**{f"kafka.{k}": v for k, v in source.client_options().items()})
        .option("includeHeaders", "true")
        # Every loss fails the query; `retention` names it, and records it when allowed.
        .option("failOnDataLoss", "true")
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
        # A partition with no record at or after it starts at its end (Spark's default fails).
        reader = reader.option("startingOffsetsByTimestampStrategy", "latest")
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
    return with_trigger(writer, options.trigger, source.trigger_interval).start(path)


def reset(spark: SparkSession, settings: Settings, table: str) -> int:
    """`lakehouse reset bronze.X`: drop the table and the checkpoints of every source landing in
    it, so the next ingest starts over. Refused while the table is protected (it always is,
    until an operator lifts protection: its data may no longer exist in Kafka). Returns how
    many checkpoints were removed."""
    path = protection.existing(spark, settings, table)
    protection.require_resettable(spark, path, f"reset of {table}")
    feeding = [name for name in settings.sources if settings.bronze_table(name) == table]
    for location in (path, *(tables.checkpoint_path(settings, CHECKPOINTS, n) for n in feeding)):
        fs.delete(spark, location)
    protection.record_reset(spark, settings, table)
    return len(feeding)
