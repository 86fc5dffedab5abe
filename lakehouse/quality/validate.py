"""`lakehouse validate TABLE`: Great Expectations over a whole silver (later: gold) table.

The suite comes from the table's declarations (`lakehouse.quality.suite`); the report and the
log row from `lakehouse.quality.report`.

What is validated is the table's *current* rows at one Delta version, not its bookkeeping:
upsert/scd1 tombstones (`__deleted`) and closed scd2 versions (`__end_seq` set) are left out,
and every `__` column is dropped (`_rescued_data` stays). Results, suites and the rendered Data
Docs live in a file-backed GX project under `<storage root>/_system/great_expectations` (for a
non-local root: `.lakehouse/gx` in the checkout); a summary row goes to
`_system/validation_log`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from lakehouse.core import current, system, tables
from lakehouse.core.settings import Settings, project_root
from lakehouse.quality.report import ValidationReport, log_record, outcomes
from lakehouse.quality.suite import TableSpec, ValidateError, build_expectations, resolve_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DATASOURCE = "lakehouse"
BATCH_DEFINITION = "current"


def gx_dir(settings: Settings) -> Path:
    """Where the file-backed GX project lives: next to the tables for a local storage root,
    else in the checkout (GX writes its Data Docs through the local file system)."""
    location = settings.storage.path("_system", "great_expectations")
    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    if "://" in location:
        return project_root() / ".lakehouse" / "gx"
    return Path(location)


def current_rows(
    spark: SparkSession, settings: Settings, table: TableSpec
) -> tuple[DataFrame, int]:
    """The table's current rows at its latest Delta version, without bookkeeping columns;
    returns (rows, version)."""
    path = tables.table_path(settings, table.qualified)
    if not tables.exists(spark, path):
        raise ValidateError(
            f"{table.qualified}: no Delta table at {path} yet; build it first with {table.built_by}"
        )
    version = tables.latest_version(spark, path)
    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    column = current.live_column(table.mode)
    if column is not None and column not in df.columns:
        raise ValidateError(
            f"{table.qualified}: mode {table.mode} keeps a {column} column, but the table "
            f"at {path} has none; rebuild it with {table.built_by} --full-refresh"
        )
    return current.current_rows(df), version


def validate(spark: SparkSession, settings: Settings, name: str) -> ValidationReport:
    """Validate the current rows of `name` with its declared suite; store the GX result, update
    the Data Docs and append a summary to `_system/validation_log`."""
    table = resolve_table(settings, name)
    expectations = build_expectations(table)
    rows_df, version = current_rows(spark, settings, table)
    rows_df = rows_df.persist()
    try:
        rows = rows_df.count()
        result, data_docs, result_path = _run_checkpoint(
            gx_dir(settings), table, expectations, rows_df, version
        )
    finally:
        rows_df.unpersist()
    report = ValidationReport(
        table=table.qualified,
        success=bool(result.success),
        version=version,
        rows=rows,
        outcomes=outcomes(table, result.results),
        data_docs=data_docs,
        result_path=result_path,
    )
    system.append_log(spark, settings, system.VALIDATION_LOG, log_record(report))
    return report


def _run_checkpoint(
    root: Path, table: TableSpec, expectations: Sequence[Any], df: DataFrame, version: int
) -> tuple[Any, str, str]:
    """Run the suite through a Checkpoint whose action renders the Data Docs; returns (the
    suite validation result, the Data Docs index.html, the stored result's JSON path)."""
    import great_expectations as gx
    from great_expectations.checkpoint.actions import UpdateDataDocsAction
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context: Any = gx.get_context(mode="file", context_root_dir=str(root))
    # Jobs write logs, not terminals: no tqdm bars on stderr.
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    asset = context.data_sources.add_or_update_spark(
        name=DATASOURCE, persist=False
    ).add_dataframe_asset(name=table.qualified)
    batch = asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)
    suite = context.suites.add_or_update(
        gx.ExpectationSuite(
            name=table.qualified,
            expectations=list(expectations),
            notes=f"Declared for {table.qualified} in conf/*/tables.yml; validated by "
            "`lakehouse validate` on the table's current rows.",
        )
    )
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=table.qualified, data=batch, suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=table.qualified,
            validation_definitions=[definition],
            actions=[UpdateDataDocsAction(name="update_data_docs")],
            result_format={"result_format": "SUMMARY"},
        )
    )
    outcome = checkpoint.run(
        batch_parameters={"dataframe": df}, run_id=RunIdentifier(run_name=f"version-{version}")
    )
    ((key, result),) = outcome.run_results.items()
    result_url = context.validation_results_store.store_backend.get_url_for_key(key.to_tuple())
    docs = [s["site_url"] for s in context.get_docs_sites_urls() if s.get("site_url")]
    return result, _local_path(docs[0]), _local_path(result_url)


def _local_path(url: str) -> str:
    return unquote(urlparse(url).path) if url.startswith("file:") else url
