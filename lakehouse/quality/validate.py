"""`lakehouse validate TABLE`: Great Expectations over a whole silver (later: gold) table.

The suite comes from the table's declarations in `conf/*/tables.yml`: its `expectations` (the
per-batch rules refine_silver enforces) plus its `table_expectations` (row count, key
uniqueness, ... checked only here). A declaration with `expect:` becomes the Great Expectations
class of that snake_case type with its `kwargs`; one with `sql:` becomes an
`UnexpectedRowsExpectation` selecting the rows where the expression is not true (false or NULL,
as in the per-batch engine).

What is validated is the table's *current* rows at one Delta version, not its bookkeeping:
upsert/scd1 tombstones (`__deleted`) and closed scd2 versions (`__end_seq` set) are left out,
and every `__` column is dropped (`_rescued_data` stays). Results, suites and the rendered Data
Docs live in a file-backed GX project under `<storage root>/_system/great_expectations` (for a
non-local root: `.lakehouse/gx` in the checkout); a summary row goes to
`_system/validation_log`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from lakehouse.core import tables
from lakehouse.core.settings import ExpectationSettings, Settings, project_root
from lakehouse.quality.expectations import ExpectationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

VALIDATION_LOG = "validation_log"
DATASOURCE = "lakehouse"
BATCH_DEFINITION = "current"
SQL_TYPE = "unexpected_rows_expectation"
# Per bookkeeping layout: the column it keeps and the condition selecting current rows
# (append keeps none: every row is current).
CURRENT: dict[str, tuple[str, str]] = {
    "upsert": ("__deleted", "NOT __deleted"),
    "scd1": ("__deleted", "NOT __deleted"),
    "scd2": ("__end_seq", "__end_seq IS NULL"),
}
_NAME = re.compile(r"(?:(?P<layer>[a-z_]+)\.)?(?P<table>[a-z][a-z0-9_]*)")
# Keys this module sets on every expectation; a declaration may not override them.
_RESERVED_KWARGS = ("meta", "id", "notes")


class ValidateError(ValueError):
    """The table cannot be validated (unknown, not built yet, unexpected layout); the message
    names the table and the fix."""


class ValidationFailed(RuntimeError):
    """At least one expectation failed; carries the report (the CLI exits 1)."""

    def __init__(self, report: ValidationReport) -> None:
        self.report = report
        failed = ", ".join(o.name for o in report.failed)
        super().__init__(
            f"{report.table}: {len(report.failed)} of {len(report.outcomes)} expectation(s) "
            f"failed ({failed}); see {report.data_docs}"
        )


@dataclass(frozen=True)
class TableSpec:
    """What validation needs to know about one declared table."""

    layer: str
    name: str
    # The bookkeeping layout the writer keeps: append (none), upsert/scd1 (tombstones),
    # scd2 (history).
    mode: str
    expectations: tuple[ExpectationSettings, ...]
    table_expectations: tuple[ExpectationSettings, ...]
    # The job invocation that builds the table, for "not built yet" messages.
    built_by: str

    @property
    def qualified(self) -> str:
        return f"{self.layer}.{self.name}"

    @property
    def declared(self) -> tuple[ExpectationSettings, ...]:
        return (*self.expectations, *self.table_expectations)


@dataclass(frozen=True)
class ExpectationOutcome:
    name: str
    type: str  # the Great Expectations type that ran (SQL rules: unexpected_rows_expectation)
    success: bool
    # Rows that broke the rule (column-map and SQL rules); None for aggregate checks.
    unexpected_count: int | None
    # What an aggregate check saw (e.g. the row count); None when GX reports none.
    observed_value: Any
    # Set when GX could not evaluate the rule (e.g. a column that does not exist).
    error: str = ""


@dataclass(frozen=True)
class ValidationReport:
    table: str
    success: bool
    version: int  # the Delta version that was validated
    rows: int  # current rows validated
    outcomes: tuple[ExpectationOutcome, ...]
    data_docs: str  # the Data Docs index.html
    result_path: str  # the stored GX validation result (JSON)

    @property
    def failed(self) -> tuple[ExpectationOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.success)


def _silver_tables(settings: Settings) -> dict[str, TableSpec]:
    return {
        name: TableSpec(
            "silver",
            name,
            table.mode,
            table.expectations,
            table.table_expectations,
            f"refine_silver --table {name}",
        )
        for name, table in settings.silver.items()
    }


# The layers whose tables are declared in conf and can be validated. Gold joins with one entry
# (`"gold": _gold_tables`, built by `build_gold --table NAME`) once conf declares gold tables.
DECLARED: dict[str, Callable[[Settings], dict[str, TableSpec]]] = {"silver": _silver_tables}


def resolve_table(settings: Settings, name: str) -> TableSpec:
    """`silver.orders` or bare `orders` (= silver) -> its declaration."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValidateError(
            f"table {name!r}: use LAYER.TABLE (e.g. silver.orders) or a bare silver table name"
        )
    layer = match["layer"] or "silver"
    if layer not in DECLARED:
        raise ValidateError(
            f"{name}: lakehouse validate checks declared {' and '.join(DECLARED)} tables; "
            f"{layer!r} has no table declarations in conf/*/tables.yml"
        )
    declared = DECLARED[layer](settings)
    try:
        return declared[match["table"]]
    except KeyError:
        known = ", ".join(sorted(f"{layer}.{t}" for t in declared)) or "none"
        raise ValidateError(
            f"{layer}.{match['table']}: no such {layer} table in conf/*/tables.yml (known: {known})"
        ) from None


