"""`lakehouse connectors apply|status|delete [SOURCE ...]`: the Debezium connectors that CDC
sources declare (`connector:` in conf/base/sources.yml), managed through Kafka Connect's REST
API (`connect.url`).

`apply` creates or updates each one (idempotent: the same configuration again changes
nothing) and waits until it and its task run; `status` shows each one's state; `delete`
removes it and its offsets, and with `--drop-slot` its replication slot and publication (the
slot holds WAL until it is dropped; keep it to resume where the connector stopped)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse.cli.common import Command
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings

if TYPE_CHECKING:
    from lakehouse.core.specs import SourceSettings


def declared(settings: Settings, names: Sequence[str]) -> dict[str, SourceSettings]:
    """The sources named (all that declare a connector when none is), each with a connector."""
    with_connector = {n: s for n, s in sorted(settings.sources.items()) if s.connector}
    if not names:
        if not with_connector:
            raise UsageError(
                "no source declares a `connector:` (see conf/base/sources.yml); nothing to manage"
            )
        return with_connector
    unknown = [n for n in names if n not in with_connector]
    if unknown:
        raise UsageError(
            f"source(s) {', '.join(unknown)} declare no connector; those that do: "
            f"{', '.join(with_connector) or 'none'}"
        )
    return {n: with_connector[n] for n in names}


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("apply", "status", "delete"))
    parser.add_argument(
        "sources", nargs="*", help="source names (default: every one declaring one)"
    )
    parser.add_argument(
        "--drop-slot",
        action="store_true",
        help="delete: also drop the replication slot and publication",
    )


def connectors(settings: Settings, args: argparse.Namespace) -> None:
    from lakehouse.connectors.debezium import connector_state, delete_connector
    from lakehouse.connectors.sources import apply_source, connector_config, connector_name

    for source_name, source in declared(settings, args.sources).items():
        assert source.connector is not None
        name = connector_name(source_name, source.connector)
        if args.action == "apply":
            apply_source(settings, source_name)
            print(
                f"{source_name}: connector {name} running -> {', '.join(source.connector.topics)}"
            )
        elif args.action == "status":
            print(f"{source_name}: connector {name} {connector_state(settings, name)}")
        else:
            _, config = connector_config(settings, source_name, source)
            slot = config["slot.name"]
            delete_connector(settings, name, drop_slot=args.drop_slot, slot_name=slot)
            kept = "dropped" if args.drop_slot else "kept"
            print(f"{source_name}: connector {name} deleted (slot {slot} {kept})")


COMMANDS = {
    "connectors": Command(
        "apply, show or delete the Debezium connectors sources declare", connectors, _arguments
    ),
}
