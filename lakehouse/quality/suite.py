"""A table's Great Expectations suite, from its declarations in `conf/*/*.yml`: its
`expectations` (the per-batch rules the job enforces) plus its `table_expectations` (row count,
key uniqueness, ... checked only by `lakehouse validate`). A declaration with `expect:` becomes
the Great Expectations class of that snake_case type with its `kwargs`; one with `sql:` becomes
an `UnexpectedRowsExpectation` selecting the rows where the expression is not true (false or
NULL, as in the per-batch engine)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.core.specs import ExpectationSettings
from lakehouse.quality.expectations import ExpectationError

_NAME = re.compile(r"(?:(?P<layer>[a-z_]+)\.)?(?P<table>[a-z][a-z0-9_]*)")
# Keys this module sets on every expectation; a declaration may not override them.
_RESERVED_KWARGS = ("meta", "id", "notes")


class ValidateError(UsageError):
    """The table cannot be validated (unknown, not built yet, unexpected layout); the message
    names the table and the fix."""


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


def _gold_tables(settings: Settings) -> dict[str, TableSpec]:
    # Gold tables keep no bookkeeping: every row is current ("append" layout).
    return {
        name: TableSpec(
            "gold",
            name,
            "append",
            table.expectations,
            table.table_expectations,
            f"build_gold --table {name}",
        )
        for name, table in settings.gold.items()
    }


# The layers whose tables are declared in conf and can be validated.
DECLARED: dict[str, Callable[[Settings], dict[str, TableSpec]]] = {
    "silver": _silver_tables,
    "gold": _gold_tables,
}
_FILES = {"silver": "tables.yml", "gold": "gold.yml"}


def resolve_table(settings: Settings, name: str) -> TableSpec:
    """`silver.orders`, `gold.daily_revenue`, or a bare name (silver first, then gold) -> its
    declaration."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValidateError(
            f"table {name!r}: use LAYER.TABLE (e.g. silver.orders) or a bare table name"
        )
    layer, table = match["layer"], match["table"]
    if layer is None:
        layer = next((lay for lay in DECLARED if table in DECLARED[lay](settings)), "silver")
    if layer not in DECLARED:
        raise ValidateError(
            f"{name}: lakehouse validate checks declared {' and '.join(DECLARED)} tables; "
            f"{layer!r} has no table declarations of its own"
        )
    declared = DECLARED[layer](settings)
    try:
        return declared[table]
    except KeyError:
        known = ", ".join(sorted(f"{layer}.{t}" for t in declared)) or "none"
        raise ValidateError(
            f"{layer}.{table}: no such {layer} table in conf/*/{_FILES[layer]} (known: {known})"
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
