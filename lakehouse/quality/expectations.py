"""Data-quality expectations: declared once per table, evaluated in one pass per micro-batch.

An expectation has a name, a rule and an action:
- rule: a SQL boolean expression (`amount >= 0`), or a Great Expectations-style column
  expectation (`expect_column_values_to_not_be_null: {column: order_id}`), translated to SQL
  here so both kinds are evaluated by the same single projection;
- action: `warn` (keep the row, count it), `drop` (remove it, count it), `quarantine` (move it to
  the quarantine table with the failed rule names), `fail` (stop the batch, commit nothing).

A row *fails* a SQL rule when the expression is false or NULL: a rule that cannot be evaluated
is not a pass. A Great Expectations rule means here what it means in Great Expectations (and in
`lakehouse validate`): its column's NULLs pass and are not judged, except for
`expect_column_values_to_not_be_null`; `strict_min`/`strict_max` exclude the bound; `mostly`
(a fraction of the judged rows) decides the rule's verdict: a `fail` rule stops the batch only
when fewer than `mostly` of them pass. The other actions act on each failing row whatever the
verdict (a dropped row is dropped even when the rule mostly holds). Everything here is a pure
DataFrame -> DataFrame function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any, NamedTuple

from lakehouse.core.columns import quoted, sql_string, unnameable
from lakehouse.core.errors import ContractViolation, UsageError
from lakehouse.core.specs import EXPECTATION_ACTIONS, SNAKE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse.core.specs import ExpectationSettings

ACTIONS = EXPECTATION_ACTIONS  # declared once, with the settings that name them
FAILED = "_lh_failed_expectations"  # array<string> of failed rule names, per row
# The failed rules of a row as bits: one long per 63 rules (`_failed_mask0`, ...). Cheap to
# compute, count and filter on; the names are only made for rows that are quarantined.
MASK = "_lh_failed_mask"
_BITS = 63


class ExpectationError(UsageError):
    """A declared expectation is malformed; the message names it and the fix."""


class ExpectationFailed(ContractViolation):
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
    # Great Expectations' `mostly`: the verdict passes when at least this fraction of the rows
    # the rule judges pass.
    mostly: float = 1.0
    # The column whose NULLs the rule does not judge (they pass; `mostly` counts without them).
    skips_nulls_of: str | None = None

    def __post_init__(self) -> None:
        if not SNAKE.fullmatch(self.name):
            raise ExpectationError(f"expectation name {self.name!r}: use lower_snake_case")
        if self.action not in ACTIONS:
            raise ExpectationError(
                f"expectation {self.name!r}: action {self.action!r} is not one of "
                f"{', '.join(ACTIONS)}"
            )
        if not self.sql.strip():
            raise ExpectationError(f"expectation {self.name!r}: empty rule")
        if isinstance(self.mostly, bool) or not 0 < self.mostly <= 1:
            raise ExpectationError(
                f"expectation {self.name!r}: mostly must be a fraction in (0, 1], got "
                f"{self.mostly!r}"
            )

    def verdict_fails(self, failed: int, judged: int) -> bool:
        """Great Expectations' verdict over `judged` rows of which `failed` failed: it fails
        when fewer than `mostly` of them pass (no judged row: a pass)."""
        return failed > 0 and judged > 0 and (judged - failed) / judged < self.mostly


def _column(args: Mapping[str, Any], name: str) -> str:
    column = str(args.get("column", ""))
    if not column or unnameable(column):
        raise ExpectationError(f"expectation {name!r}: 'column' must name a column")
    # A whole name (`order.id` is that column; silver flattens structs): a rule on a struct's
    # field or a map's key is written as `sql`.
    return quoted(column)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    return sql_string(str(value))


class GxRule(NamedTuple):
    """A Great Expectations column expectation the per-batch engine evaluates: the kwargs it
    takes (any other is refused rather than ignored: it would change the meaning), and whether
    it judges NULLs (Great Expectations lets a NULL pass every column rule but not_null, and
    `mostly` counts only the rows a rule judges)."""

    kwargs: tuple[str, ...]
    judges_nulls: bool = False


GX_ROW_RULES: dict[str, GxRule] = {
    "expect_column_values_to_not_be_null": GxRule(("column", "mostly"), judges_nulls=True),
    "expect_column_values_to_be_between": GxRule(
        ("column", "min_value", "max_value", "strict_min", "strict_max", "mostly")
    ),
    "expect_column_values_to_be_in_set": GxRule(("column", "value_set", "mostly")),
    "expect_column_values_to_match_regex": GxRule(("column", "regex", "mostly")),
}


def _check_kwargs(name: str, kind: str, args: Mapping[str, Any]) -> None:
    if kind not in GX_ROW_RULES:
        raise ExpectationError(
            f"expectation {name!r}: unsupported Great Expectations type {kind!r}; use one of "
            f"{', '.join(GX_ROW_RULES)} or a SQL rule (other types belong in "
            "table_expectations, checked by lakehouse validate)"
        )
    unknown = sorted(set(args) - set(GX_ROW_RULES[kind].kwargs))
    if unknown:
        raise ExpectationError(
            f"expectation {name!r} ({kind}): kwargs {unknown} are not supported per batch; "
            f"it takes {', '.join(GX_ROW_RULES[kind].kwargs)}"
        )


def great_expectation_sql(name: str, kind: str, args: Mapping[str, Any]) -> str:
    """The SQL for a Great Expectations column expectation (the row-level ones), true for the
    rows that pass: a NULL passes unless the rule judges NULLs (`GxRule`)."""
    _check_kwargs(name, kind, args)
    column = _column(args, name)
    if kind == "expect_column_values_to_not_be_null":
        condition = f"{column} IS NOT NULL"
    elif kind == "expect_column_values_to_be_between":
        low, high = args.get("min_value"), args.get("max_value")
        if low is None and high is None:
            raise ExpectationError(f"expectation {name!r}: give min_value and/or max_value")
        parts = []
        if low is not None:
            parts.append(f"{column} {'>' if args.get('strict_min') else '>='} {_literal(low)}")
        if high is not None:
            parts.append(f"{column} {'<' if args.get('strict_max') else '<='} {_literal(high)}")
        condition = " AND ".join(parts)
    elif kind == "expect_column_values_to_be_in_set":
        values = args.get("value_set")
        if not isinstance(values, list) or not values:
            raise ExpectationError(f"expectation {name!r}: value_set must be a non-empty list")
        condition = f"{column} IN ({', '.join(_literal(v) for v in values)})"
    else:
        regex = args.get("regex")
        if not isinstance(regex, str):
            raise ExpectationError(f"expectation {name!r}: regex must be a string")
        condition = f"{column} RLIKE {_literal(regex)}"
    return condition if GX_ROW_RULES[kind].judges_nulls else f"({column} IS NULL OR ({condition}))"


def _mostly(name: str, args: Mapping[str, Any]) -> float:
    value = args.get("mostly", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpectationError(f"expectation {name!r}: mostly must be a number, got {value!r}")
    return float(value)


def from_settings(declared: Sequence[ExpectationSettings]) -> list[Expectation]:
    """The row-level rules of a table's YAML declarations, each as one SQL expression."""
    built = []
    for d in declared:
        if d.sql:
            built.append(Expectation(d.name, d.sql, d.action))
            continue
        kind = d.expect.strip()
        sql = great_expectation_sql(d.name, kind, d.kwargs)
        skips = None if GX_ROW_RULES[kind].judges_nulls else _column(d.kwargs, d.name)
        built.append(
            Expectation(
                d.name,
                sql,
                d.action,
                _mostly(d.name, d.kwargs),
                skips,
            )
        )
    return built


