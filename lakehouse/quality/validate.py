"""`lakehouse validate TABLE`: Great Expectations over a whole silver (later: gold) table.

The suite comes from the table's declarations (`lakehouse.quality.suite`); the report and the
log row from `lakehouse.quality.report`.

What is validated is the table's *current* rows at one Delta version, not its bookkeeping:
upsert/scd1 tombstones (`__deleted`) and closed scd2 versions (`__end_seq` set) are left out,
and every `__` column is dropped (`_rescued_data` stays). Results, suites and the rendered Data
Docs live in a file-backed GX project under `<storage root>/_system/great_expectations`, on any
file system Hadoop reaches (GX itself writes only to local files: for another root it works on
a scratch copy, see `gx_project`); a summary row goes to `_system/validation_log`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from lakehouse.core import current, fs, system, tables
from lakehouse.core.settings import Settings
from lakehouse.quality.report import ValidationReport, log_record, outcomes
from lakehouse.quality.suite import TableSpec, ValidateError, build_expectations, resolve_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DATASOURCE = "lakehouse"
BATCH_DEFINITION = "current"


GX_PROJECT = "great_expectations"


def gx_dir(settings: Settings) -> Path | None:
    """The file-backed GX project's directory when the storage root is on this machine's file
    system (a path or `file:`), else None."""
    location = settings.storage.path("_system", GX_PROJECT)
    if location.startswith("file:"):
        return Path(unquote(urlparse(location).path))
    if "://" in location:
        return None
    return Path(location)


@contextmanager
def gx_project(
    spark: SparkSession, settings: Settings
) -> Iterator[tuple[Path, Callable[[str], str]]]:
    """The GX project's directory on this machine, and how to name a file of it where it lives.

    A local root: the project itself. Any other root (hdfs://, s3a://, abfss://): GX writes only
    to local files, so it runs on a scratch copy pulled from `<root>/_system/great_expectations`
    through Hadoop's FileSystem (earlier results included: the Data Docs index lists them) and
    pushed back when the run succeeds; results then live with the tables, not on whichever
    driver ran the validation."""
    local = gx_dir(settings)
    if local is not None:
        yield local, _local_path
        return
    remote = settings.storage.path("_system", GX_PROJECT)
    scratch = Path(tempfile.mkdtemp(prefix="lakehouse-gx-"))
    try:
        project = scratch / GX_PROJECT
        if fs.exists(spark, remote):
            fs.copy_to_local(spark, remote, scratch)
        project.mkdir(exist_ok=True)
        pulled = _file_stamps(project)

        def where(url: str) -> str:
            inside = Path(_local_path(url)).relative_to(project)
            return f"{remote}/{inside.as_posix()}"

        yield project, where
        # Only what this run wrote or changed goes back (the project grows with every run).
        for name, stamp in _file_stamps(project).items():
            if pulled.get(name) != stamp:
                fs.copy_from_local(spark, project / name, f"{remote}/{name}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _file_stamps(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under `directory` (relative POSIX path) -> (size, modification time)."""
    return {
        path.relative_to(directory).as_posix(): (stat.st_size, stat.st_mtime_ns)
        for path in directory.rglob("*")
        if path.is_file() and (stat := path.stat())
    }


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
        with gx_project(spark, settings) as (root, where):
            result, docs_url, result_url = _run_checkpoint(
                root, table, expectations, rows_df, version
            )
            data_docs, result_path = where(docs_url), where(result_url)
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
    suite validation result, the URLs of the Data Docs index.html and of the stored result)."""
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
    return result, docs[0], result_url


def _local_path(url: str) -> str:
    return unquote(urlparse(url).path) if url.startswith("file:") else url
