"""What `lakehouse validate` reports: per expectation its outcome, the compact table it prints,
and the `_system/validation_log` row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakehouse.core.errors import CheckFailed
from lakehouse.quality.suite import TableSpec

SQL_TYPE = "unexpected_rows_expectation"


class ValidationFailed(CheckFailed):
    """At least one expectation failed; carries the report (the CLI exits 1)."""

    def __init__(self, report: ValidationReport) -> None:
        self.report = report
        failed = ", ".join(o.name for o in report.failed)
        super().__init__(
            f"{report.table}: {len(report.failed)} of {len(report.outcomes)} expectation(s) "
            f"failed ({failed}); see {report.data_docs}"
        )


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


def outcomes(table: TableSpec, results: Sequence[Any]) -> tuple[ExpectationOutcome, ...]:
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
    """The `_system/validation_log` row: who/when are added by system.append_log."""
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
