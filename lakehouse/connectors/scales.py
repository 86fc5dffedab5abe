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

import re
from collections.abc import Mapping

from lakehouse.connectors import postgres
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings

# `name DECIMAL(p, s)`; Spark reads DECIMAL(p) as scale 0 and DECIMAL alone as DECIMAL(10, 0).
_DECIMAL = re.compile(
    r"(?is)\s*(?:`([^`]+)`|(\S+))\s+(?:DECIMAL|DEC|NUMERIC)\b"
    r"(?:\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?(?:\s|$)"  # then NOT NULL, COMMENT, ...
)


def declared_decimals(ddl: str) -> dict[str, tuple[int, int]]:
    """The top-level `name DECIMAL(p, s)` columns of a Spark DDL column list."""
    out = {}
    for column in _top_level(ddl):
        found = _DECIMAL.match(column)
        if found:
            out[found[1] or found[2]] = (int(found[3] or 10), int(found[4] or 0))
    return out


def _top_level(ddl: str) -> list[str]:
    """The DDL split at the commas outside `<...>`, `(...)` and backquotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, char in enumerate(ddl):
        if char == "`":
            quoted = not quoted
        elif not quoted and char in "<(":
            depth += 1
        elif not quoted and char in ">)":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append(ddl[start:i])
            start = i + 1
    return [*parts, ddl[start:]]


def check_decimal_scales(settings: Settings, source_name: str) -> None:
    """Refuse (UsageError) a silver table of `source_name` that reads a precise decimal at a
    scale other than its PostgreSQL column's."""
    source = settings.sources[source_name]
    if source.connector is None:
        return
    scales = _postgres_scales(settings, source.connector.tables)
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
    with postgres.connect(settings) as conn:
        rows = conn.execute(
            "SELECT column_name, table_schema || '.' || table_name, numeric_scale "
            "FROM information_schema.columns "
            "WHERE data_type = 'numeric' AND table_schema || '.' || table_name = ANY(%s)",
            (list(tables),),
        ).fetchall()
    out: dict[str, dict[str, int | None]] = {}
    for column, where, scale in rows:
        out.setdefault(column, {})[where] = scale
    return out
