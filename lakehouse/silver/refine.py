"""Bronze CDF -> silver: the library behind `refine_silver`.

A streaming read of the bronze table's Change Data Feed; each micro-batch is refined by
`lakehouse.silver.batch.refine_batch` (parse with the declared schema, every expectation in one
pass, an idempotent foreachBatch write). A `fail` expectation or a `fail` drift policy stops the
job before any commit of that batch.

Tables written: `silver.<table>` (CDF on), `_system/quarantine` (rejected records with their
failed rules, parsed record, raw bytes and bronze lineage) and `_system/expectation_metrics`
(per batch and rule: passed/failed counts).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

from lakehouse.bronze import offsets
from lakehouse.bronze.ingest import bronze_path
from lakehouse.core import fs, protection, system, tables
from lakehouse.core.errors import LakehouseError, UsageError
from lakehouse.core.jobs import base_parser
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import SilverTableSettings
from lakehouse.core.streaming import await_query, check_trigger, delta_behind, with_trigger
from lakehouse.silver import once, scd1
from lakehouse.silver.batch import BatchStats, refine_batch
from lakehouse.silver.plan import JOB, check_mode, prepare, silver_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PURGE_EVERY_S = 3600.0  # how often a continuous run drops tombstones past their retention


@dataclass(frozen=True)
class RefineOptions:
    table: str
    trigger: str = "available-now"
    full_refresh: bool = False
    trigger_interval: str = "10 seconds"


def refine_parser() -> argparse.ArgumentParser:
    parser = base_parser(JOB, "bronze Change Data Feed -> silver table")
    parser.add_argument("--table", required=True, help="a silver table from conf/*/tables.yml")
    parser.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the silver table from bronze (drops silver, its checkpoint and its "
        "quarantined rows first)",
    )
    parser.add_argument(
        "--trigger-interval", default="10 seconds", help="micro-batch interval (continuous)"
    )
    return parser


def options_from_args(args: argparse.Namespace) -> RefineOptions:
    return RefineOptions(args.table, args.trigger, args.full_refresh, args.trigger_interval)


# Batch lines waiting for their progress report (a continuous run must not keep them all).
_DETAILS_KEPT = 100


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
    # Per recent batch id: what it did, for its console line (logged from the query's
    # progress, which comes after the batch; bounded for continuous runs).
    details: dict[int, str] = field(default_factory=dict, repr=False)
    inputs: dict[int, int] = field(default_factory=dict, repr=False)

    def summary(self) -> str:
        """The run in one line (a job prints it last on stdout)."""
        failed = ", ".join(f"{rule}={n}" for rule, n in sorted(self.failed.items()) if n)
        return (
            f"silver.{self.table}: {self.batches} batch(es), {self.rows_in} row(s) in, "
            f"{self.rows_written} written, {self.rows_dropped} dropped, "
            f"{self.rows_quarantined} quarantined; failed per rule: {failed or 'none'}"
        )

    def add(self, batch_id: int, stats: BatchStats) -> None:
        self.batches += 1
        self.batch_ids.append(batch_id)
        self.rows_in += stats.rows
        self.rows_written += stats.written
        self.rows_dropped += stats.dropped
        self.rows_quarantined += stats.quarantined
        for rule, (_passed, failed) in stats.per_rule.items():
            self.failed[rule] = self.failed.get(rule, 0) + failed
        failing = ", ".join(f"{r}={n}" for r, (_p, n) in sorted(stats.per_rule.items()) if n)
        self.details[batch_id] = (
            f", {stats.written} written, {stats.dropped} dropped, {stats.quarantined} "
            f"quarantined{' (failed: ' + failing + ')' if failing else ''}; {stats.timing()}"
        )
        if stats.read is not None:
            self.inputs[batch_id] = stats.read
        while len(self.details) > _DETAILS_KEPT:
            del self.details[next(iter(self.details))]
        while len(self.inputs) > _DETAILS_KEPT:
            del self.inputs[next(iter(self.inputs))]

    def detail(self, batch_id: int) -> str:
        """`, W written, D dropped, Q quarantined` (and the failing rules) of a batch, and
        where its time went (`BatchStats.timing`)."""
        return self.details.pop(batch_id, "")

    def input_rows(self, batch_id: int) -> int | None:
        """The rows a CDC batch read from bronze's feed, counted once (for its console line);
        None for other batches, which scan their feed once: the query's count is right."""
        return self.inputs.pop(batch_id, None)


