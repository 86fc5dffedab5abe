"""Before a connector is applied: each silver table's DECIMAL columns against the PostgreSQL
columns they are read from.

Debezium's precise decimals (`decimal.handling.mode: precise`, the default) are the base64 of
the unscaled digits, without the scale when the column has one (`numeric(12,3)`): silver reads
them at its own declared scale. A DECIMAL(12,2) over a `numeric(12,3)` would store 13.299 as
132.99, every value wrong by a factor of ten and nothing to show for it. So `lakehouse
connectors apply` refuses such a table, naming the column and the fix, before the connector
streams a row. (A `numeric` without a scale is sent with its scale and read exactly; `string`
and `double` modes send text, which silver reads exactly or quarantines.) The check runs when
the connector is applied: a column altered later (`ALTER TABLE ... TYPE numeric(12,3)`) is
caught the next time it is."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from lakehouse.connectors import postgres
from lakehouse.core.errors import ServiceUnreachable, UsageError
from lakehouse.core.settings import Settings

log = logging.getLogger(__name__)

# `name DECIMAL(p, s)` or `name: DECIMAL(p, s)`; Spark reads DECIMAL(p) as scale 0 and DECIMAL
# alone as DECIMAL(10, 0).
_DECIMAL = re.compile(
    r"(?is)\s*(?:`([^`]+)`|([^\s:`]+))\s*(?::\s*|\s)\s*(?:DECIMAL|DEC|NUMERIC)\b"
    r"(?:\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?(?:\s|$)"  # then NOT NULL, COMMENT, ...
)
# The connector settings that point it at another database than `postgres:`'s.
_DATABASE_KEYS = ("database.hostname", "database.port", "database.dbname", "database.user")


def declared_decimals(ddl: str) -> dict[str, tuple[int, int]]:
    """The top-level `name DECIMAL(p, s)` columns of a Spark DDL column list."""
    out = {}
    for column in _top_level(ddl):
        found = _DECIMAL.match(column)
        if found:
            out[found[1] or found[2]] = (int(found[3] or 10), int(found[4] or 0))
    return out


def _top_level(ddl: str) -> list[str]:
    """The DDL split at the commas outside `<...>`, `(...)`, backquotes and quoted strings (a
    COMMENT may hold any of them)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(ddl):
        if quote:
            quote = "" if char == quote else quote
        elif char in "`'\"":
            quote = char
        elif char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        elif depth == 0 and char == ",":
            parts.append(ddl[start:i])
            start = i + 1
    return [*parts, ddl[start:]]


def check_decimal_scales(settings: Settings, source_name: str) -> None:
    """Refuse (UsageError) a silver table of `source_name` that reads a precise decimal at a
    scale other than its PostgreSQL column's."""
    source = settings.sources[source_name]
    connector = source.connector
    if connector is None:
        return
    elsewhere = [k for k in _DATABASE_KEYS if k in connector.config]
    if elsewhere:
        # Its database is not the one this can reach (the worker resolves its password).
        log.warning(
            "connector of %s: decimal scales not compared (connector.config sets %s)",
            source_name,
            ", ".join(elsewhere),
        )
        return
    scales = _postgres_scales(settings, connector.tables)
    for table_name, table in settings.silver.items():
        if table.source != source_name:
            continue
        for column, (precision, scale) in declared_decimals(table.schema).items():
            encoding = table.encodings.get(column) or (
                "base64" if source.decimal_handling_mode == "precise" else "text"
            )
            if encoding != "base64":
                continue
            for where, pg_scale in scales.get(column, {}).items():
                if pg_scale is not None and pg_scale != scale:
                    raise UsageError(
                        _message(table_name, column, precision, scale, where, pg_scale)
                    )


def _message(table: str, column: str, precision: int, scale: int, where: str, pg: int) -> str:
    return (
        f"silver.{table}.schema: {column} is DECIMAL({precision},{scale}) but {where}.{column} "
        f"has scale {pg}; Debezium's precise decimals carry no scale, so silver would read "
        f"every value at scale {scale} (off by a factor of 10^{abs(pg - scale)}). Declare "
        f"{column} DECIMAL(p,{pg}), or set the source's decimal_handling_mode: string"
    )


def _postgres_scales(
    settings: Settings, tables: tuple[str, ...]
) -> Mapping[str, dict[str, int | None]]:
    """column -> {schema.table: its numeric scale (None: unconstrained)} over `tables`."""
    import psycopg

    pg = settings.postgres
    try:
        with postgres.connect(settings) as conn:
            # Debezium matches `table.include.list` ignoring case.
            rows = conn.execute(
                "SELECT column_name, table_schema || '.' || table_name, numeric_scale "
                "FROM information_schema.columns WHERE data_type = 'numeric' "
                "AND lower(table_schema || '.' || table_name) = ANY(%s)",
                ([t.lower() for t in tables],),
            ).fetchall()
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServiceUnreachable(
            f"PostgreSQL at {pg.host}:{pg.port} (postgres:), to compare the silver tables' "
            f"decimal scales with the captured columns before applying: {first}"
        ) from None
    out: dict[str, dict[str, int | None]] = {}
    for column, where, scale in rows:
        out.setdefault(column, {})[where] = scale
    return out