def mask_columns(count: int) -> list[str]:
    """The columns `evaluate` adds for `count` rules: one long per 63 rules (at least one)."""
    return [f"{MASK}{group}" for group in range(max(1, -(-count // _BITS)))]


def _bit(index: int) -> tuple[str, int]:
    return f"{MASK}{index // _BITS}", 1 << (index % _BITS)


def evaluate(df: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Add the failed-rule bitmask: bit i set when the row fails rule i. One projection of
    plain arithmetic (no extra Spark job per rule, no per-row array or lambda): the names are
    made later, and only for the rows that need them (`with_failed_names`)."""
    from pyspark.sql import functions as F

    def term(index: int, e: Expectation) -> Column:
        fails = ~F.coalesce(F.expr(e.sql).cast("boolean"), F.lit(False))
        return F.when(fails, F.lit(_bit(index)[1])).otherwise(F.lit(0)).cast("long")

    masks = []
    for column in mask_columns(len(expectations)):
        terms = [term(i, e) for i, e in enumerate(expectations) if _bit(i)[0] == column]
        masks.append(
            reduce(lambda a, b: a.bitwiseOR(b), terms, F.lit(0).cast("long")).alias(column)
        )
    return df.select("*", *masks)


def _fails_at(index: int) -> Column:
    from pyspark.sql import functions as F

    column, bit = _bit(index)
    return F.col(column).bitwiseAND(F.lit(bit)) != 0


def fails(expectations: Sequence[Expectation], name: str) -> Column:
    """Whether the row fails rule `name` (an evaluated frame)."""
    return _fails_at(next(i for i, e in enumerate(expectations) if e.name == name))


def fails_any(expectations: Sequence[Expectation], actions: Sequence[str]) -> Column:
    """Whether the row fails at least one rule whose action is in `actions`: one AND per 63
    rules."""
    from pyspark.sql import functions as F

    groups: dict[str, int] = {}
    for i, e in enumerate(expectations):
        if e.action in actions:
            column, bit = _bit(i)
            groups[column] = groups.get(column, 0) | bit
    tests = [F.col(column).bitwiseAND(F.lit(bits)) != 0 for column, bits in groups.items()]
    return reduce(lambda a, b: a | b, tests, F.lit(False))


def failed_names(expectations: Sequence[Expectation]) -> Column:
    """`_lh_failed_expectations`: the names of the rules the row fails, in declaration order."""
    from pyspark.sql import functions as F

    names = [F.when(_fails_at(i), F.lit(e.name)) for i, e in enumerate(expectations)]
    listed = F.filter(F.array(*names), lambda n: n.isNotNull()) if names else F.array()
    return listed.cast("array<string>")


def with_failed_names(evaluated: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """The evaluated rows with `_lh_failed_expectations` (names) in place of the bitmask."""
    masks = mask_columns(len(expectations))
    return evaluated.withColumn(FAILED, failed_names(expectations)).drop(*masks)


# The actions that keep a failing row out of the target. Not `fail`: its failing rows stop the
# batch (nothing is written), or, when its `mostly` verdict holds, go on as with `warn`.
REMOVING = ("drop", "quarantine")


def kept(evaluated: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Rows that go on to the target: not failing any drop or quarantine rule (without the
    bitmask)."""
    removing = fails_any(expectations, REMOVING)
    return evaluated.where(~removing).drop(*mask_columns(len(expectations)))


def quarantined(evaluated: DataFrame, expectations: Sequence[Expectation]) -> DataFrame:
    """Rows for the quarantine table, with their failed rule names: failing at least one
    quarantine rule (and no fail rule, which stops the batch before anything is written)."""
    failing = evaluated.where(fails_any(expectations, ("quarantine",)))
    return with_failed_names(failing, expectations)


def metrics(
    evaluated: DataFrame, expectations: Sequence[Expectation]
) -> dict[str, tuple[int, int]]:
    """(passed, failed) per rule, from one aggregation over the evaluated batch."""
    from pyspark.sql import functions as F

    if not expectations:
        return {}
    total = F.count(F.lit(1)).alias("_rows")
    failed = [F.sum(_fails_at(i).cast("long")).alias(e.name) for i, e in enumerate(expectations)]
    row = evaluated.agg(total, *failed).collect()[0]
    rows = int(row["_rows"])
    return {e.name: (rows - int(row[e.name] or 0), int(row[e.name] or 0)) for e in expectations}


def check_fail_rules(
    evaluated: DataFrame,
    expectations: Sequence[Expectation],
    counts: Mapping[str, tuple[int, int]],
    sample_size: int = 3,
) -> None:
    """Raise ExpectationFailed for the first `fail` rule whose verdict fails (every failing
    row, or with `mostly` fewer passing than it asks), with a sample of rows."""
    for e in expectations:
        passed, failed = counts.get(e.name, (0, 0))
        if e.action != "fail" or failed == 0 or tolerated(evaluated, e, passed, failed):
            continue
        sample = (
            evaluated.where(fails(expectations, e.name))
            .drop(*mask_columns(len(expectations)))
            .limit(sample_size)
            .collect()
        )
        raise ExpectationFailed(e.name, failed, [r.asDict() for r in sample])


def tolerated(evaluated: DataFrame, e: Expectation, passed: int, failed: int) -> bool:
    """Whether a `fail` rule's failing rows are tolerated: its `mostly` verdict passes over
    the rows it judges. The one place that decides it (refine, replay, gold, backfill)."""
    return (
        e.action == "fail"
        and e.mostly < 1
        and not e.verdict_fails(failed, judged(evaluated, e, passed + failed))
    )


def judged(evaluated: DataFrame, e: Expectation, rows: int) -> int:
    """How many of `rows` rule `e` judges: all of them, or those where its column is not NULL
    (one count, only asked for a `mostly` verdict)."""
    if e.skips_nulls_of is None:
        return rows
    return evaluated.where(f"{e.skips_nulls_of} IS NOT NULL").count()