def refine(spark: SparkSession, settings: Settings, options: RefineOptions) -> RefineResult:
    """Run `refine_silver` for one table: until bronze's feed is drained (available-now) or
    until SIGTERM (continuous)."""
    check_trigger(options.trigger)
    table = settings.silver_table(options.table)
    source = settings.source(table.source)
    check_mode(options.table, table, source.records)
    source_path = bronze_path(settings, table.source)
    if not tables.exists(spark, source_path):
        job = "ingest_cdc" if source.kind == "cdc" else "ingest_events"
        raise SettingsError(
            f"silver.{options.table}: its bronze table {source_path} does not exist yet; "
            f"run {job} --source {table.source} first"
        )
    path = silver_path(settings, options.table)
    if options.full_refresh:
        full_refresh(spark, settings, options.table)
    checkpoint = checkpoint_path(settings, options.table)
    fresh = not offsets.checkpoint_exists(spark, checkpoint)
    plan = prepare(spark, settings, options.table, table, source.records, path)
    if fresh and table.mode == "append" and not _is_empty(spark, path):
        raise UsageError(
            f"silver.{options.table} has rows but its checkpoint {checkpoint} is gone: a new "
            "stream would append every bronze record again. Rebuild it: refine_silver --table "
            f"{options.table} --full-refresh (keyed tables just replay: their apply is idempotent)"
        )
    result = RefineResult(options.table, path, plan.run_id)
    errors: list[BaseException] = []

    purged_at: list[float] = []

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        if plan.first_batch is None:  # the query's first batch: what its checkpoint says
            plan.stream_id = stream_id(spark, checkpoint)
            plan.first_batch = once.first_batch(spark, checkpoint, int(batch_id))
        try:
            result.add(int(batch_id), refine_batch(batch, int(batch_id), plan))
        except Exception as exc:
            # Re-raised as itself below, not as the Py4J wrapper whose one line is "An
            # exception was raised by the Python Proxy": the verdict names the real cause.
            errors.append(exc)
            raise
        # Tombstones past their retention go after a run's first batch and then hourly: one
        # DELETE, idempotent, in this same thread (no conflict with the batch commits).
        if not purged_at or time.monotonic() - purged_at[-1] >= PURGE_EVERY_S:
            purge_tombstones(spark, settings, options.table)
            purged_at.append(time.monotonic())

    writer = (
        _feed(spark, table, source_path)
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", checkpoint)
        .queryName(f"{JOB}_{options.table}")
    )
    query = with_trigger(writer, options.trigger, options.trigger_interval).start()
    try:
        await_query(
            query,
            options.trigger,
            progress=True,
            detail=result.detail,
            rows=result.input_rows,
            behind=delta_behind(partial(tables.latest_version, spark, source_path)),
        )
    except Exception:
        # A stray ValueError would read as "bad usage" (exit 2) though batches may have been
        # committed: it stays wrapped (exit 1), its cause in the message.
        if errors and (
            isinstance(errors[0], LakehouseError) or not isinstance(errors[0], ValueError)
        ):
            raise errors[0] from None
        raise
    return result


def checkpoint_path(settings: Settings, name: str) -> str:
    return tables.checkpoint_path(settings, JOB, name)


def stream_id(spark: SparkSession, checkpoint: str) -> str:
    """The id Spark gave the streaming query of `checkpoint` (its `metadata` file, written
    before the first batch); it lives as long as the checkpoint."""
    import json

    return str(json.loads(fs.read_text(spark, f"{checkpoint}/metadata"))["id"])[:8]


def _is_empty(spark: SparkSession, path: str) -> bool:
    return not spark.read.format("delta").load(path).take(1)


def _feed(spark: SparkSession, table: SilverTableSettings, source_path: str) -> DataFrame:
    options = {}
    if table.max_files_per_trigger:
        options["maxFilesPerTrigger"] = str(table.max_files_per_trigger)
    return (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .options(**options)
        .load(source_path)
        # Bronze is append-only: inserts are all there is (a lifted protection could add
        # deletes; silver never un-sees a record because bronze forgot it).
        .where("_change_type = 'insert'")
    )


def full_refresh(spark: SparkSession, settings: Settings, name: str) -> None:
    """Rebuild from bronze (allowed: bronze is complete): drop silver, its checkpoint and its
    quarantined rows (the rebuild quarantines them again); the next refine starts over.
    Metrics keep their history. `refine_silver --full-refresh` and `lakehouse reset silver.X`
    both come here."""
    from delta.tables import DeltaTable

    settings.silver_table(name)
    path = silver_path(settings, name)
    protection.require_resettable(spark, path, f"--full-refresh of silver.{name}")
    quarantine = system.path(settings, system.QUARANTINE)
    if tables.exists(spark, quarantine):
        DeltaTable.forPath(spark, quarantine).delete(f"`table` = '{name}'")
    for location in (path, checkpoint_path(settings, name)):
        fs.delete(spark, location)
    system.append_log(
        spark, settings, system.REFINE_LOG, {"event": "full_refresh", "subject": f"silver.{name}"}
    )


def purge_tombstones(spark: SparkSession, settings: Settings, name: str) -> None:
    """Drop SCD1/upsert tombstones older than the table's retention (`refine` calls it)."""
    table = settings.silver_table(name)
    if table.mode in ("scd1", "upsert"):
        scd1.purge_tombstones(
            spark, silver_path(settings, name), timedelta(hours=table.tombstone_retention_hours)
        )
