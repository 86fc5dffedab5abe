"""Bronze CDF -> silver: the library behind `refine_silver`.

A streaming read of the bronze table's Change Data Feed; each micro-batch is parsed with the
table's declared schema, checked against its expectations in one pass, and written by an
idempotent foreachBatch: every Delta commit of a batch carries a transaction id
(`txnAppId` = job, table and run; `txnVersion` = batch id), so a batch replayed after a crash
commits nothing twice. A `fail` expectation or a `fail` drift policy stops the job before any
commit of that batch.

Tables written: `silver.<table>` (CDF on), `_system/quarantine` (rejected records with their
failed rules, parsed record, raw bytes and bronze lineage) and `_system/expectation_metrics`
(per batch and rule: passed/failed counts).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lakehouse.bronze import transform as bronze
from lakehouse.bronze.ingest import bronze_path
from lakehouse.core import fs, tables
from lakehouse.core.settings import Settings, SettingsError, SilverTableSettings
from lakehouse.core.streaming import await_query
from lakehouse.quality.expectations import (
    REMOVING,
    Expectation,
    ExpectationFailed,
    failed_names,
    fails,
    fails_any,
    from_settings,
)
from lakehouse.silver import cdc
from lakehouse.silver import transform as silver
from lakehouse.silver.transform import ParsedSchema, SchemaDriftError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

JOB = "refine_silver"
TRIGGERS = ("available-now", "continuous")
METRICS = "expectation_metrics"
QUARANTINE = "quarantine"
REFINE_LOG = "refine_log"
RUN_ID = "lakehouse.run_id"  # table property: a new id per (re)build, part of the txn app id
EVOLVED = "lakehouse.evolved_schema"  # table property: DDL of fields added by `evolve`
# Deletion vectors: a MERGE marks the changed rows of a file instead of rewriting the file, so
# far less of its cost grows with the table (bench/silver_merge.py: a 10,000-change MERGE into
# 4M rows 16.0 s -> 10.7 s; 4M over 250k rows 2.9x -> 2.3x).
SILVER_PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
TXN_APP, TXN_VERSION = (
    "spark.databricks.delta.write.txnAppId",
    "spark.databricks.delta.write.txnVersion",
)


@dataclass(frozen=True)
class RefineOptions:
    table: str
    trigger: str = "available-now"
    full_refresh: bool = False
    trigger_interval: str = "10 seconds"


@dataclass
class RefineResult:
    table: str
    path: str
    run_id: str = ""
    batch_ids: list[int] = field(default_factory=list)
    batches: int = 0
    rows_in: int = 0
    rows_written: int = 0
    rows_dropped: int = 0
    rows_quarantined: int = 0
    failed: dict[str, int] = field(default_factory=dict)


@dataclass
class _Plan:
    """Everything a micro-batch needs, resolved once at start (the schema may evolve)."""

    name: str
    table: SilverTableSettings
    kind: str
    path: str
    run_id: str
    schema: ParsedSchema
    expectations: list[Expectation]
    metrics_path: str
    quarantine_path: str

    @property
    def app_id(self) -> str:
        return f"{JOB}:{self.name}:{self.run_id}"


def silver_path(settings: Settings, name: str) -> str:
    return tables.table_path(settings, f"silver.{name}")


def refine(spark: SparkSession, settings: Settings, options: RefineOptions) -> RefineResult:
    """Run `refine_silver` for one table: until bronze's feed is drained (available-now) or
    until SIGTERM (continuous)."""
    if options.trigger not in TRIGGERS:
        raise SettingsError(f"--trigger {options.trigger!r}: use one of {', '.join(TRIGGERS)}")
    table = settings.silver_table(options.table)
    source = settings.source(table.source)
    _check_mode(options.table, table, source.kind)
    source_path = bronze_path(settings, table.source, source)
    if not tables.exists(spark, source_path):
        job = "ingest_cdc" if source.kind == "cdc" else "ingest_events"
        raise SettingsError(
            f"silver.{options.table}: its bronze table {source_path} does not exist yet; "
            f"run {job} --source {table.source} first"
        )
    path = silver_path(settings, options.table)
    checkpoint = tables.checkpoint_path(settings, JOB, options.table)
    if options.full_refresh:
        _full_refresh(spark, settings, options.table, path, checkpoint)
    plan = _prepare(spark, settings, options.table, table, source.kind, path)
    result = RefineResult(options.table, path, plan.run_id)

    feed = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .options(**_feed_options(table))
        .load(source_path)
        # Bronze is append-only: inserts are all there is (a lifted protection could add
        # deletes; silver never un-sees a record because bronze forgot it).
        .where("_change_type = 'insert'")
    )
    errors: list[BaseException] = []

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        try:
            _refine_batch(batch, int(batch_id), plan, result)
        except (ExpectationFailed, SchemaDriftError) as exc:
            errors.append(exc)  # re-raised as itself below, not as a Py4J wrapper
            raise

    writer = (
        feed.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", checkpoint)
        .queryName(f"{JOB}_{options.table}")
    )
    if options.trigger == "continuous":
        writer = writer.trigger(processingTime=options.trigger_interval)
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    try:
        await_query(query, options.trigger)
    except Exception:
        if errors:
            raise errors[0] from None
        raise
    return result


def _feed_options(table: SilverTableSettings) -> dict[str, str]:
    if table.max_files_per_trigger:
        return {"maxFilesPerTrigger": str(table.max_files_per_trigger)}
    return {}


def _check_mode(name: str, table: SilverTableSettings, kind: str) -> None:
    if kind == "cdc" and table.mode not in ("scd1", "scd2"):
        raise SettingsError(
            f"silver.{name}.mode {table.mode!r}: source {table.source!r} is a CDC source; "
            "use mode scd1 or scd2"
        )
    if kind == "events" and table.mode in ("scd1", "scd2"):
        raise SettingsError(
            f"silver.{name}.mode {table.mode!r} needs a CDC source; {table.source!r} is an "
            "events source (use upsert or append)"
        )


def _full_refresh(
    spark: SparkSession, settings: Settings, name: str, path: str, checkpoint: str
) -> None:
    """Rebuild from bronze (allowed: bronze is complete): drop silver, its checkpoint and its
    quarantined rows (the rebuild quarantines them again). Metrics keep their history."""
    tables.require_resettable(spark, path, f"--full-refresh of silver.{name}")
    quarantine = tables.system_log_path(settings, QUARANTINE)
    if tables.exists(spark, quarantine):
        from delta.tables import DeltaTable

        DeltaTable.forPath(spark, quarantine).delete(f"`table` = '{name}'")
    for location in (path, checkpoint):
        fs.delete(spark, location)
    tables.append_system_log(
        spark, settings, REFINE_LOG, {"event": "full_refresh", "subject": f"silver.{name}"}
    )


def _prepare(
    spark: SparkSession,
    settings: Settings,
    name: str,
    table: SilverTableSettings,
    kind: str,
    path: str,
) -> _Plan:
    try:
        declared = silver.parse_schema(table.schema)
    except Exception as exc:
        raise SettingsError(f"silver.{name}.schema: not valid Spark DDL: {exc}") from None
    expectations = [silver.PARSABLE, *from_settings(table.expectations)]
    records = _transform(
        spark.createDataFrame([], bronze.bronze_schema(kind)), table, kind, declared
    )
    _check_columns(name, table, records)
    if not tables.exists(spark, path):
        properties = {**SILVER_PROPERTIES, RUN_ID: uuid.uuid4().hex[:12]}
        tables.create_table(spark, path, _silver_schema(records, table), properties)
    props = tables.properties(spark, path)
    schema = silver.parse_schema(table.schema, props.get(EVOLVED, ""))
    metrics_path = tables.system_log_path(settings, METRICS)
    quarantine_path = tables.system_log_path(settings, QUARANTINE)
    tables.create_table(spark, metrics_path, metrics_schema(), {"delta.appendOnly": "true"})
    tables.create_table(spark, quarantine_path, quarantine_schema(), {})
    return _Plan(
        name,
        table,
        kind,
        path,
        props.get(RUN_ID, "0"),
        schema,
        expectations,
        metrics_path,
        quarantine_path,
    )


def _transform(
    bronze_rows: DataFrame, table: SilverTableSettings, kind: str, schema: ParsedSchema
) -> DataFrame:
    if kind == "cdc":
        return silver.cdc_changes(bronze_rows, table, schema)
    return silver.event_records(bronze_rows, table, schema)


def _check_columns(name: str, table: SilverTableSettings, records: DataFrame) -> None:
    columns = set(records.columns)
    for key in (*table.keys, *([table.sequence_by] if table.sequence_by else [])):
        if key not in columns:
            raise SettingsError(
                f"silver.{name}: column {key!r} (keys/sequence_by) is not in the flattened "
                f"schema; columns are: {', '.join(silver.silver_columns(records))}"
            )


def _row_columns(records: DataFrame) -> list[str]:
    return [c for c in silver.silver_columns(records) if c not in (cdc.OP, cdc.SEQ, "_ts")]


def _silver_schema(records: DataFrame, table: SilverTableSettings) -> StructType:
    from pyspark.sql.types import StructType

    row = StructType([records.schema[c] for c in _row_columns(records)])
    if table.mode in ("upsert", "scd1"):
        return cdc.scd1_schema(row)
    if table.mode == "scd2":
        return cdc.scd2_schema(row)
    return row


def _refine_batch(batch: DataFrame, batch_id: int, plan: _Plan, result: RefineResult) -> None:
    spark = batch.sparkSession
    records = _transform(batch, plan.table, plan.kind, plan.schema)
    if plan.kind == "cdc":
        records = _resolve_toast(spark, plan, records)
    evaluated = silver.evaluate_rules(records, plan.expectations)
    evaluated = evaluated.persist()
    try:
        stats = _batch_stats(evaluated, plan.expectations)
        if stats.unknown_fields:
            if plan.table.schema_drift == "fail":
                raise SchemaDriftError(
                    f"silver.{plan.name}: records carry field(s) {sorted(stats.unknown_fields)} "
                    "that the declared schema lacks (schema_drift: fail); nothing of batch "
                    f"{batch_id} was written. Add them to silver.{plan.name}.schema in "
                    "conf/base/tables.yml, or set schema_drift: evolve or rescue"
                )
            if plan.table.schema_drift == "evolve":
                _evolve(spark, plan, evaluated, stats.unknown_fields)
                evaluated.unpersist()
                _refine_batch(batch, batch_id, plan, result)
                return
        from lakehouse.quality.expectations import check_fail_rules, kept, quarantined

        check_fail_rules(evaluated.drop(*silver.TRANSIENT), plan.expectations, stats.per_rule)
        kept_rows = kept(evaluated, plan.expectations)
        _write_silver(spark, plan, kept_rows, stats.written, batch_id, stats.truncates)
        rejected = silver.quarantine_rows(
            quarantined(evaluated, plan.expectations), plan.name, plan.run_id, batch_id
        )
        if stats.quarantined:
            _append(rejected, plan.quarantine_path, plan.app_id, batch_id)
        _append(
            _metrics_rows(spark, plan, batch_id, stats), plan.metrics_path, plan.app_id, batch_id
        )
    finally:
        evaluated.unpersist()
    result.batches += 1
    result.batch_ids.append(batch_id)
    result.rows_in += stats.rows
    result.rows_written += stats.written
    result.rows_dropped += stats.dropped
    result.rows_quarantined += stats.quarantined
    for rule, (_passed, failed) in stats.per_rule.items():
        result.failed[rule] = result.failed.get(rule, 0) + failed
    log.info(
        "silver.%s batch %d: %d in, %d written, %d dropped, %d quarantined; failed %s",
        plan.name,
        batch_id,
        stats.rows,
        stats.written,
        stats.dropped,
        stats.quarantined,
        {r: f for r, (_p, f) in stats.per_rule.items() if f},
    )


def _resolve_toast(spark: SparkSession, plan: _Plan, records: DataFrame) -> DataFrame:
    """Unchanged-TOAST placeholders take the key's previous value (see
    `silver.resolve_unchanged_toast`). Checked first, so a batch without placeholders (the
    usual case) costs one cheap scan and no read of silver."""
    columns = silver.toast_columns(records, plan.table.keys)
    if not columns or not records.where(silver.carries_toast_placeholder(columns)).take(1):
        return records
    target = spark.read.format("delta").load(plan.path)
    live = target.where(
        f"NOT {cdc.DELETED}" if plan.table.mode == "scd1" else f"{cdc.END_SEQ} IS NULL"
    )
    return silver.resolve_unchanged_toast(records, live, plan.table.keys, columns)


@dataclass(frozen=True)
class _Stats:
    rows: int
    written: int
    dropped: int
    quarantined: int
    per_rule: dict[str, tuple[int, int]]
    unknown_fields: frozenset[str]
    truncates: tuple[tuple[int, Any], ...]


def _batch_stats(evaluated: DataFrame, expectations: Sequence[Expectation]) -> _Stats:
    """Every figure a batch needs, from one aggregation: rows, per-rule failures, what is
    written/dropped/quarantined, unknown field names and truncate positions."""
    from pyspark.sql import functions as F

    def count_if(condition: Column) -> Column:
        return F.sum(condition.cast("long"))

    quarantine = fails_any(expectations, ("quarantine",))
    removed = fails_any(expectations, REMOVING)
    aggregates = [
        F.count(F.lit(1)).alias("_rows"),
        count_if(~removed).alias("_written"),
        count_if(quarantine).alias("_quarantined"),
        count_if(removed & ~quarantine).alias("_dropped"),
        F.array_distinct(F.flatten(F.collect_set(silver.UNKNOWN))).alias("_unknown"),
        *[count_if(fails(expectations, e.name)).alias(e.name) for e in expectations],
    ]
    is_cdc = cdc.OP in evaluated.columns
    if is_cdc:
        truncate = F.when(F.col(cdc.OP) == silver.TRUNCATE, F.struct(cdc.SEQ, "_ts"))
        aggregates.append(F.collect_list(truncate).alias("_truncates"))
    row: Row = evaluated.agg(*aggregates).collect()[0]
    rows = int(row["_rows"])
    per_rule = {e.name: (rows - int(row[e.name] or 0), int(row[e.name] or 0)) for e in expectations}
    truncates = tuple((int(t[0]), t[1]) for t in row["_truncates"]) if is_cdc else ()
    return _Stats(
        rows,
        int(row["_written"] or 0),
        int(row["_dropped"] or 0),
        int(row["_quarantined"] or 0),
        per_rule,
        frozenset(row["_unknown"] or ()),
        truncates,
    )


@contextmanager
def _transaction(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Make the Delta DML inside (MERGE, UPDATE, DELETE) idempotent: Delta skips the commit
    when `app_id` already committed `version` or later on that table."""
    spark.conf.set(TXN_APP, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP)
        spark.conf.unset(TXN_VERSION)