def sql_query(sql: str) -> str:
    """The UnexpectedRowsExpectation query of a SQL rule: the rows where it is not true. Braces
    in the rule (regex quantifiers) are doubled: GX substitutes `{batch}` with str.format."""
    escaped = sql.replace("{", "{{").replace("}", "}}")
    return f"SELECT * FROM {{batch}} WHERE NOT coalesce(({escaped}), false)"


def build_expectations(table: TableSpec) -> list[Any]:
    """One GX expectation per declaration, in declaration order, each labelled with its rule."""
    from great_expectations.exceptions.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.core.unexpected_rows_expectation import (
        UnexpectedRowsExpectation,
    )
    from great_expectations.expectations.registry import (
        get_expectation_impl,
        list_registered_expectation_implementations,
    )

    built: list[Any] = []
    for declaration, scope in [
        *((d, "expectations") for d in table.expectations),
        *((d, "table_expectations") for d in table.table_expectations),
    ]:
        where = f"{table.qualified}: expectation {declaration.name!r}"
        action = declaration.action if scope == "expectations" else "validate only"
        # meta maps results back to rules; notes show the rule on the suite's Data Docs page.
        labels: dict[str, Any] = {
            "meta": {"rule": declaration.name, "scope": scope, "action": action},
            # A list renders as plain notes (a single string renders in red, like a warning).
            "notes": [f"rule `{declaration.name}` ({scope}, action: {action})"],
        }
        if declaration.sql:
            # Data Docs show this in place of the query.
            built.append(
                UnexpectedRowsExpectation(
                    unexpected_rows_query=sql_query(declaration.sql),
                    description=f"{declaration.name}: every row satisfies {declaration.sql}",
                    **labels,
                )
            )
            continue
        kind = declaration.expect.strip()
        try:
            impl = get_expectation_impl(kind)
        except ExpectationNotFoundError:
            known = list_registered_expectation_implementations()
            close = difflib.get_close_matches(kind, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ExpectationError(
                f"{where} in {scope}: {kind!r} is not a Great Expectations type{hint} "
                "(see https://greatexpectations.io/expectations/)"
            ) from None
        reserved = [k for k in _RESERVED_KWARGS if k in declaration.kwargs]
        if reserved:
            raise ExpectationError(f"{where} ({kind}): kwargs may not set {', '.join(reserved)}")
        try:
            built.append(impl(**declaration.kwargs, **labels))
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            detail = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise ExpectationError(
                f"{where} ({kind}): bad kwargs {dict(declaration.kwargs)}: {detail}"
            ) from None
    return built


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
    from delta.tables import DeltaTable

    path = tables.table_path(settings, table.qualified)
    if not tables.exists(spark, path):
        raise ValidateError(
            f"{table.qualified}: no Delta table at {path} yet; build it first with {table.built_by}"
        )
    version = int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])
    df = spark.read.format("delta").option("versionAsOf", version).load(path)
    if table.mode in CURRENT:
        column, condition = CURRENT[table.mode]
        if column not in df.columns:
            raise ValidateError(
                f"{table.qualified}: mode {table.mode} keeps a {column} column, but the table "
                f"at {path} has none; rebuild it with {table.built_by} --full-refresh"
            )
        df = df.where(condition)
    return df.drop(*[c for c in df.columns if c.startswith("__")]), version


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
        outcomes=_outcomes(table, result.results),
        data_docs=data_docs,
        result_path=result_path,
    )
    tables.append_system_log(spark, settings, VALIDATION_LOG, log_record(report))
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


