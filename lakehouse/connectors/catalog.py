"""What the checks before a connector is applied read: a silver table's top-level columns from
its Spark DDL, and the captured PostgreSQL columns from `information_schema` (an array's
element type from `pg_catalog`): `lakehouse.connectors.scales`, `.units` and `.unsent`."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

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
    # An array of `data_type`: the scale and precision are its elements'.
    array: bool = False

    @property
    def type_text(self) -> str:
        """`numeric(12,3)`-like: the type as a message names it (`[]` for an array)."""
        short = self.data_type.replace(" without time zone", "")
        size = self.datetime_precision if short in ("timestamp", "time") else None
        return short + (f"({size})" if size is not None else "") + ("[]" if self.array else "")


# information_schema's names of the element types an array column is compared by.
_ELEMENTS = {
    "numeric": "numeric",
    "money": "money",
    "timestamp": "timestamp without time zone",
    "time": "time without time zone",
    "interval": "interval",
    "bit": "bit",
}


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


def element_type(text: str) -> tuple[str, bool]:
    """A column's type text -> (its elements' type text, True) for an `ARRAY<...>`, else
    (the text, False)."""
    found = re.match(r"(?is)ARRAY\s*<", text)
    if not found:
        return text, False
    depth = 1
    for i in range(found.end(), len(text)):
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        if depth == 0:
            return text[found.end() : i].strip(), True
    return text, False


def type_words(ddl: str) -> dict[str, tuple[str, bool]]:
    """Each top-level column of a Spark DDL column list -> its type's first word, upper case
    (`TIMESTAMP`, `DECIMAL`, `MAP`, ...), an ARRAY's elements' with True."""
    out = {}
    for name, text in column_types(ddl).items():
        element, array = element_type(text)
        out[name] = (re.split(r"\W", element, maxsplit=1)[0].upper(), array)
    return out


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
    lowered = [t.lower() for t in tables]
    elements = [e for e, name in _ELEMENTS.items() if name in data_types]
    rows, arrays = fetch(
        settings,
        purpose,
        # Debezium matches `table.include.list` ignoring case.
        (
            "SELECT table_schema || '.' || table_name, column_name, data_type, "
            "numeric_scale, datetime_precision FROM information_schema.columns "
            "WHERE data_type = ANY(%s) AND lower(table_schema || '.' || table_name) = ANY(%s)",
            (list(data_types), lowered),
        ),
        # An array's element typmod is only in the catalog (information_schema's
        # element_types leaves scale and precision null).
        (
            "SELECT n.nspname || '.' || c.relname, a.attname, e.typname, a.atttypmod "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_type t ON t.oid = a.atttypid JOIN pg_type e ON e.oid = t.typelem "
            "WHERE t.typcategory = 'A' AND a.attnum > 0 AND NOT a.attisdropped "
            "AND e.typname = ANY(%s) AND lower(n.nspname || '.' || c.relname) = ANY(%s)",
            (elements, lowered),
        ),
    )
    out: dict[str, list[PostgresColumn]] = {}
    for column in [PostgresColumn(*row) for row in rows] + [_array(*row) for row in arrays]:
        out.setdefault(column.name, []).append(column)
    return out


def table_columns(
    settings: Settings, tables: tuple[str, ...], purpose: str
) -> dict[str, list[str]]:
    """`schema.table` -> its column names, for each of `tables` that exists (as Debezium
    matches them, ignoring case)."""
    (rows,) = fetch(
        settings,
        purpose,
        (
            "SELECT table_schema || '.' || table_name, column_name "
            "FROM information_schema.columns "
            "WHERE lower(table_schema || '.' || table_name) = ANY(%s) ORDER BY ordinal_position",
            ([t.lower() for t in tables],),
        ),
    )
    out: dict[str, list[str]] = {}
    for table, column in rows:
        out.setdefault(table, []).append(column)
    return out


@dataclass(frozen=True)
class Unpublished:
    """A captured column no change carries right: `kind` is `generated` (PostgreSQL before
    18 does not publish it), `domain[]` or `composite` (Debezium 3.7 leaves it out of every
    record, an array of composites too), `dimensions` (an array declared with more than one:
    Debezium sends its elements as nulls, text ones as Java object names); all seen through
    the real connector."""

    table: str
    kind: str
    type_name: str  # the domain, composite, or the array's element type
    base: str  # a domain's base type ('' otherwise)


def unpublished_columns(
    settings: Settings, tables: tuple[str, ...], purpose: str
) -> dict[str, list[Unpublished]]:
    """column name -> the columns of `tables` of that name whose values never arrive right."""
    (rows,) = fetch(
        settings,
        purpose,
        (
            "SELECT n.nspname || '.' || c.relname, a.attname, "
            "CASE WHEN a.attgenerated <> '' THEN 'generated' "
            "WHEN t.typtype = 'c' OR e.typtype = 'c' THEN 'composite' "
            "WHEN e.typtype = 'd' THEN 'domain[]' ELSE 'dimensions' END, "
            "coalesce(e.typname, t.typname), coalesce(format_type(e.typbasetype, NULL), '') "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid "
            "LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A' "
            "WHERE a.attnum > 0 AND NOT a.attisdropped AND (a.attgenerated <> '' "
            "OR t.typtype = 'c' OR e.typtype IN ('c', 'd') OR a.attndims > 1) "
            "AND lower(n.nspname || '.' || c.relname) = ANY(%s)",
            ([t.lower() for t in tables],),
        ),
    )
    out: dict[str, list[Unpublished]] = {}
    for table, column, kind, type_name, base in rows:
        out.setdefault(column, []).append(Unpublished(table, kind, type_name, base))
    return out


def fetch(settings: Settings, purpose: str, *queries: tuple[str, tuple[object, ...]]) -> list[Any]:
    """Each query's rows, from `postgres:`'s database (ServiceUnreachable, naming `purpose`,
    when it cannot be reached)."""
    import psycopg

    pg = settings.postgres
    try:
        with postgres.connect(settings) as conn:
            return [conn.execute(sql, params).fetchall() for sql, params in queries]
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServiceUnreachable(
            f"PostgreSQL at {pg.host}:{pg.port} (postgres:), {purpose}: {first}"
        ) from None


def _array(table: str, name: str, element: str, typmod: int) -> PostgresColumn:
    """An array column from the catalog, its element's typmod read as information_schema
    reads a column's: numeric ((precision << 16) | scale) + 4; timestamp and time the
    precision, 6 when none is given."""
    if element == "numeric":
        scale = (typmod - 4) & 0xFFFF if typmod >= 4 else None
        return PostgresColumn(table, name, "numeric", scale, None, array=True)
    if element in ("timestamp", "time"):
        precision = typmod if typmod >= 0 else 6
        return PostgresColumn(table, name, _ELEMENTS[element], None, precision, array=True)
    return PostgresColumn(table, name, _ELEMENTS[element], None, None, array=True)
