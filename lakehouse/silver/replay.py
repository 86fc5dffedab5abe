"""`lakehouse replay TABLE`: quarantined records of a silver table re-checked after a repair
(`--fix COLUMN=SQL`, or an edit of `record` in `_system/quarantine`), applied to silver through
the same write as `refine_silver` when they now pass.

Idempotent per table: each replay of a table gets the next number `n` and pins the quarantine
version it reads, recorded in `_system/refine_log` before anything is written. The silver write
and the quarantine update carry `n` as their Delta transaction, so a replay cut off half-way is
finished by the next call (same rows, same fixes) and writes nothing twice, whatever other
tables committed to the shared quarantine meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import reduce
from typing import TYPE_CHECKING

from lakehouse.core import system, tables
from lakehouse.core.columns import named
from lakehouse.core.current import is_bookkeeping
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.quality.expectations import check_fail_rules, failed_names, kept
from lakehouse.quality.quarantine import QUARANTINED, replay_status
from lakehouse.silver import connect_schema, toast
from lakehouse.silver import transform as silver
from lakehouse.silver.batch import batch_stats, write_silver
from lakehouse.silver.changes import OP, SEQ, TS, UPSERT_OPS
from lakehouse.silver.plan import JOB, Plan, prepare, silver_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_ID = "_lh_id"  # the quarantined row's id, carried through the re-check
_PARSE_ERROR = "_lh_parse_error"  # the reason it was quarantined, carried through the fixes


@dataclass(frozen=True)
class ReplayResult:
    table: str
    considered: int
    replayed: int
    dropped: int
    still_quarantined: int


def replay_quarantine(
    spark: SparkSession,
    settings: Settings,
    name: str,
    fixes: Sequence[tuple[str, str]] = (),
    where: str | None = None,
) -> ReplayResult:
    """Replay quarantined records of silver.`name` (optionally only those matching `where`),
    after applying `fixes` (column, SQL expression) to the parsed record: records that now
    pass go to silver through the same apply as refine_silver, those a drop rule rejects are
    marked dropped, the rest stay quarantined with their new failed rules and fixed record."""
    table = settings.silver_table(name)
    kind = settings.source(table.source).records
    path = silver_path(settings, name)
    if not tables.exists(spark, path):
        raise SettingsError(f"silver.{name} does not exist yet; run refine_silver --table {name}")
    plan = prepare(spark, settings, name, table, kind, path)
    n, version = _pin(spark, settings, plan, fixes, where)
    row = _row_schema(spark, path)
    pending = _as_records(_pending(spark, plan, version, where), row, kind)
    records = _blocked(_apply_fixes(pending, fixes, row, name), row)
    evaluated = plan.evaluated(records).persist()
    try:
        stats = batch_stats(evaluated.drop(_ID), plan.expectations)
        check_fail_rules(evaluated.drop(*silver.TRANSIENT, _ID), plan.expectations, stats.per_rule)
        # `replays:`, not the `replay:` of the releases that keyed this by quarantine version:
        # Delta would skip numbers below the versions already recorded under that id.
        replay_plan = Plan(**{**plan.__dict__, "run_id": f"replays:{plan.run_id}"})
        kept_rows = kept(evaluated, plan.expectations).drop(_ID)
        # Truncates are never quarantined: a replayed batch holds none to apply.
        write_silver(spark, replay_plan, kept_rows, replace(stats, truncates=()), n)
        _settle(spark, plan, evaluated, row, n)
    finally:
        evaluated.unpersist()
    result = ReplayResult(name, stats.rows, stats.written, stats.dropped, stats.quarantined)
    system.append_log(
        spark,
        settings,
        system.REFINE_LOG,
        {
            "event": "quarantine_replay",
            "subject": f"silver.{name}",
            "n": n,
            "fixes": list(fixes),
            "where": where,
            **result.__dict__,
        },
    )
    return result


def _pin(
    spark: SparkSession,
    settings: Settings,
    plan: Plan,
    fixes: Sequence[tuple[str, str]],
    where: str | None,
) -> tuple[int, int]:
    """(this replay's number, the quarantine version it reads): those of a replay of the table
    that started and did not finish, which this call then finishes, else the next number and
    the latest version, recorded before anything is written."""
    events = system.read_log(spark, settings, system.REFINE_LOG, f"silver.{plan.name}")
    started = {e["n"]: e for e in events if e["event"] == "quarantine_replay_started"}
    finished = {e.get("n") for e in events if e["event"] == "quarantine_replay"}
    open_ = [e for n, e in sorted(started.items()) if n not in finished]
    if open_:
        last = open_[-1]
        if (last["fixes"], last["where"]) != ([list(f) for f in fixes], where):
            raise SettingsError(
                f"replay {last['n']} of silver.{plan.name} (fixes {last['fixes']}, where "
                f"{last['where']!r}) did not finish: run `lakehouse replay` again with the "
                "same --fix and --where to finish it first"
            )
        return int(last["n"]), int(last["quarantine_version"])
    n = max(started, default=0) + 1
    version = tables.latest_version(spark, plan.quarantine_path)
    system.append_log(
        spark,
        settings,
        system.REFINE_LOG,
        {
            "event": "quarantine_replay_started",
            "subject": f"silver.{plan.name}",
            "n": n,
            "quarantine_version": version,
            "fixes": [list(f) for f in fixes],
            "where": where,
        },
    )
    return n, version


def _row_schema(spark: SparkSession, path: str) -> StructType:
    """The silver row's columns (without bookkeeping): what a quarantined `record` holds."""
    from pyspark.sql.types import StructType

    schema = spark.read.format("delta").load(path).schema
    return StructType([f for f in schema.fields if not is_bookkeeping(f.name)])


def _pending(spark: SparkSession, plan: Plan, version: int, where: str | None) -> DataFrame:
    """The table's quarantined rows at the quarantine's `version`, optionally filtered."""
    pending = (
        spark.read.format("delta")
        .option("versionAsOf", version)
        .load(plan.quarantine_path)
        .where(f"`table` = '{plan.name}' AND status = '{QUARANTINED}'")
    )
    return pending.where(where) if where else pending


def _as_records(pending: DataFrame, row: StructType, kind: str) -> DataFrame:
    """Quarantined rows back in the shape of a refine batch's records."""
    from pyspark.sql import functions as F

    parsed = F.from_json(F.col("record"), row)
    change = [
        F.col("op").alias(OP),
        F.col("seq").alias(SEQ),
        F.lit(None).cast("timestamp").alias(TS),
    ]
    records = pending.select(
        F.col("id").alias(_ID),
        F.col("topic").alias(silver.TOPIC),
        F.col("partition").alias(silver.PARTITION),
        F.col("offset").alias(silver.OFFSET),
        F.col("raw_key").alias(silver.RAW_KEY),
        F.col("raw_value").alias(silver.RAW_VALUE),
        F.lit(None).cast("string").alias(silver.VALUE_ERROR),
        # A record that never parsed has nothing to replay until an operator writes one into
        # `record`: it keeps its parse error, so the `parsable` rule keeps it quarantined
        # (else it would replay as a row of NULLs). A change without an op (or one that cannot
        # be ordered) has nothing to apply. `_blocked` adds what a fix can repair.
        F.when(
            F.col("parse_error").isNotNull() & F.coalesce(F.col("record"), F.lit("{}")).isin("{}"),
            F.col("parse_error"),
        )
        .when(
            F.lit(kind in ("cdc", "changes"))
            & F.col("parse_error").isNotNull()
            & (F.col("op").isNull() | F.col("parse_error").startswith("over_")),
            F.col("parse_error"),
        )
        .alias(silver.ERROR),
        F.col("parse_error").alias(_PARSE_ERROR),
        F.array().cast("array<string>").alias(silver.UNKNOWN),
        F.array().cast("array<string>").alias(silver.MISTYPED),
        F.array().cast("array<string>").alias(silver.UNDECLARED),
        *[parsed[f.name].alias(f.name) for f in row.fields],
        *(change if kind in ("cdc", "changes") else []),
    )
    checked = F.col(OP).isin(*UPSERT_OPS) if kind in ("cdc", "changes") else F.lit(True)
    return records.withColumn(silver.CHECKED, checked)


def _blocked(records: DataFrame, row: StructType) -> DataFrame:
    """After the fixes: a change quarantined as `undecodable: a, b` stays quarantined while a
    listed column is still NULL, as does one quarantined as `schema_mismatch: a (...)`, one
    quarantined for an unchanged-TOAST placeholder while a column still holds the placeholder
    (until an operator writes the real values in)."""
    from pyspark.sql import functions as F

    error = F.col(_PARSE_ERROR)
    listed = F.split(F.regexp_extract(error, f"^{silver.UNDECODABLE}(.*)$", 1), ", ")
    missing = [F.array_contains(listed, f.name) & named(f.name).isNull() for f in row.fields]
    placeholders = [
        toast.is_placeholder(named(f.name), f.dataType)
        for f in row.fields
        if toast.takes_placeholder(f.dataType)
    ]
    # A column the record's schema contradicted was stored NULL in `record`: it is listed as
    # `name (what was sent, read as ...)`.
    mismatched = [
        (error.contains(f": {f.name} (") | error.contains(f", {f.name} (")) & named(f.name).isNull()
        for f in row.fields
    ]
    still = (
        (error.startswith(silver.UNDECODABLE) & reduce(lambda a, b: a | b, missing, F.lit(False)))
        | (
            error.startswith(connect_schema.PREFIX)
            & reduce(lambda a, b: a | b, mismatched, F.lit(False))
        )
        | (
            error.startswith("unresolved_toast")
            & reduce(lambda a, b: a | b, placeholders, F.lit(False))
        )
    )
    blocked = F.coalesce(F.col(silver.ERROR), F.when(still, error))
    return records.withColumn(silver.ERROR, blocked).drop(_PARSE_ERROR)


def _apply_fixes(
    records: DataFrame, fixes: Sequence[tuple[str, str]], row: StructType, name: str
) -> DataFrame:
    from pyspark.sql import functions as F

    for column, expression in fixes:
        if column not in row.fieldNames():
            raise SettingsError(
                f"--fix {column}=...: {column!r} is not a column of silver.{name} "
                f"(columns: {', '.join(row.fieldNames())})"
            )
        records = records.withColumn(column, F.expr(expression).cast(row[column].dataType))
    return records


def _settle(spark: SparkSession, plan: Plan, evaluated: DataFrame, row: StructType, n: int) -> None:
    """Mark each re-checked row replayed, dropped or still quarantined (with its new failed
    rules and repaired record), in one MERGE with the replay's transaction."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    outcome = evaluated.select(
        F.col(_ID).alias("id"),
        failed_names(plan.expectations).alias("failed_rules"),
        F.to_json(F.struct(*[named(f.name) for f in row.fields])).alias("record"),
        replay_status(plan.expectations).alias("status"),
    )
    with tables.transaction(spark, f"{JOB}:replays:{plan.name}:{plan.run_id}", n):
        (
            DeltaTable.forPath(spark, plan.quarantine_path)
            .alias("q")
            .merge(outcome.alias("o"), "q.id = o.id")
            .whenMatchedUpdate(
                set={
                    "status": "o.status",
                    "failed_rules": "o.failed_rules",
                    "record": "o.record",
                    "replayed_at": f"CASE WHEN o.status = '{QUARANTINED}' THEN NULL "
                    "ELSE current_timestamp() END",
                }
            )
            .execute()
        )
