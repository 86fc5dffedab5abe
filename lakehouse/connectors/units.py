"""Before a connector is applied: each silver table's epoch timestamps and times of day against
the PostgreSQL columns they are read from.

Debezium's `time.precision.mode` sends a `timestamp` and a `time` as a count whose unit follows
the column's precision: under `adaptive` (the default) a `timestamp(0..3)` is epoch
milliseconds and a `timestamp(4..6)` (and a plain `timestamp`) epoch microseconds; a
`time(0..3)` milliseconds since midnight and a `time(4..6)` microseconds; under
`adaptive_time_microseconds` every `time` is microseconds; under `connect` everything is
milliseconds. Silver reads a column in the unit its encoding names (by default the mode's unit
for precision 6), and a count in the wrong unit is a real instant: a `timestamp(3)` read as
microseconds is a day in January 1970, nothing to show for it. So `lakehouse connectors apply`
refuses such a table, naming the column and the encoding to declare, before the connector
streams a row. (`timestamptz` and `timetz` are ISO text: any encoding reads them.) As with
decimal scales, a column altered later is caught the next time the connector is applied."""

from __future__ import annotations

from lakehouse.connectors.catalog import PostgresColumn, elsewhere, postgres_columns, type_words
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings
from lakehouse.silver import decode

_TIMESTAMP = "timestamp without time zone"
_TIME = "time without time zone"
_UNITS = {
    **{f"epoch_{u}": u for u in ("s", "ms", "us", "ns")},
    **{f"time_{u}": u for u in ("ms", "us", "ns")},
}


def sent_unit(data_type: str, precision: int | None, mode: str) -> str:
    """The unit Debezium sends a `timestamp`/`time` column of `precision` in, under `mode`."""
    if mode == "connect":
        return "ms"
    if mode == "adaptive_time_microseconds" and data_type == _TIME:
        return "us"
    return "ms" if precision is not None and precision <= 3 else "us"


def check_time_units(settings: Settings, source_name: str) -> None:
    """Refuse (UsageError) a silver table of `source_name` that reads a timestamp or a time of
    day in another unit than its connector sends the PostgreSQL column in."""
    source = settings.sources[source_name]
    connector = source.connector
    if connector is None or elsewhere(settings, source_name, "time units"):
        return
    purpose = "to compare the silver tables' time units with the captured columns before applying"
    columns = postgres_columns(settings, connector.tables, (_TIMESTAMP, _TIME), purpose)
    defaults = decode.kind_encodings(
        "cdc", source.decimal_handling_mode, source.time_precision_mode
    )
    for table_name, table in settings.silver.items():
        if table.source != source_name:
            continue
        for column, (word, array) in type_words(table.schema).items():
            declared = table.encodings.get(column, "")
            reads = declared or (defaults["timestamp"] if word.startswith("TIMESTAMP") else "")
            if reads not in _UNITS:
                continue
            for pg in columns.get(column, []):
                if pg.array != array or (pg.data_type == _TIMESTAMP) != reads.startswith("epoch_"):
                    continue
                unit = sent_unit(pg.data_type, pg.datetime_precision, source.time_precision_mode)
                if unit != _UNITS[reads]:
                    mode = source.time_precision_mode
                    raise UsageError(_message(table_name, column, reads, pg, unit, mode))


def _message(table: str, column: str, reads: str, pg: PostgresColumn, unit: str, mode: str) -> str:
    timestamp = reads.startswith("epoch_")
    right = f"epoch_{unit}" if timestamp else f"time_{unit}"
    return (
        f"silver.{table}: {column} is read as {reads} but {pg.table}.{column} is "
        f"{pg.type_text}, which the connector sends in {unit} "
        f"(time_precision_mode: {mode}): every value would be read in the wrong unit. "
        f"Declare encodings: {{{column}: {right}}}"
    )
