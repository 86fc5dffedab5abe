"""Before a connector is applied: each silver table's DECIMAL columns against the PostgreSQL
columns they are read from.

Debezium's precise decimals (`decimal.handling.mode: precise`, the default) are the base64 of
the unscaled digits, without the scale when the column has one (`numeric(12,3)`): silver reads
them at its own declared scale. A DECIMAL(12,2) over a `numeric(12,3)` would store 13.299 as
132.99, every value wrong by a factor of ten and nothing to show for it. So `lakehouse
connectors apply` refuses such a table, naming the column and the fix, before the connector
streams a row. A `money` column is sent at the connector's `money.fraction.digits` (2 by
default). (A `numeric` without a scale is sent with its scale and read exactly; `string`
and `double` modes send text, which silver reads exactly or quarantines.) The check runs when
the connector is applied: a column altered later (`ALTER TABLE ... TYPE numeric(12,3)`) is
caught the next time it is."""

from __future__ import annotations

import re

from lakehouse.connectors.catalog import column_types, element_type, elsewhere, postgres_columns
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.silver import decode

# A column's type text: DECIMAL(p, s); Spark reads DECIMAL(p) as scale 0 and DECIMAL alone as
# DECIMAL(10, 0).
_DECIMAL = re.compile(
    r"(?is)(?:DECIMAL|DEC|NUMERIC)\b"
    r"(?:\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?(?:\s|$)"  # then NOT NULL, COMMENT, ...
)


def declared_decimals(ddl: str, arrays: bool = False) -> dict[str, tuple[int, int]]:
    """The top-level `name DECIMAL(p, s)` columns of a Spark DDL column list (with `arrays`:
    the `name ARRAY<DECIMAL(p, s)>` ones)."""
    out = {}
    for column, text in column_types(ddl).items():
        element, array = element_type(text)
        found = _DECIMAL.match(element) if array == arrays else None
        if found:
            out[column] = (int(found[1] or 10), int(found[2] or 0))
    return out


def check_decimal_scales(settings: Settings, source_name: str) -> None:
    """Refuse (UsageError) a silver table of `source_name` that reads a precise decimal at a
    scale other than its PostgreSQL column's."""
    source = settings.sources[source_name]
    connector = source.connector
    if connector is None or elsewhere(settings, source_name, "decimal scales"):
        return
    purpose = (
        "to compare the silver tables' decimal scales with the captured columns before applying"
    )
    columns = postgres_columns(settings, connector.tables, ("numeric", "money"), purpose)
    money_scale = int(connector.config.get("money.fraction.digits", "2"))
    default = decode.kind_encodings("cdc", source.decimal_handling_mode)["decimal"]
    for table_name, table in settings.silver.items():
        if table.source != source_name:
            continue
        for array in (False, True):
            for column, (precision, scale) in declared_decimals(table.schema, array).items():
                if (table.encodings.get(column) or default) != "base64":
                    continue
                for pg in columns.get(column, []):
                    sent = money_scale if pg.data_type == "money" else pg.numeric_scale
                    if pg.array == array and sent is not None and sent != scale:
                        declared = _typed(f"DECIMAL({precision},{scale})", array)
                        fix = _typed(f"DECIMAL(p,{sent})", array)
                        raise UsageError(
                            _message(table_name, column, declared, scale, pg.table, sent, fix)
                        )


def _typed(decimal: str, array: bool) -> str:
    return f"ARRAY<{decimal}>" if array else decimal


def _message(
    table: str, column: str, declared: str, scale: int, where: str, pg: int, fix: str
) -> str:
    return (
        f"silver.{table}.schema: {column} is {declared} but {where}.{column} "
        f"has scale {pg}; Debezium's precise decimals carry no scale, so silver would read "
        f"every value at scale {scale} (off by a factor of 10^{abs(pg - scale)}). Declare "
        f"{column} {fix}, or set the source's decimal_handling_mode: string"
    )
