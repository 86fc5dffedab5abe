"""The `_system` tables: every name in one place, and the audit log they share.

Audit logs (`ingest_log`, `protection_log`, `refine_log`, `validation_log`, ...) hold one row per
event: when, who, the event, its subject (a table or source) and the details as JSON, so
notebooks and `lakehouse status` read them all the same way. The quarantine and the expectation
metrics have schemas of their own (`lakehouse.quality`).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse.core import tables
from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

# Audit logs (schema: `log_schema`).
INGEST_LOG = "ingest_log"  # historical handoffs, accepted gaps
PROTECTION_LOG = "protection_log"  # protect, unprotect, reset
REFINE_LOG = "refine_log"  # full refreshes, quarantine replays
VALIDATION_LOG = "validation_log"  # `lakehouse validate` results
OFFLINE_LOG = "offline_log"  # realtime_to_offline plans and moves
GOLD_LOG = "gold_log"  # build_gold plans, builds and full refreshes
# Tables with schemas of their own.
QUARANTINE = "quarantine"  # rejected records (lakehouse.quality.quarantine)
METRICS = "expectation_metrics"  # per batch and rule (lakehouse.quality.metrics)
TIME_BOUNDARY = "time_boundary"  # per offline table (lakehouse.offline.boundary)
BACKFILL_LOG = "backfill_log"  # every backfill run (lakehouse.offline.audit)


def path(settings: Settings, name: str) -> str:
    return settings.storage.path("_system", name)


def log_schema() -> StructType:
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    return StructType(
        [
            StructField("at", TimestampType()),
            StructField("user", StringType()),
            StructField("event", StringType()),
            StructField("subject", StringType()),
            StructField("details", StringType()),
        ]
    )


def append_log(
    spark: SparkSession, settings: Settings, log: str, record: Mapping[str, Any]
) -> None:
    """Append one event to `_system/<log>` (who, when, what as JSON): an audit trail that
    notebooks and `lakehouse status` read."""
    row = (
        datetime.now(UTC).replace(tzinfo=None),
        getpass.getuser(),
        str(record["event"]),
        str(record["subject"]),
        json.dumps({k: v for k, v in record.items() if k not in ("event", "subject")}, default=str),
    )
    location = path(settings, log)
    tables.create_table(spark, location, log_schema(), {"delta.appendOnly": "true"})
    spark.createDataFrame([row], log_schema()).write.format("delta").mode("append").save(location)


def read_log(
    spark: SparkSession, settings: Settings, log: str, subject: str
) -> list[dict[str, Any]]:
    """The events of `subject` in `_system/<log>`, oldest first, details unpacked."""
    location = path(settings, log)
    if not tables.exists(spark, location):
        return []
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("delta")
        .load(location)
        .where(F.col("subject") == subject)
        .orderBy("at")
        .collect()
    )
    return [{"event": r["event"], "at": r["at"], **json.loads(r["details"])} for r in rows]
