"""Offsets are ours: start modes, where a checkpoint resumes, what bronze already holds, and
which ranges Kafka has already expired.

Offsets are `{topic: {partition: next_offset_to_read}}` throughout (Kafka's convention).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.core import fs
from lakehouse.core.errors import DataLoss, UsageError
from lakehouse.core.settings import KafkaSettings
from lakehouse.core.specs import SourceSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Offsets = dict[str, dict[int, int]]

START_MODES = ("earliest", "latest", "bronze", "offsets=JSON", "timestamp=MS")


class StartFromError(UsageError):
    """A --start-from value that cannot be used; the message says which form is expected."""


class TopicMissing(UsageError):
    """A source names topics the broker does not have (and bronze never read)."""


def require_topics(
    kafka: KafkaSettings, name: str, source: SourceSettings, read: Callable[[], set[str]]
) -> None:
    """Refuse to start on a topic that does not exist (Spark would fail later, after a page of
    stack, with UnknownTopicOrPartition). A topic bronze did read and that is gone now is a
    deleted topic, which the retention checks report as such. `read` gives the topics bronze
    holds rows of (asked only when a topic is missing)."""
    from lakehouse.core.kafka import metadata

    if not source.topics:
        return  # a pattern may match nothing yet
    present = set(metadata(kafka, source.client_options(), timeout_s=15).topics)
    absent = [t for t in source.topics if t not in present]
    missing = [t for t in absent if t not in read()] if absent else []
    if missing:
        raise TopicMissing(
            f"source {name!r}: topic(s) {missing} do not exist on {kafka.bootstrap_servers}; "
            f"create them (or let their producer create them), or fix sources.{name}.topics"
        )


class TopicRewound(DataLoss):
    """Where bronze resumes is past a partition's end: the topic was deleted and created
    again (or the partition replaced), so its offsets started over."""

    def __init__(self, rewound: list[tuple[str, int, int, int]]) -> None:
        self.rewound = rewound
        parts = "; ".join(
            f"{t} partition {p}: bronze resumes at offset {at} but the partition now ends at {end}"
            for t, p, at, end in rewound
        )
        super().__init__(
            f"{parts}. The topic was deleted and created again: its offsets started over, so "
            "resuming would skip its new records and bronze's lineage would repeat their "
            "offsets. Nothing was read. Give the new topic a new source (its own "
            "bronze_table or source name), or, if it replaces the old one on purpose, move "
            "this source's checkpoint aside and run with --start-from earliest"
        )


class TopicDeleted(DataLoss):
    """A topic bronze was reading no longer exists (a `topic_pattern` source's topic was
    deleted): what it received after the last offset bronze holds cannot be read any more."""

    def __init__(self, source: str, deleted: Offsets) -> None:
        self.deleted = deleted
        parts = "; ".join(
            f"{t} partition {p} no longer exists; bronze holds it up to offset {at - 1}"
            for t, by_partition in sorted(deleted.items())
            for p, at in sorted(by_partition.items())
        )
        super().__init__(
            f"{parts}. Records it received after those, before it was deleted, cannot be "
            f"read any more. Nothing was read. Run {source!r} with --allow-data-loss to record "
            "this in _system/ingest_log and go on with the other topics"
        )


class DataLossError(DataLoss):
    """Kafka no longer holds offsets the job needs (retention). Names every missing range."""

    def __init__(self, gaps: list[Gap]) -> None:
        self.gaps = gaps
        ranges = "; ".join(gap.describe() for gap in gaps)
        super().__init__(
            f"Kafka no longer holds offsets this job needs (expired by retention): {ranges}. "
            "Nothing was written. Re-run with --allow-data-loss to continue from the earliest "
            "available offsets; the gap is then recorded in _system/ingest_log"
        )


@dataclass(frozen=True)
class StartFrom:
    mode: str  # earliest | latest | bronze | offsets | timestamp
    offsets: Offsets | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Gap:
    topic: str
    partition: int
    first_missing: int
    last_missing: int

    def describe(self) -> str:
        return (
            f"{self.topic} partition {self.partition} offsets "
            f"{self.first_missing}..{self.last_missing} "
            f"({self.last_missing - self.first_missing + 1} records)"
        )


def parse_start_from(text: str) -> StartFrom:
    if text in ("earliest", "latest", "bronze"):
        return StartFrom(text)
    if text.startswith("offsets="):
        try:
            raw = json.loads(text[len("offsets=") :])
            offsets = {
                str(topic): {int(p): int(o) for p, o in parts.items()}
                for topic, parts in raw.items()
            }
        except (ValueError, AttributeError, TypeError) as exc:
            raise StartFromError(
                f'--start-from {text!r}: expected offsets={{"topic":{{"0":42}}}} '
                f"(JSON of topic -> partition -> next offset): {exc}"
            ) from None
        if any(o < 0 for parts in offsets.values() for o in parts.values()):
            raise StartFromError(f"--start-from {text!r}: offsets must be >= 0")
        return StartFrom("offsets", offsets=offsets)
    if text.startswith("timestamp="):
        value = text[len("timestamp=") :]
        if not re.fullmatch(r"\d{1,15}", value):
            raise StartFromError(
                f"--start-from {text!r}: expected timestamp=MS (epoch milliseconds, e.g. "
                "timestamp=1767225600000)"
            )
        return StartFrom("timestamp", timestamp_ms=int(value))
    raise StartFromError(f"--start-from {text!r}: use one of {' | '.join(START_MODES)}")


def to_spark_json(offsets: Offsets) -> str:
    return json.dumps(
        {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())}
    )


def checkpoint_exists(spark: SparkSession, checkpoint: str) -> bool:
    """Spark has planned at least one batch from this checkpoint, so it decides the start."""
    return any(n.isdigit() for n in fs.list_names(spark, f"{checkpoint}/offsets"))


def checkpoint_resume_offsets(spark: SparkSession, checkpoint: str) -> Offsets | None:
    """Where a restarted query will read from: the end offsets of the last *committed* batch
    (an uncommitted batch is re-planned from the same start). None if nothing committed yet."""
    raw = fs.committed_source_offset(spark, checkpoint)
    if raw is None:
        return None
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}


def bronze_resume_offsets(spark: SparkSession, bronze_path: str, source: str) -> Offsets:
    """One past the highest offset `source` already wrote to bronze, per topic partition
    (historical rows without Kafka lineage are ignored; so are the rows of other sources
    sharing the table, which may read the same topics at another pace)."""
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("delta")
        .load(bronze_path)
        .where(F.col("source") == source)
        .where(F.col("offset").isNotNull() & F.col("partition").isNotNull())
        .groupBy("topic", "partition")
        .agg(F.max("offset").alias("max_offset"))
        .collect()
    )
    result: Offsets = {}
    for row in rows:
        result.setdefault(row["topic"], {})[int(row["partition"])] = int(row["max_offset"]) + 1
    return result


def topic_partitions(
    kafka: KafkaSettings, source: SourceSettings, timeout_s: float = 30.0
) -> dict[str, list[int]]:
    """The partitions the source reads now (topic list or pattern)."""
    from lakehouse.core.kafka import metadata

    meta = metadata(kafka, source.client_options(), timeout_s)
    if source.topics:
        wanted = [t for t in source.topics if t in meta.topics]
    else:
        # As Spark's Kafka source matches it (`findFirstIn`): anywhere in the name, so the
        # topics checked for loss and given start offsets are exactly the topics it reads.
        pattern = re.compile(source.topic_pattern)
        wanted = sorted(t for t in meta.topics if pattern.search(t))
    return {t: sorted(meta.topics[t].partitions) for t in wanted}


def find_rewound(
    needed: Offsets, marks: Mapping[tuple[str, int], tuple[int, int]]
) -> list[tuple[str, int, int, int]]:
    """(topic, partition, where we resume, where the partition ends) for each partition whose
    end is before where we resume: its offsets started over (a recreated topic)."""
    return [
        (topic, partition, next_offset, marks[(topic, partition)][1])
        for topic, parts in sorted(needed.items())
        for partition, next_offset in sorted(parts.items())
        if (topic, partition) in marks and next_offset > marks[(topic, partition)][1]
    ]


def find_gaps(needed: Offsets, marks: Mapping[tuple[str, int], tuple[int, int]]) -> list[Gap]:
    """Ranges between where we must resume and the earliest offset Kafka still holds."""
    gaps: list[Gap] = []
    for topic, parts in sorted(needed.items()):
        for partition, next_offset in sorted(parts.items()):
            low, _high = marks.get((topic, partition), (0, 0))
            if next_offset < low:
                gaps.append(Gap(topic, partition, next_offset, low - 1))
    return gaps


def complete(start: Offsets, partitions: Mapping[str, Iterable[int]], default: int = -2) -> Offsets:
    """Spark wants an offset for every partition it assigns: fill the ones the start does not
    name with `default` (-2 = earliest, -1 = latest)."""
    result: Offsets = {}
    for topic, parts in partitions.items():
        given = start.get(topic, {})
        result[topic] = {p: given.get(p, default) for p in parts}
    return result


def concrete(start: Offsets) -> Offsets:
    """The offsets a start relies on Kafka still holding (-2/-1 are earliest/latest markers)."""
    return {t: {p: o for p, o in parts.items() if o >= 0} for t, parts in start.items()}


def clamp_to_available(start: Offsets, marks: Mapping[tuple[str, int], tuple[int, int]]) -> Offsets:
    """With --allow-data-loss: start each partition at max(wanted, earliest available)."""
    return {
        topic: {
            p: (o if o < 0 else max(o, marks.get((topic, p), (0, 0))[0])) for p, o in parts.items()
        }
        for topic, parts in start.items()
    }
