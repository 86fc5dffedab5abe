"""A CDC source's `connector:` (`conf/base/sources.yml`): the Debezium PostgreSQL connector
`lakehouse connectors` manages, and the checks that it writes what its source reads, encoded
as silver decodes it. `lakehouse.core.specs.SourceSettings` holds one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from lakehouse.core.specs import SourceSettings

# Kafka Connect names, replication slots and `schema.table` names as Debezium takes them.
_CONNECTOR_NAME = re.compile(r"[A-Za-z0-9._-]+")
_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*")
# Debezium's unchanged-TOAST placeholder (its default `unavailable.value.placeholder`): silver
# knows every shape Debezium gives it (`lakehouse.silver.toast`), so no other may be set.
TOAST_PLACEHOLDER = "__debezium_unavailable_value"
# Connector settings the source declares itself (the decoding depends on them).
_SOURCE_OWNED = {
    "decimal.handling.mode": "decimal_handling_mode",
    "time.precision.mode": "time_precision_mode",
}


@dataclass(frozen=True)
class ConnectorSettings:
    """The Debezium PostgreSQL connector that feeds a CDC source, managed by `lakehouse
    connectors apply|status|delete` through Kafka Connect's REST API (`connect.url`). The
    database is `postgres:`'s (host, port, database, user; the password is the worker's
    `${env:POSTGRES_PASSWORD}`) unless `config` says otherwise."""

    # Debezium's `topic.prefix`: the topics are `<topic_prefix>.<schema>.<table>`.
    topic_prefix: str
    # The captured tables, `schema.table`.
    tables: tuple[str, ...]
    # Kafka Connect's name for it (default: the source's name).
    name: str = ""
    # The replication slot (default: `dbz_<name>`); its publication is `<slot>_pub`.
    slot: str = ""
    # The JSON converters' `schemas.enable`, and Debezium's ExtractNewRecordState SMT.
    schemas_enable: bool = False
    unwrap: bool = False
    # More connector settings, passed as they are and winning over the generated ones
    # (`database.hostname: db.internal`, `snapshot.mode: never`, ...). A secret is a
    # `${env:NAME}` reference that the Connect worker resolves, never a value.
    config: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.topic_prefix:
            raise ValueError("'topic_prefix' must be set (Debezium's topic.prefix)")
        bad = [t for t in self.tables if not _TABLE_NAME.fullmatch(t)]
        if not self.tables or bad:
            raise ValueError(f"'tables' must list schema.table names, got {list(self.tables)}")
        if self.name and not _CONNECTOR_NAME.fullmatch(self.name):
            raise ValueError(f"'name' {self.name!r}: use letters, digits, '.', '_' or '-'")
        if self.slot and not _SLOT_NAME.fullmatch(self.slot):
            raise ValueError(f"'slot' {self.slot!r}: use 1-63 of a-z, 0-9 and '_'")
        for key, value in self.config.items():
            if "password" in key.lower() and not value.startswith("${env:"):
                raise ValueError(
                    f"'config.{key}' is a secret: write a ${{env:NAME}} reference the Connect "
                    "worker resolves, never the value"
                )

    @property
    def topics(self) -> list[str]:
        """The topics the connector writes."""
        return [f"{self.topic_prefix}.{t}" for t in self.tables]

    def connect_name(self, source: str) -> str:
        """Its name in Kafka Connect: `name`, else the source's."""
        return self.name or source

    def slot_name(self, source: str) -> str:
        """Its replication slot: `slot`, else one per connector name."""
        return self.slot or default_slot_name(self.connect_name(source))


def default_slot_name(connector: str) -> str:
    """The replication slot a connector gets unless told otherwise: unique per connector."""
    return ("dbz_" + re.sub(r"[^a-z0-9_]", "_", connector.lower()))[:63]


def check_connector(source: SourceSettings, connector: ConnectorSettings) -> None:
    """The connector must write what `source` reads, encoded as it decodes it."""
    if source.kind != "cdc":
        raise ValueError("'connector' belongs to a cdc source (Debezium writes its topics)")
    unread = [
        t
        for t in connector.topics
        if not (t in source.topics or (source.topic_pattern and re.search(source.topic_pattern, t)))
    ]
    if unread:
        raise ValueError(
            f"connector topics {unread} are not read by this source: add them to 'topics' "
            "(or make 'topic_pattern' match them)"
        )
    placeholder = connector.config.get("unavailable.value.placeholder", TOAST_PLACEHOLDER)
    if placeholder != TOAST_PLACEHOLDER:
        raise ValueError(
            f"'connector.config.unavailable.value.placeholder' {placeholder!r}: silver "
            f"resolves only Debezium's default {TOAST_PLACEHOLDER!r} (an unchanged large "
            "value would be stored as another text): remove the key"
        )
    binary = connector.config.get("binary.handling.mode", "bytes")
    if binary not in ("bytes", "base64"):
        raise ValueError(
            f"'connector.config.binary.handling.mode' {binary!r}: silver reads a bytea as "
            "base64 (hex text can be valid base64 of other bytes): remove the key"
        )
    digits = connector.config.get("money.fraction.digits", "2")
    if not digits.isdigit():
        raise ValueError(
            f"'connector.config.money.fraction.digits' {digits!r}: Debezium's scale for a "
            "money column, a whole number (2 by default)"
        )
    _check_column_lists(connector.config)
    for key, own in _SOURCE_OWNED.items():
        if key in connector.config and connector.config[key] != getattr(source, own):
            raise ValueError(
                f"'connector.config.{key}' {connector.config[key]!r} differs from the "
                f"source's '{own}' {getattr(source, own)!r}: set '{own}' on the source (the "
                "connector gets it from there, and silver decodes by it)"
            )


def _check_column_lists(config: Mapping[str, str]) -> None:
    """Debezium's column lists are comma-separated regular expressions; `connectors apply`
    matches them too (`lakehouse.connectors.unsent`), so each must compile, and Debezium
    refuses both lists at once."""
    lists = [k for k in ("column.include.list", "column.exclude.list") if config.get(k, "")]
    if len(lists) == 2:
        raise ValueError(
            "'connector.config.column.include.list' and 'column.exclude.list' are both set: "
            "Debezium takes one of them, keep one"
        )
    for key in lists:
        for pattern in [p.strip() for p in config[key].split(",") if p.strip()]:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"'connector.config.{key}' pattern {pattern!r} is not a regular "
                    f"expression ({exc}): fix it"
                ) from None
