"""Data Kafka no longer holds: found before a run starts, or met while it reads; refused (exit 3)
or, with `--allow-data-loss`, recorded in `_system/ingest_log` as one gap row per range.

Spark's own `failOnDataLoss=false` is never used: it would skip every later loss of a long
running query silently. The query always fails on a loss; the job decides what happens next.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakehouse.bronze import offsets
from lakehouse.bronze.offsets import DataLossError, Gap, Offsets, TopicDeleted
from lakehouse.core import faults, kafka, system
from lakehouse.core.errors import DataLoss
from lakehouse.core.settings import Settings
from lakehouse.core.specs import SourceSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Marks = Mapping[tuple[str, int], tuple[int, int]]

# What Spark's Kafka source says, in the error or one of its causes, when offsets it must read
# are gone (KafkaIllegalStateException, also wrapped in TASK_WRITE_FAILED by the sink).
_SPARK_LOSS = "Some data may have been lost because they are not available in Kafka any more"


class LostWhileReading(DataLoss):
    """Kafka removed offsets while the query read them (retention overtook it, or the topic
    was deleted); the batch that met the loss was not committed."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(
            f"Kafka no longer holds offsets {source!r} was reading ({reason}): retention "
            "overtook the job or the topic was deleted. The batch was not written. Run the job "
            "again: it names the missing ranges; with --allow-data-loss it records them "
            "and goes on"
        )


def lost_while_reading(source: str, error: BaseException) -> LostWhileReading | None:
    """The loss `error` (a failed streaming query) reports, if that is why it failed."""
    texts: list[str] = []
    seen: BaseException | None = error
    for _ in range(20):  # the cause chain, bounded
        if seen is None:
            break
        texts += [str(seen), str(getattr(seen, "_stackTrace", "") or "")]
        seen = getattr(seen, "cause", None) or seen.__cause__
    text = "\n".join(texts)
    if _SPARK_LOSS not in text:
        return None
    after = text.split("Reason: ", 1)
    reason = after[1].splitlines()[0].strip() if len(after) == 2 else "Spark's Kafka source"
    return LostWhileReading(source, reason)


def find(settings: Settings, source: SourceSettings, needed: Offsets) -> tuple[list[Gap], Marks]:
    """The ranges of `needed` (offsets we rely on Kafka still holding) it no longer holds."""
    # Only ask Kafka for watermarks when there is an offset we rely on it still holding.
    marks = kafka.watermarks(settings.kafka, needed, source.client_options()) if needed else {}
    return offsets.find_gaps(needed, marks), marks


def deleted_topics(settings: Settings, source: SourceSettings, needed: Offsets) -> Offsets:
    """The topics of `needed` (where bronze resumes) that the broker no longer has."""
    if not needed:
        return {}
    existing = kafka.topic_names(settings.kafka, source.client_options())
    return {topic: parts for topic, parts in needed.items() if topic not in existing}


def accept_deleted(
    spark: SparkSession, settings: Settings, name: str, deleted: Offsets, allowed: bool
) -> None:
    """Refuse reading on without deleted topics (TopicDeleted, exit 3) unless `allowed`; then
    record each deleted partition and where bronze stopped in it, once."""
    if not allowed:
        raise TopicDeleted(name, deleted)
    records = []
    for topic, parts in sorted(deleted.items()):
        for partition, first_missing in sorted(parts.items()):
            log.warning(
                "--allow-data-loss: %s partition %d was deleted; bronze holds it up to offset "
                "%d, going on without it",
                topic,
                partition,
                first_missing - 1,
            )
            records.append({"topic": topic, "partition": partition, "first_missing": first_missing})
    _record_once(spark, settings, name, "topic_deleted", records)


def accept(
    spark: SparkSession, settings: Settings, name: str, gaps: list[Gap], allowed: bool
) -> None:
    """Refuse the loss (DataLossError, exit 3) unless `allowed`; then record each gap once."""
    if not allowed:
        raise DataLossError(gaps)
    for gap in gaps:
        log.warning("data loss accepted by --allow-data-loss: %s", gap.describe())
    _record_once(spark, settings, name, "gap", [dict(gap.__dict__) for gap in gaps])
    faults.point("after_gaps_recorded")


def _record_once(
    spark: SparkSession, settings: Settings, name: str, event: str, records: list[dict[str, Any]]
) -> None:
    """Append each record to `_system/ingest_log` as an `event` of source `name`, unless the
    log holds it already: a run that failed after recording is retried with the same
    checkpoint and finds the same losses."""
    if not records:
        return
    logged = system.read_log(spark, settings, system.INGEST_LOG, name)
    recorded = [{k: e.get(k) for k in records[0]} for e in logged if e["event"] == event]
    for record in records:
        if record not in recorded:
            system.append_log(
                spark, settings, system.INGEST_LOG, {"event": event, "subject": name, **record}
            )
