"""Data-quality expectations: declared once per table, evaluated in one pass per micro-batch.

An expectation has a name, a rule and an action:
- rule: a SQL boolean expression (`amount >= 0`), or a Great Expectations-style column
  expectation (`expect_column_values_to_not_be_null: {column: order_id}`), translated to SQL
  here so both kinds are evaluated by the same single projection;
- action: `warn` (keep the row, count it), `drop` (remove it, count it), `quarantine` (move it to
  the quarantine table with the failed rule names), `fail` (stop the batch, commit nothing).

A row *fails* a rule when the expression is false or NULL: a rule that cannot be evaluated is
not a pass. Everything here is a pure DataFrame -> DataFrame function.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse.settings import ExpectationSettings

ACTIONS = ("warn", "drop", "quarantine", "fail")
FAILED = "_failed_expectations"  # array<string> of failed rule names, per row
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


class ExpectationError(ValueError):
    """A declared expectation is malformed; the message names it and the fix."""


class ExpectationFailed(RuntimeError):
    """A `fail` expectation was violated: the batch must not be committed."""

    def __init__(self, rule: str, failed: int, sample: Sequence[Mapping[str, Any]]) -> None:
        self.rule, self.failed, self.sample = rule, failed, list(sample)
        super().__init__(
            f"expectation {rule!r} (action fail) failed for {failed} row(s); nothing of this "
            f"batch was committed. Sample: {self.sample}"
        )


@dataclass(frozen=True)
class Expectation:
    name: str
    sql: str
    action: str = "warn"

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ExpectationError(f"expectation name {self.name!r}: use lower_snake_case")
        if self.action not in ACTIONS:
            raise ExpectationError(
                f"expectation {self.name!r}: action {self.action!r} is not one of "
                f"{', '.join(ACTIONS)}"
            )
        if not self.sql.strip():
            raise ExpectationError(f"expectation {self.name!r}: empty rule")


def _column(args: Mapping[str, Any], name: str) -> str:
    column = str(args.get("column", ""))
    if not _COLUMN.fullmatch(column):
        raise ExpectationError(f"expectation {name!r}: 'column' must name a column")
    return f"`{column}`" if "." not in column else column


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def great_expectation_sql(name: str, kind: str, args: Mapping[str, Any]) -> str:
    """The SQL for a Great Expectations column expectation (the row-level ones)."""
    column = _column(args, name)
    if kind == "expect_column_values_to_not_be_null":
        return f"{column} IS NOT NULL"
    if kind == "expect_column_values_to_be_between":
        low, high = args.get("min_value"), args.get("max_value")
        if low is None and high is None:
            raise ExpectationError(f"expectation {name!r}: give min_value and/or max_value")
        parts = []
        if low is not None:
            parts.append(f"{column} >= {_literal(low)}")
        if high is not None:
            parts.append(f"{column} <= {_literal(high)}")
        return " AND ".join(parts)
    if kind == "expect_column_values_to_be_in_set":
        values = args.get("value_set")
        if not isinstance(values, list) or not values:
            raise ExpectationError(f"expectation {name!r}: value_set must be a non-empty list")
        return f"{column} IN ({', '.join(_literal(v) for v in values)})"
    if kind == "expect_column_values_to_match_regex":
        regex = args.get("regex")
        if not isinstance(regex, str):
            raise ExpectationError(f"expectation {name!r}: regex must be a string")
        return f"{column} RLIKE {_literal(regex)}"
    raise ExpectationError(
        f"expectation {name!r}: unsupported Great Expectations type {kind!r}; use one of "
        "expect_column_values_to_not_be_null, _to_be_between, _to_be_in_set, _to_match_regex, "
        "or a SQL rule"
    )


def from_settings(declared: Sequence[ExpectationSettings]) -> list[Expectation]:
    """The row-level rules of a table's YAML declarations, each as one SQL expression."""
    return [
        Expectation(
            d.name,
            d.sql if d.sql else great_expectation_sql(d.name, d.expect, d.kwargs),
            d.action,
        )
        for d in declared
    ]


def evaluate(df: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Add `_failed_expectations`: the names of the rules each row fails, in one projection
    (no extra Spark job per rule)."""
    from pyspark.sql import functions as F

    checks: list[Column] = [
        F.when(~F.coalesce(F.expr(e.sql).cast("boolean"), F.lit(False)), F.lit(e.name))
        for e in expectations
    ]
    failed = F.filter(F.array(*checks), lambda c: c.isNotNull()) if checks else F.array()
    return df.withColumn(FAILED, failed.cast("array<string>"))


def _fails_any(names: Sequence[str]) -> Column:
    from pyspark.sql import functions as F

    if not names:
        return F.lit(False)
    return F.arrays_overlap(F.col(FAILED), F.array(*[F.lit(n) for n in names]))


def kept(evaluated: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Rows that go on to the target: not failing any drop, quarantine or fail rule."""
    removing = [e.name for e in expectations if e.action in ("drop", "quarantine", "fail")]
    return evaluated.where(~_fails_any(removing))


def quarantined(evaluated: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Rows for the quarantine table: failing at least one quarantine rule (and no fail rule,
    which stops the batch before anything is written)."""
    names = [e.name for e in expectations if e.action == "quarantine"]
    return evaluated.where(_fails_any(names))


def metrics(
    evaluated: DataFrame, expectations: Sequence[Expectation]
) -> dict[str, tuple[int, int]]:
    """(passed, failed) per rule, from one aggregation over the evaluated batch."""
    from pyspark.sql import functions as F

    if not expectations:
        return {}
    total = F.count(F.lit(1)).alias("_rows")
    failed = [
        F.sum(F.array_contains(F.col(FAILED), e.name).cast("long")).alias(e.name)
        for e in expectations
    ]
    row = evaluated.agg(total, *failed).collect()[0]
    rows = int(row["_rows"])
    return {e.name: (rows - int(row[e.name] or 0), int(row[e.name] or 0)) for e in expectations}


def check_fail_rules(
    evaluated: DataFrame,
    expectations: Sequence[Expectation],
    counts: Mapping[str, tuple[int, int]],
    sample_size: int = 3,
) -> None:
    """Raise ExpectationFailed for the first violated `fail` rule, with a sample of rows."""
    from pyspark.sql import functions as F

    for e in expectations:
        if e.action == "fail" and counts.get(e.name, (0, 0))[1] > 0:
            sample = (
                evaluated.where(F.array_contains(F.col(FAILED), e.name))
                .drop(FAILED)
                .limit(sample_size)
                .collect()
            )
            raise ExpectationFailed(e.name, counts[e.name][1], [r.asDict() for r in sample])
