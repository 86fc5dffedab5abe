"""Before a connector is applied: a partitioned table whose changes would never arrive.

PostgreSQL publishes a partitioned table's changes as the partition that holds the row unless
the publication says `publish_via_partition_root`, and Debezium drops a change of a table its
include list does not name (the parent): only the snapshot arrives, every change after it is
lost without a trace (tests/silver/test_cdc_partitioned.py). The lakehouse's connectors
publish via the root (`lakehouse.connectors.debezium`), so `lakehouse connectors apply`
refuses a captured partitioned table when a connector's config turns that off, or when the
publication the user manages (`publication.autocreate.mode: disabled`) does not do it."""

from __future__ import annotations

from collections.abc import Mapping

from lakehouse.connectors.catalog import elsewhere, fetch
from lakehouse.connectors.debezium import (
    PUBLISH_VIA_ROOT,
    configured_publication,
    publication_via_root,
    publishes_via_root,
    user_managed,
)
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings

_PARTITIONED = (
    "SELECT n.nspname || '.' || c.relname FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    # Debezium matches `table.include.list` ignoring case.
    "WHERE c.relkind = 'p' AND lower(n.nspname || '.' || c.relname) = ANY(%s) ORDER BY 1"
)


def check_partition_root(settings: Settings, source_name: str, config: Mapping[str, str]) -> None:
    """Refuse (UsageError) a captured partitioned table whose changes the connector of
    `source_name`, applied with `config` (`sources.connector_config`), would drop: the config
    sets `publish.via.partition.root` off, or its user-managed publication does not publish
    via the root."""
    connector = settings.sources[source_name].connector
    if connector is None or elsewhere(settings, source_name, "partitioned tables"):
        return
    tables = [t.lower() for t in connector.tables]
    (partitioned,) = fetch(
        settings, "to find partitioned tables before applying", (_PARTITIONED, (tables,))
    )
    if not partitioned:
        return
    names = ", ".join(row[0] for row in partitioned)
    where = f"sources.{source_name}.connector"
    lost = (
        f"{names} is partitioned: PostgreSQL would publish its changes as its partitions, "
        "which the connector drops (only the snapshot would arrive)"
    )
    if not publishes_via_root(config):
        raise UsageError(f"{where}.config.{PUBLISH_VIA_ROOT}: {lost}. Remove the setting")
    publication = configured_publication(config)
    if user_managed(config) and publication_via_root(settings, publication) is False:
        raise UsageError(
            f"{where}: publication {publication}: {lost}. Run ALTER PUBLICATION {publication} "
            "SET (publish_via_partition_root = true) in PostgreSQL"
        )
