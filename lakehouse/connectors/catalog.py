"""What the checks before a connector is applied read: a silver table's top-level columns from
its Spark DDL, and the captured PostgreSQL columns from `information_schema`
(`lakehouse.connectors.scales`, `lakehouse.connectors.units`)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from lakehouse.connectors import postgres
from lakehouse.core.errors import ServiceUnreachable
from lakehouse.core.settings import Settings

log = logging.getLogger(__name__)

# `name TYPE...` or `name: TYPE...`, the name plain or in backquotes.
_COLUMN = re.compile(r"(?is)\s*(?:`([^`]+)`|([^\s:`]+))\s*(?::\s*|\s)\s*(\w.*)")
# The connector settings that point it at another database than `postgres:`'s.
_DATABASE_KEYS = ("database.hostname", "database.port", "database.dbname", "database.user")


@dataclass(frozen=True)
class PostgresColumn:
    table: str  # schema.table
    name: str
    data_type: str  # information_schema's: numeric, timestamp without time zone, ...
    numeric_scale: int | None  # None: a numeric without a scale, or not a numeric
    datetime_precision: int | None


def top_level(ddl: str) -> list[str]:
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


def column_types(ddl: str) -> dict[str, str]:
    """Each top-level column of a Spark DDL column list -> the text of its type and what
    follows it (`DECIMAL(12, 2) NOT NULL`)."""
    out = {}
    for column in top_level(ddl):
        found = _COLUMN.match(column)
        if found:
            out[found[1] or found[2]] = found[3].strip()
    return out


def type_words(ddl: str) -> dict[str, str]:
    """Each top-level column of a Spark DDL column list -> its type's first word, upper case
    (`TIMESTAMP`, `DECIMAL`, `ARRAY`, ...)."""
    return {
        name: re.split(r"\W", text, maxsplit=1)[0].upper()
        for name, text in column_types(ddl).items()
    }


def elsewhere(settings: Settings, source_name: str, what: str) -> bool:
    """Whether the source's connector reads another database than `postgres:` (its worker
    resolves the password): then nothing is compared, and a warning says `what` was not."""
    connector = settings.sources[source_name].connector
    keys = [k for k in _DATABASE_KEYS if connector is not None and k in connector.config]
    if keys:
        log.warning(
            "connector of %s: %s not compared (connector.config sets %s)",
            source_name,
            what,
            ", ".join(keys),
        )
    return bool(keys)


def postgres_columns(
    settings: Settings, tables: tuple[str, ...], data_types: tuple[str, ...], purpose: str
) -> dict[str, list[PostgresColumn]]:
    """column name -> the columns of that name and of one of `data_types` over `tables`.
    `purpose` says why, in the error when PostgreSQL cannot be reached."""
    import psycopg

    pg = settings.postgres
    try:
        with postgres.connect(settings) as conn:
            # Debezium matches `table.include.list` ignoring case.
            rows = conn.execute(
                "SELECT table_schema || '.' || table_name, column_name, data_type, "
                "numeric_scale, datetime_precision FROM information_schema.columns "
                "WHERE data_type = ANY(%s) AND lower(table_schema || '.' || table_name) = ANY(%s)",
                (list(data_types), [t.lower() for t in tables]),
            ).fetchall()
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServiceUnreachable(
            f"PostgreSQL at {pg.host}:{pg.port} (postgres:), {purpose}: {first}"
        ) from None
    out: dict[str, list[PostgresColumn]] = {}
    for row in rows:
        column = PostgresColumn(*row)
        out.setdefault(column.name, []).append(column)
    return out