def _outcomes(table: TableSpec, results: Sequence[Any]) -> tuple[ExpectationOutcome, ...]:
    by_rule: dict[str, ExpectationOutcome] = {}
    for evr in results:
        config = evr.expectation_config
        details: Mapping[str, Any] = evr.result or {}
        unexpected = details.get("unexpected_count")
        if config.type == SQL_TYPE:  # its observed value is the number of unexpected rows
            unexpected = details.get("observed_value")
        by_rule[config.meta["rule"]] = ExpectationOutcome(
            name=config.meta["rule"],
            type=config.type,
            success=bool(evr.success),
            unexpected_count=None if unexpected is None else int(unexpected),
            observed_value=details.get("observed_value"),
            error=_error(evr.exception_info),
        )
    return tuple(by_rule[d.name] for d in table.declared)


def _error(info: Any) -> str:
    """GX reports an exception either flat ({raised_exception, exception_message}) or per
    failed metric ({metric id: {...}}); the first message either way."""
    if not isinstance(info, Mapping):
        return ""
    candidates = [info, *(v for v in info.values() if isinstance(v, Mapping))]
    for candidate in candidates:
        if candidate.get("raised_exception"):
            return str(candidate.get("exception_message") or "exception while evaluating")
    return ""


def log_record(report: ValidationReport) -> dict[str, Any]:
    """The `_system/validation_log` row: who/when are added by append_system_log."""
    return {
        "event": "validated",
        "subject": report.table,
        "success": report.success,
        "version": report.version,
        "rows": report.rows,
        "passed": len(report.outcomes) - len(report.failed),
        "failed": len(report.failed),
        "expectations": {
            o.name: {
                "type": o.type,
                "success": o.success,
                "unexpected_count": o.unexpected_count,
                "observed_value": o.observed_value,
                **({"error": o.error} if o.error else {}),
            }
            for o in report.outcomes
        },
        "result_path": report.result_path,
        "data_docs": report.data_docs,
    }


def format_report(report: ValidationReport) -> str:
    """The compact table `lakehouse validate` prints."""
    header = ("expectation", "type", "result", "unexpected")
    rows = [
        (
            o.name,
            o.type,
            "pass" if o.success else ("ERROR" if o.error else "FAIL"),
            _unexpected(o),
        )
        for o in report.outcomes
    ]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(3)]
    lines = [
        f"{report.table} at version {report.version}: {report.rows} current row(s), "
        f"{len(report.outcomes)} expectation(s), "
        + ("all passed" if report.success else f"{len(report.failed)} FAILED"),
        *(
            "  " + "  ".join(cell.ljust(w) for cell, w in zip(r[:3], widths, strict=True)) + "  "
            f"{r[3]}"
            for r in (header, *rows)
        ),
        *(f"  {o.name}: {o.error}" for o in report.outcomes if o.error),
        f"Data Docs: {report.data_docs}",
        f"Result:    {report.result_path}",
    ]
    return "\n".join(lines)


def _unexpected(outcome: ExpectationOutcome) -> str:
    if outcome.unexpected_count is not None:
        return str(outcome.unexpected_count)
    if outcome.observed_value is not None:
        return f"- (observed {outcome.observed_value})"
    return "-"
