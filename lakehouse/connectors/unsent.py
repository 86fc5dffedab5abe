"""Before a connector is applied: silver columns over PostgreSQL columns Debezium does not send.

Debezium 3.7's PostgreSQL connector leaves `money[]` and `interval[]` columns out of its
records and sends a `bit(n)[]` as null, whatever the row holds (seen through the real
connector). A silver column declared over one would stay NULL, nothing to show for it. So
`lakehouse connectors apply` refuses such a table, naming the column, before the connector
streams a row. (A column altered later is caught the next time the connector is applied.)"""

from __future__ import annotations

from lakehouse.connectors.catalog import column_types, elsewhere, postgres_columns
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
    """Refuse (UsageError) a silver table of `source_name` that declares a column over a
    PostgreSQL array column Debezium does not send."""
    connector = settings.sources[source_name].connector
    if connector is None or elsewhere(settings, source_name, "unsent column types"):
        return
    purpose = "to find the captured columns Debezium does not send before applying"
    columns = postgres_columns(settings, connector.tables, tuple(_UNSENT), purpose)
    for table_name, table in settings.silver.items():
        if table.source != source_name:
            continue
        for column in column_types(table.schema):
            for pg in columns.get(column, []):
                if pg.array:
                    what, instead = _UNSENT[pg.data_type]
                    raise UsageError(
                        f"silver.{table_name}.schema: {column} is read from "
                        f"{pg.table}.{column}, a {pg.type_text}, which Debezium {what}: it "
                        f"would stay NULL. Remove {column} from the schema, or keep the values "
                        f"in PostgreSQL as {instead}"
                    )
