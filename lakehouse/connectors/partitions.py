"""Before a connector is applied: a partitioned table whose changes would never arrive.

PostgreSQL publishes a partitioned table's changes as the partition that holds the row unless
the publication says `publish_via_partition_root`, and Debezium drops a change of a table its
include list does not name (the parent): only the snapshot arrives, every change after it is
lost without a trace (tests/silver/test_cdc_partitioned.py). The lakehouse's connectors
publish via the root (`lakehouse.connectors.debezium`), so `lakehouse connectors apply`
refuses a captured partitioned table when a connector's config turns that off, or when the
publication the user manages (`publication.autocreate.mode: disabled`) does not do it."""

from __future__ import annotations

from lakehouse.connectors.catalog import elsewhere, fetch
from lakehouse.connectors.debezium import PUBLISH_VIA_ROOT, publication_name
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings

_PARTITIONED = (
    "SELECT n.nspname || '.' || c.relname FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    # Debezium matches `table.include.list` ignoring case.
    "WHERE c.relkind = 'p' AND lower(n.nspname || '.' || c.relname) = ANY(%s) ORDER BY 1"
)
_VIA_ROOT = "SELECT pubviaroot FROM pg_publication WHERE pubname = %s"


def check_partition_root(settings: Settings, source_name: str) -> None:
    """Refuse (UsageError) a captured partitioned table whose changes the connector of
    `source_name` would drop: its config sets `publish.via.partition.root` off, or its
    user-managed publication does not publish via the root."""
    connector = settings.sources[source_name].connector
    if connector is None or elsewhere(settings, source_name, "partitioned tables"):
        return
    config = connector.config
    publication = config.get("publication.name", publication_name(connector.slot_name(source_name)))
    purpose = "to find partitioned tables before applying"
    partitioned, via_root = fetch(
        settings,
        purpose,
        (_PARTITIONED, ([t.lower() for t in connector.tables],)),
        (_VIA_ROOT, (publication,)),
    )
    if not partitioned:
        return
    tables = ", ".join(row[0] for row in partitioned)
    where = f"sources.{source_name}.connector"
    lost = (
        f"{tables} is partitioned: PostgreSQL would publish its changes as its partitions, "
        "which the connector drops (only the snapshot would arrive)"
    )
    if config.get(PUBLISH_VIA_ROOT, "true").strip().lower() != "true":
        raise UsageError(f"{where}.config.{PUBLISH_VIA_ROOT}: {lost}. Remove the setting")
    managed = config.get("publication.autocreate.mode", "filtered") == "disabled"
    if managed and via_root and not via_root[0][0]:
        raise UsageError(
            f"{where}: publication {publication}: {lost}. Run ALTER PUBLICATION {publication} "
            "SET (publish_via_partition_root = true) in PostgreSQL"
        )
