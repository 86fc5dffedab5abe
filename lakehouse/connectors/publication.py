"""Before a connector is applied: a captured table whose changes would never arrive.

PostgreSQL publishes a partitioned table's changes as the partition that holds the row unless
the publication says `publish_via_partition_root`, and Debezium drops a change of a table its
include list does not name (the parent): only the snapshot arrives, every change after it is
lost without a trace (tests/silver/test_cdc_partitioned.py). The lakehouse's connectors
publish via the root (`lakehouse.connectors.debezium`), so `lakehouse connectors apply`
refuses a captured partitioned table when a connector's config turns that off, or when the
publication the user manages (`publication.autocreate.mode: disabled` or `no_tables`) does
not do it. It also refuses a captured table such a publication does not publish as itself
(absent, or a partition published as its root), and a partition captured by its own name
while a publication of all tables publishes via the root."""

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

# The captured tables that exist: each one's relkind ('p': partitioned) and whether it is a
# partition.
_CAPTURED = (
    "SELECT n.nspname || '.' || c.relname, c.relkind, c.relispartition FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    # Debezium matches `table.include.list` ignoring case.
    "WHERE lower(n.nspname || '.' || c.relname) = ANY(%s) ORDER BY 1"
)
# The tables a publication publishes changes as (a partitioned table's, via the root, as the
# topmost one it holds; else as each partition).
_PUBLISHED = "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s"


def check_publication(settings: Settings, source_name: str, config: Mapping[str, str]) -> None:
    """Refuse (UsageError) a captured table whose changes the connector of `source_name`,
    applied with `config` (`sources.connector_config`), would drop or never receive: a
    partitioned table while the config sets `publish.via.partition.root` off, or its
    user-managed publication does not publish via the root; a table a user-managed
    publication does not publish as itself; a partition named on its own while a publication
    of all tables sends its changes as its root."""
    connector = settings.sources[source_name].connector
    if connector is None or elsewhere(settings, source_name, "partitioned tables"):
        return
    tables = [t.lower() for t in connector.tables]
    (captured,) = fetch(
        settings, "to find partitioned tables before applying", (_CAPTURED, (tables,))
    )
    partitioned = [row[0] for row in captured if row[1] == "p"]
    where = f"sources.{source_name}.connector"
    if partitioned:
        _check_via_root(settings, where, ", ".join(partitioned), config)
    if user_managed(config):
        _check_published(settings, where, {row[0]: row[2] for row in captured}, config)
        return
    partitions = [row[0] for row in captured if row[2]]
    all_tables = config.get("publication.autocreate.mode") == "all_tables"
    if partitions and all_tables and publishes_via_root(config):
        raise UsageError(
            f"{where}: {', '.join(partitions)} is a partition: a publication of all tables "
            "publishing via the root sends its changes as its partitioned table, which the "
            "connector drops (only the snapshot would arrive). Capture the partitioned "
            "table, or set publication.autocreate.mode: filtered"
        )


def _check_via_root(settings: Settings, where: str, names: str, config: Mapping[str, str]) -> None:
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


def _check_published(
    settings: Settings, where: str, captured: Mapping[str, bool], config: Mapping[str, str]
) -> None:
    """A publication the user manages must publish each captured table (name: whether it is
    a partition) as itself: PostgreSQL sends nothing for a table it lacks, and a partition's
    changes as its partitioned table when that is in it too (via the root), which the
    connector drops."""
    publication = configured_publication(config)
    if publication_via_root(settings, publication) is None:
        return  # none yet: the connector fails to start, naming it
    (published,) = fetch(settings, "to read the publication", (_PUBLISHED, (publication,)))
    names = {row[0].lower() for row in published}
    missing = [t for t in captured if t.lower() not in names]
    if not missing:
        return
    tables = ", ".join(missing)
    fix = f"Run ALTER PUBLICATION {publication} ADD TABLE {tables} in PostgreSQL"
    if any(captured[t] for t in missing):
        fix += ", or capture the partitioned table it belongs to"
    raise UsageError(
        f"{where}: publication {publication} does not publish {tables} as itself: the "
        f"connector would receive none of its changes (only the snapshot would arrive). {fix}"
    )
