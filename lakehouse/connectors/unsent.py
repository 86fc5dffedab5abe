"""Before a connector is applied: silver columns the connector will never send a value for.

A silver column that no captured row carries stays NULL, nothing to show for it: a name with a
typo (`emial`), a column the connector's `column.exclude.list` (or `column.include.list`)
leaves out, and a PostgreSQL type Debezium does not send. Seen through the real connector:
3.7's PostgreSQL connector leaves `money[]` and `interval[]` columns, a composite type's and an
array of composites or of a domain out of its records (a column of a domain is sent), and
sends a `bit(n)[]` as null, whatever the row holds; it sends the elements of an array of more
than one dimension as nulls (text ones as Java object names, `[Ljava.lang.String;@4f0a4b4b`);
and PostgreSQL (before 18) publishes no generated column, which only the snapshot's rows carry,
so every change would set it NULL. So `lakehouse connectors apply` refuses such a table, naming
the column, before the connector streams a row (an array is judged by the dimensions its
column declares: PostgreSQL does not hold a `text[]` to one). Fields Debezium adds itself
(`__deleted`, `__op`, ... of its ExtractNewRecordState SMT) are not PostgreSQL's, and a
captured table that does not exist yet is not compared. (A column altered later is caught the
next time the connector is applied.)"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lakehouse.connectors.catalog import (
    Unpublished,
    column_types,
    elsewhere,
    postgres_columns,
    table_columns,
    unpublished_columns,
)
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings

# information_schema's element type name -> what Debezium does with an array of it, and a
# supported type to keep the values in instead.
_UNSENT = {
    "money": ("leaves it out of every record", "numeric(p,s)[]"),
    "interval": ("leaves it out of every record", "text[]"),
    "bit": ("sends it as null", "text[] or varbit"),
}


def check_unsent(settings: Settings, source_name: str) -> None:
    """Refuse (UsageError) a silver table of `source_name` that declares a column the
    connector will not send: not in any captured table, left out by its column lists, or
    of a PostgreSQL array type Debezium does not send."""
    connector = settings.sources[source_name].connector
    if connector is None or elsewhere(settings, source_name, "unsent columns"):
        return
    purpose = "to find the silver columns the connector would not send before applying"
    captured = table_columns(settings, connector.tables, purpose)
    arrays = postgres_columns(settings, connector.tables, tuple(_UNSENT), purpose)
    unpublished = unpublished_columns(settings, connector.tables, purpose)
    for table_name, table in settings.silver.items():
        if table.source != source_name:
            continue
        for column in column_types(table.schema):
            where = f"silver.{table_name}.schema: {column}"
            problem = _not_sent(column, captured, connector.config)
            if problem:
                raise UsageError(f"{where} {problem}")
            for found in unpublished.get(column, []):
                reason = _unpublished(column, found)
                raise UsageError(f"{where} is read from {found.table}.{column}, {reason}")
            for pg in arrays.get(column, []):
                if pg.array:
                    what, instead = _UNSENT[pg.data_type]
                    raise UsageError(
                        f"{where} is read from {pg.table}.{column}, a {pg.type_text}, which "
                        f"Debezium {what}: it would stay NULL. Remove {column} from the "
                        f"schema, or keep the values in PostgreSQL as {instead}"
                    )


def _unpublished(column: str, found: Unpublished) -> str:
    """Why `column` is refused (after `is read from <table>.<column>, `)."""
    remove = f"Remove {column} from the schema"
    if found.kind == "generated":
        return (
            "a generated column, which PostgreSQL does not publish to the connector: it would "
            f"be NULL after every change. {remove}, and compute it downstream"
        )
    if found.kind == "domain[]":
        return (
            f"an array of the domain {found.type_name}, which Debezium leaves out of every "
            f"record: it would stay NULL. {remove}, or keep the values in PostgreSQL as "
            f"{found.base}[]"
        )
    if found.kind == "composite":
        return (
            f"of the composite type {found.type_name}, which Debezium leaves out of every "
            f"record: it would stay NULL. {remove}, or keep the fields in PostgreSQL as "
            "columns of their own, or as jsonb"
        )
    return (
        "an array of more than one dimension, whose elements Debezium sends as nulls (text "
        f"ones as Java object names): it would be stored wrong. {remove}, or keep the values "
        "in PostgreSQL as jsonb"
    )


def _not_sent(column: str, captured: Mapping[str, list[str]], config: Mapping[str, str]) -> str:
    """Why no captured table sends `column` ('' when one does, or nothing can tell)."""
    if not captured or column.startswith("__"):
        return ""
    having = [f"{table}.{name}" for table, names in captured.items() for name in names]
    if column not in [h.rsplit(".", 1)[1] for h in having]:
        # Debezium names a field as PostgreSQL does; silver's parse matches names exactly.
        other = [h for h in having if h.rsplit(".", 1)[1].lower() == column.lower()]
        if other:
            return (
                f"is {other[0]} in PostgreSQL, and silver reads a field by its name as sent, "
                f"case and all: it would stay NULL. Name the column {other[0].rsplit('.', 1)[1]}"
            )
        return (
            f"is not a column of {', '.join(captured)}: it would stay NULL. Fix the name, or "
            "add the column in PostgreSQL before applying the connector"
        )
    having = [h for h in having if h.rsplit(".", 1)[1] == column]
    kept = [c for c in having if _kept(c, config)]
    if not kept:
        return (
            f"is left out by the connector's column.include.list/column.exclude.list "
            f"({', '.join(having)}): it would stay NULL. Remove {column} from the schema, or "
            "capture the column"
        )
    return ""


def _kept(qualified: str, config: Mapping[str, str]) -> bool:
    """Whether Debezium's column lists keep `schema.table.column` (anchored regular
    expressions, comma-separated, matched ignoring case)."""

    def matches(key: str) -> bool:
        patterns = [p.strip() for p in config.get(key, "").split(",") if p.strip()]
        return any(re.fullmatch(p, qualified, re.IGNORECASE) for p in patterns)

    if config.get("column.include.list", "").strip():
        return matches("column.include.list")
    return not matches("column.exclude.list")