def _append(rows: DataFrame, path: str, app_id: str, version: int) -> None:
    (
        rows.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", str(version))
        .save(path)
    )


def _write_silver(
    spark: SparkSession,
    plan: _Plan,
    rows: DataFrame,
    count: int,
    batch_id: int,
    truncates: Sequence[tuple[int, Any]],
) -> None:
    """`count`: how many rows `rows` holds (from the batch's one aggregation), so the MERGE
    need not count them again to decide on broadcasting."""
    from pyspark.sql import functions as F

    columns = _row_columns(rows)
    mode, keys = plan.table.mode, list(plan.table.keys)
    if mode == "append":
        _append(rows.select(*[f"`{c}`" for c in columns]), plan.path, plan.app_id, batch_id)
        return
    # Bronze lineage orders changes of a key at the same position: the first arrival wins.
    # Not for SCD2: its batch is unioned with changes rebuilt from the target, which have no
    # lineage, and a CDC position repeats only in a replay of the same change.
    arrival = F.struct(silver.TOPIC, silver.PARTITION, silver.OFFSET).alias(cdc.ARRIVAL)
    if mode == "upsert":
        changes = silver.event_upserts(rows, plan.table.sequence_by).select(
            *[f"`{c}`" for c in columns], cdc.OP, cdc.SEQ, arrival
        )
        with _transaction(spark, plan.app_id, batch_id):
            cdc.apply_scd1(spark, plan.path, changes, keys, rows=count)
        return
    changes = rows.where(f"{cdc.OP} <> '{silver.TRUNCATE}'").select(
        *[f"`{c}`" for c in columns], cdc.OP, cdc.SEQ, "_ts", *([arrival] if mode == "scd1" else [])
    )
    # Each commit of the batch has its own app id: Delta skips a commit whose app id already
    # reached this batch, so a crash between the two redoes only the second.
    with _transaction(spark, plan.app_id, batch_id):
        if mode == "scd1":
            cdc.apply_scd1(spark, plan.path, changes, keys, rows=count)
        else:
            cdc.apply_scd2(spark, plan.path, changes, keys, list(plan.table.track_columns))
    for i, (seq, ts) in enumerate(sorted(truncates, key=lambda t: t[0])):
        with _transaction(spark, f"{plan.app_id}:truncate{i}", batch_id):
            if mode == "scd1":
                cdc.apply_truncate_scd1(spark, plan.path, seq, ts)
            else:
                cdc.apply_truncate_scd2(spark, plan.path, seq, ts)


