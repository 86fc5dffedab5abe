"""Delta table I/O: where tables live, creating them with their contract, reset protection and
the `_system` tables operators read (ingest handoffs, gaps, protection changes)."""

from __future__ import annotations

import getpass
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakehouse.core import fs
from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructField, StructType

LAYERS = ("bronze", "silver", "gold", "offline", "_system")
_NAME = re.compile(r"(?P<layer>bronze|silver|gold|offline|_system)\.(?P<table>[a-z][a-z0-9_]*)")

RESET_ALLOWED = "pipelines.reset.allowed"


class ProtectedTableError(RuntimeError):
    """A destructive operation on a protected table was refused."""


class OutdatedTableError(ValueError):
    """An existing table lacks columns this version writes (it was created by an older one)."""


def table_path(settings: Settings, name: str) -> str:
    """`bronze.orders` -> `<root>/bronze/orders`."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"table name {name!r}: use LAYER.TABLE with LAYER one of {', '.join(LAYERS)} "
            "and a lower_snake_case table, e.g. bronze.orders"
        )
    return settings.storage.path(match["layer"], match["table"])


def checkpoint_path(settings: Settings, job: str, name: str) -> str:
    return settings.storage.path("_checkpoints", job, name)


def exists(spark: SparkSession, path: str) -> bool:
    """A Delta table is there when its log holds its first commit or a checkpoint (log
    cleanup removes commits only after a checkpoint, which writes `_last_checkpoint`). Two
    file probes, not a listing of a long log nor a log replay: this runs at the start of
    every scheduled job."""
    log_dir = f"{path.rstrip('/')}/_delta_log"
    return fs.exists(spark, f"{log_dir}/{0:020d}.json") or fs.exists(
        spark, f"{log_dir}/_last_checkpoint"
    )


def create_table(
    spark: SparkSession,
    path: str,
    schema: StructType,
    properties: Mapping[str, str],
    partition_by: Sequence[str] = (),
) -> bool:
    """Create the table with an explicit schema and properties unless it exists (idempotent;
    concurrent creators are fine: Delta lets exactly one of them commit version 0). True when
    the table was not there before."""
    from delta.tables import DeltaTable

    if exists(spark, path):
        return False
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in properties.items():
        builder = builder.property(key, value)
    if partition_by:
        builder = builder.partitionedBy(*partition_by)
    builder.execute()
    return True


def missing_columns(
    spark: SparkSession, path: str, fields: Sequence[StructField]
) -> list[StructField]:
    """The `fields` the table at `path` does not have (by name), in their order."""
    have = set(spark.read.format("delta").load(path).columns)
    return [f for f in fields if f.name not in have]


def columns_ddl(fields: Sequence[StructField]) -> str:
    """`fields` as the column list of ALTER TABLE ... ADD COLUMNS (names quoted)."""
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in fields)


def require_columns(spark: SparkSession, path: str, schema: StructType) -> None:
    """Refuse, with the statement that fixes it, an existing table that lacks a column of
    `schema`: otherwise the write fails later with Delta's schema mismatch, which suggests a
    writer option the jobs do not expose."""
    missing = missing_columns(spark, path, schema.fields)
    if missing:
        raise OutdatedTableError(
            f"table {path} lacks column(s) {', '.join(f.name for f in missing)} that this "
            "version writes (an older version created it); add them, then run again: "
            f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns_ddl(missing)})"
        )


def properties(spark: SparkSession, path: str) -> dict[str, str]:
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().collect()[0]
    return dict(detail["properties"] or {})


def require_resettable(spark: SparkSession, path: str, operation: str) -> None:
    """Our own check before any destructive command: a protected table refuses loudly
    (Spark Declarative Pipelines would silently skip it)."""
    if not exists(spark, path):
        return
    props = properties(spark, path)
    if (
        props.get(RESET_ALLOWED, "true").lower() == "false"
        or props.get("delta.appendOnly", "false").lower() == "true"
    ):
        raise ProtectedTableError(
            f"{operation} refused: {path} is protected ({RESET_ALLOWED}=false, "
            "delta.appendOnly=true) because its data may no longer exist in Kafka. "
            "If you really mean it, lift protection first (recorded): "
            "lakehouse unprotect TABLE --reason '...'"
        )


def system_log_path(settings: Settings, log: str) -> str:
    return settings.storage.path("_system", log)


def append_system_log(
    spark: SparkSession, settings: Settings, log: str, record: Mapping[str, Any]
) -> None:
    """Append one event to `_system/<log>` (who, when, what as JSON): an audit trail that
    notebooks and `lakehouse status` read."""
    from pyspark.sql.types import StringType, StructField, StructType, TimestampType

    schema = StructType(
        [
            StructField("at", TimestampType()),
            StructField("user", StringType()),
            StructField("event", StringType()),
            StructField("subject", StringType()),
            StructField("details", StringType()),
        ]
    )
    row = (
        datetime.now(UTC).replace(tzinfo=None),
        getpass.getuser(),
        str(record["event"]),
        str(record["subject"]),
        json.dumps({k: v for k, v in record.items() if k not in ("event", "subject")}, default=str),
    )
    path = system_log_path(settings, log)
    create_table(spark, path, schema, {"delta.appendOnly": "true"})
    spark.createDataFrame([row], schema).write.format("delta").mode("append").save(path)


def read_system_log(
    spark: SparkSession, settings: Settings, log: str, subject: str
) -> list[dict[str, Any]]:
    path = system_log_path(settings, log)
    if not exists(spark, path):
        return []
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("delta")
        .load(path)
        .where(F.col("subject") == subject)
        .orderBy("at")
        .collect()
    )
    return [{"event": r["event"], "at": r["at"], **json.loads(r["details"])} for r in rows]


PROTECTION_LOG = "protection_log"
PROTECTED = {"delta.appendOnly": "true", RESET_ALLOWED: "false"}
UNPROTECTED = {"delta.appendOnly": "false", RESET_ALLOWED: "true"}


def _set_properties(spark: SparkSession, path: str, props: Mapping[str, str]) -> int:
    from delta.tables import DeltaTable

    assignments = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({assignments})")
    return int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])


def unprotect(spark: SparkSession, settings: Settings, name: str, reason: str) -> int:
    """Lift reset protection: an explicit, recorded operator action. Returns the table version."""
    if not reason.strip():
        raise ValueError("unprotect needs --reason: say why, it goes to _system/protection_log")
    path = _existing(spark, settings, name)
    version = _set_properties(spark, path, UNPROTECTED)
    append_system_log(
        spark,
        settings,
        PROTECTION_LOG,
        {"event": "unprotect", "subject": name, "reason": reason, "version": version},
    )
    return version


def protect(spark: SparkSession, settings: Settings, name: str) -> int:
    path = _existing(spark, settings, name)
    version = _set_properties(spark, path, PROTECTED)
    append_system_log(
        spark, settings, PROTECTION_LOG, {"event": "protect", "subject": name, "version": version}
    )
    return version


def reset(spark: SparkSession, settings: Settings, name: str, checkpoints: Sequence[str]) -> None:
    """Full refresh: drop the table's data and the checkpoints that feed it. Refused for a
    protected table; allowed (and recorded) once an operator has lifted protection."""
    path = _existing(spark, settings, name)
    require_resettable(spark, path, f"reset of {name}")
    for location in (path, *checkpoints):
        fs.delete(spark, location)
    append_system_log(spark, settings, PROTECTION_LOG, {"event": "reset", "subject": name})


def _existing(spark: SparkSession, settings: Settings, name: str) -> str:
    path = table_path(settings, name)
    if not exists(spark, path):
        raise ValueError(f"{name}: no Delta table at {path}")
    return path
