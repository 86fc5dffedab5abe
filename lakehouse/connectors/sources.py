"""The connectors CDC sources declare (`connector:` on a source, `ConnectorSettings`): their
Kafka Connect name and configuration, and applying them (create or update, idempotent)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.connectors.debezium import postgres_connector_config, put_connector
from lakehouse.connectors.publication import check_publication
from lakehouse.connectors.scales import check_decimal_scales
from lakehouse.connectors.units import check_time_units
from lakehouse.connectors.unsent import check_unsent
from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from lakehouse.core.connector_specs import ConnectorSettings
    from lakehouse.core.specs import SourceSettings


def connector_name(source_name: str, connector: ConnectorSettings) -> str:
    return connector.connect_name(source_name)


def connector_config(
    settings: Settings, source_name: str, source: SourceSettings
) -> tuple[str, dict[str, str]]:
    """(Kafka Connect name, configuration) of the source's connector: `postgres:`'s database
    in Debezium's PostgreSQL connector (`postgres_connector_config`), the source's decoding
    modes, then the connector's own `config`, which wins."""
    connector = source.connector
    assert connector is not None
    name = connector_name(source_name, connector)
    config = postgres_connector_config(
        settings,
        connector.topic_prefix,
        connector.tables,
        schemas_enable=connector.schemas_enable,
        unwrap=connector.unwrap,
        slot_name=connector.slot_name(source_name),
        extra={
            "decimal.handling.mode": source.decimal_handling_mode,
            "time.precision.mode": source.time_precision_mode,
            **connector.config,
        },
    )
    return name, config


def apply_source(settings: Settings, source_name: str) -> str:
    """Create or update the connector of `source_name` and wait until it runs; its name."""
    name, config = connector_config(settings, source_name, settings.sources[source_name])
    check_decimal_scales(settings, source_name)  # before a row streams
    check_time_units(settings, source_name)
    check_unsent(settings, source_name)
    check_publication(settings, source_name, config)
    put_connector(settings, name, config)
    return name