def _evolve(
    spark: SparkSession, plan: _Plan, evaluated: DataFrame, unknown: frozenset[str]
) -> None:
    """schema_drift: evolve. Infer the new fields' types from this batch's records (events:
    the JSON values; CDC: the rescued fields, so as text), add them as silver columns
    (flattened like the rest) and record them in a table property, so later batches and
    restarts parse them too. Idempotent: a replayed batch finds the columns already there."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    with_unknown = evaluated.where(F.size(silver.UNKNOWN) > 0)
    if plan.kind == "events":
        texts = with_unknown.select(F.col(silver.RAW_VALUE).cast("string"))
    else:
        texts = with_unknown.select(F.col(silver.RESCUED))
    inferred = spark.read.json(texts.rdd.map(lambda r: str(r[0])))
    types = {f.name: f for f in inferred.schema.fields}
    new_fields = [types.get(n, StructField(n, StringType())) for n in sorted(unknown)]
    flat = silver.flatten(spark.createDataFrame([], StructType(new_fields)))
    columns = tables.missing_columns(spark, plan.path, flat.schema.fields)
    if columns:
        spark.sql(f"ALTER TABLE delta.`{plan.path}` ADD COLUMNS ({tables.columns_ddl(columns)})")
    declared = set(silver.parse_schema(plan.table.schema).names)
    evolved = [f for f in plan.schema.struct.fields if f.name not in declared] + new_fields
    ddl = tables.columns_ddl(evolved)
    spark.sql(f"ALTER TABLE delta.`{plan.path}` SET TBLPROPERTIES ('{EVOLVED}' = '{ddl}')")
    log.warning("silver.%s: schema evolved, added %s", plan.name, sorted(unknown))
    plan.schema = silver.parse_schema(plan.table.schema, ddl)


def metrics_schema() -> StructType:
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    return StructType(
        [
            StructField("table", StringType()),
            StructField("run_id", StringType()),
            StructField("batch_id", LongType()),
            StructField("at", TimestampType()),
            StructField("rule", StringType()),
            StructField("action", StringType()),
            StructField("passed", LongType()),
            StructField("failed", LongType()),
            StructField("batch_rows", LongType()),
            StructField("batch_written", LongType()),
            StructField("batch_dropped", LongType()),
            StructField("batch_quarantined", LongType()),
        ]
    )


def quarantine_schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("id", StringType()),
            StructField("table", StringType()),
            StructField("run_id", StringType()),
            StructField("batch_id", LongType()),
            StructField("quarantined_at", TimestampType()),
            StructField("failed_rules", ArrayType(StringType())),
            StructField("parse_error", StringType()),
            StructField("record", StringType()),
            StructField("op", StringType()),
            StructField("seq", LongType()),
            StructField("raw_key", BinaryType()),
            StructField("raw_value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("status", StringType()),
            StructField("replayed_at", TimestampType()),
        ]
    )


def _metrics_rows(spark: SparkSession, plan: _Plan, batch_id: int, stats: _Stats) -> DataFrame:
    from pyspark.sql import functions as F

    actions = {e.name: e.action for e in plan.expectations}
    rows = [
        (
            plan.name,
            plan.run_id,
            batch_id,
            None,
            rule,
            actions[rule],
            passed,
            failed,
            stats.rows,
            stats.written,
            stats.dropped,
            stats.quarantined,
        )
        for rule, (passed, failed) in stats.per_rule.items()
    ]
    return spark.createDataFrame(rows, metrics_schema()).withColumn("at", F.current_timestamp())


def purge_tombstones(spark: SparkSession, settings: Settings, name: str) -> None:
    """Drop SCD1/upsert tombstones older than the table's retention."""
    table = settings.silver_table(name)
    if table.mode in ("scd1", "upsert"):
        cdc.purge_tombstones(
            spark, silver_path(settings, name), timedelta(hours=table.tombstone_retention_hours)
        )


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
    marked dropped, the rest stay quarantined with their new failed rules and fixed record.
    A repair can also be made by editing `record` (JSON) in `_system/quarantine` first.

    Idempotent: the silver write and the quarantine update carry the quarantine table's
    version as their Delta transaction, so a rerun after a crash writes nothing twice."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    table = settings.silver_table(name)
    source = settings.source(table.source)
    path = silver_path(settings, name)
    if not tables.exists(spark, path):
        raise SettingsError(f"silver.{name} does not exist yet; run refine_silver --table {name}")
    plan = _prepare(spark, settings, name, table, source.kind, path)
    quarantine = DeltaTable.forPath(spark, plan.quarantine_path)
    version = int(quarantine.history(1).collect()[0]["version"])
    pending = (
        spark.read.format("delta")
        .option("versionAsOf", version)
        .load(plan.quarantine_path)
        .where(f"`table` = '{name}' AND status = 'quarantined'")
    )
    if where:
        pending = pending.where(where)
    silver_schema = spark.read.format("delta").load(path).schema
    row = StructType([f for f in silver_schema.fields if not f.name.startswith("__")])
    parsed = F.from_json(F.col("record"), row)
    records = pending.select(
        F.col("id").alias("_lh_id"),
        F.col("topic").alias(silver.TOPIC),
        F.col("partition").alias(silver.PARTITION),
        F.col("offset").alias(silver.OFFSET),
        F.col("raw_key").alias(silver.RAW_KEY),
        F.col("raw_value").alias(silver.RAW_VALUE),
        F.lit(None).cast("string").alias(silver.VALUE_ERROR),
        F.lit(None).cast("string").alias(silver.ERROR),
        F.array().cast("array<string>").alias(silver.UNKNOWN),
        *[parsed[f.name].alias(f.name) for f in row.fields],
        *(
            [
                F.col("op").alias(cdc.OP),
                F.col("seq").alias(cdc.SEQ),
                F.lit(None).cast("timestamp").alias("_ts"),
            ]
            if source.kind == "cdc"
            else []
        ),
    )
    for column, expression in fixes:
        if column not in row.fieldNames():
            raise SettingsError(
                f"--fix {column}=...: {column!r} is not a column of silver.{name} "
                f"(columns: {', '.join(row.fieldNames())})"
            )
        records = records.withColumn(column, F.expr(expression).cast(row[column].dataType))
    checked = F.col(cdc.OP).isin(*silver.UPSERT_OPS) if source.kind == "cdc" else F.lit(True)
    records = records.withColumn(silver.CHECKED, checked)
    evaluated = silver.evaluate_rules(records, plan.expectations).persist()
    try:
        stats = _batch_stats(evaluated.drop("_lh_id"), plan.expectations)
        from lakehouse.quality.expectations import check_fail_rules, kept

        check_fail_rules(
            evaluated.drop(*silver.TRANSIENT, "_lh_id"), plan.expectations, stats.per_rule
        )
        replay_app = f"{JOB}:replay:{name}:{plan.run_id}"
        replay_plan = _Plan(**{**plan.__dict__, "run_id": f"replay:{plan.run_id}"})
        kept_rows = kept(evaluated, plan.expectations).drop("_lh_id")
        _write_silver(spark, replay_plan, kept_rows, stats.written, version, ())
        outcome = evaluated.select(
            F.col("_lh_id").alias("id"),
            failed_names(plan.expectations).alias("failed_rules"),
            F.to_json(F.struct(*[F.col(f"`{f.name}`") for f in row.fields])).alias("record"),
            _outcome(plan.expectations).alias("status"),
        )
        with _transaction(spark, replay_app, version):
            (
                quarantine.alias("q")
                .merge(outcome.alias("o"), "q.id = o.id")
                .whenMatchedUpdate(
                    set={
                        "status": "o.status",
                        "failed_rules": "o.failed_rules",
                        "record": "o.record",
                        "replayed_at": "CASE WHEN o.status = 'quarantined' THEN NULL "
                        "ELSE current_timestamp() END",
                    }
                )
                .execute()
            )
    finally:
        evaluated.unpersist()
    result = ReplayResult(name, stats.rows, stats.written, stats.dropped, stats.quarantined)
    tables.append_system_log(
        spark,
        settings,
        REFINE_LOG,
        {
            "event": "quarantine_replay",
            "subject": f"silver.{name}",
            "fixes": list(fixes),
            "where": where,
            **result.__dict__,
        },
    )
    return result


def _outcome(expectations: Sequence[Expectation]) -> Column:
    from pyspark.sql import functions as F

    return (
        F.when(fails_any(expectations, ("quarantine",)), F.lit("quarantined"))
        .when(fails_any(expectations, ("drop",)), F.lit("dropped"))
        .otherwise(F.lit("replayed"))
    )
