"""Debezium PostgreSQL connectors on a Kafka Connect worker (the dev stack's runs Debezium
3.7.0.Final), for `lakehouse connectors`, the demo and the tests.

`register_postgres_connector` creates or updates one through the REST API (idempotent) and waits
until it and its task run; topics are `<topic_prefix>.<schema>.<table>`. Every connector has a
replication slot of its own (`default_slot_name`) and a publication named after it.
`delete_connector` also drops both, and forgets the connector's source offsets, so repeated test
runs leak none. Offsets left behind anyway (a crashed test, a worker restart) are reset whenever
the replication slot they refer to is gone.

The database password never reaches the REST API: the config says `${env:POSTGRES_PASSWORD}`,
which the worker resolves itself (the dev stack's worker: `lakehouse.devstack.connect`).
Replication slots and publications are looked up and dropped over a psycopg connection to
`postgres:`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lakehouse.connectors import postgres
from lakehouse.connectors.rest import (
    JSON_CONVERTER,
    SEE_LOG,
    check_name,
    connector_url,
    error_message,
    http,
    rest_url,
    running,
    wait_connector_running,
)
from lakehouse.core.connector_specs import default_slot_name
from lakehouse.core.errors import ServiceError
from lakehouse.core.settings import Settings

# The variable the worker's EnvVarConfigProvider reads the database password from.
PASSWORD_ENV = "POSTGRES_PASSWORD"  # noqa: S105 (the variable's name, not a password)
DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
DEBEZIUM_UNWRAP_SMT = "io.debezium.transforms.ExtractNewRecordState"
PUBLISH_VIA_ROOT = "publish.via.partition.root"

_SLOT_RE = re.compile(r"[a-z0-9_]{1,63}")
_PUBLICATION_RE = re.compile(r"[A-Za-z0-9_]{1,63}")


def publication_name(slot: str) -> str:
    return f"{slot[:59]}_pub"


def _check_slot(slot: str) -> str:
    if not _SLOT_RE.fullmatch(slot):
        raise ServiceError(f"slot name {slot!r}: use 1-63 of a-z, 0-9 and '_'")
    return slot


def postgres_connector_config(
    settings: Settings,
    topic_prefix: str,
    tables: Sequence[str],
    *,
    schemas_enable: bool,
    unwrap: bool,
    slot_name: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The Debezium PostgreSQL connector config for `settings.postgres` (the password is a
    `${env:...}` reference that the worker resolves)."""
    pg = settings.postgres
    schemas = "true" if schemas_enable else "false"
    config = {
        "connector.class": DEBEZIUM_POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": pg.host,
        "database.port": str(pg.port),
        "database.user": pg.user,
        "database.password": f"${{env:{PASSWORD_ENV}}}",
        "database.dbname": pg.database,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "slot.name": slot_name,
        "publication.name": publication_name(slot_name),
        "publication.autocreate.mode": "filtered",
        # PostgreSQL publishes a partitioned table's changes as the partition that holds the
        # row, which the include list (the parent) does not name: Debezium dropped every one,
        # only the snapshot arrived (tests/silver/test_cdc_partitioned.py). Via the root they
        # arrive as the parent's; an unpartitioned table is published as before.
        PUBLISH_VIA_ROOT: "true",
        "tombstones.on.delete": "true",
        # Debezium skips truncates by default (`t`); silver applies them.
        "skipped.operations": "none",
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": schemas,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": schemas,
    }
    if unwrap:
        config.update(
            {
                "transforms": "unwrap",
                "transforms.unwrap.type": DEBEZIUM_UNWRAP_SMT,
                "transforms.unwrap.add.fields": "op,lsn,source.ts_ms",
                "transforms.unwrap.delete.tombstone.handling.mode": "rewrite-with-tombstone",
            }
        )
    config.update(extra or {})
    return config


# --------------------------------------------------------------------------------------------
# Register


def register_postgres_connector(
    settings: Settings,
    name: str,
    topic_prefix: str,
    tables: list[str],
    *,
    schemas_enable: bool,
    unwrap: bool,
    slot_name: str | None = None,
    extra: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> None:
    """Create or update (PUT, idempotent) a Debezium PostgreSQL connector and wait until it and
    its task run. Topics are `<topic_prefix>.<schema>.<table>`; `tables` are `schema.table`.
    """
    slot = _check_slot(slot_name or default_slot_name(check_name(name)))
    if not tables:
        raise ServiceError(f"connector {name!r}: give at least one table (schema.table)")
    config = postgres_connector_config(
        settings,
        topic_prefix,
        tables,
        schemas_enable=schemas_enable,
        unwrap=unwrap,
        slot_name=slot,
        extra=extra,
    )
    put_connector(settings, name, config, timeout)


def put_connector(
    settings: Settings, name: str, config: dict[str, str], timeout: float = 120.0
) -> None:
    """Create or update (PUT, idempotent) connector `name` with `config` and wait until it and
    its task run. A connector whose replication slot does not exist yet starts afresh (its
    stale offsets, if any, forgotten: see `_create_afresh`)."""
    base = connector_url(settings, check_name(name))
    _publish_as_configured(settings, config)
    exists, _ = http("GET", base)
    created = (
        exists == 404
        and not _slot_exists(settings, _check_slot(config["slot.name"]))
        and _create_afresh(settings, name, config)
    )
    if not created:
        _expect(http("PUT", f"{base}/config", config, timeout=60.0), (200, 201), name, "config")
    wait_connector_running(settings, name, timeout)


def _publish_as_configured(settings: Settings, config: Mapping[str, str]) -> None:
    """Give the connector's existing publication the `publish.via.partition.root` its config
    says. Debezium sets it only on a publication it creates, and only adds or removes tables
    of one that exists: a publication made before the option was on kept publishing a
    partitioned table's changes as its partitions, and the connector kept dropping them. A
    publication the user manages (`publication.autocreate.mode: disabled` or `no_tables`) is
    left alone."""
    if user_managed(config):
        return
    publication, wanted = configured_publication(config), publishes_via_root(config)
    found = publication_via_root(settings, publication)
    if found is not None and found != wanted:
        if not _PUBLICATION_RE.fullmatch(publication):
            raise ServiceError(f"refusing to alter odd publication name {publication!r}")
        value = "true" if wanted else "false"
        _sql(
            settings,
            f'ALTER PUBLICATION "{publication}" SET (publish_via_partition_root = {value})',
        )


# Debezium's defaults for the publication options, when a config leaves them out.
def configured_publication(config: Mapping[str, str]) -> str:
    return config.get("publication.name", "dbz_publication")


def user_managed(config: Mapping[str, str]) -> bool:
    """Whether the user decides what the publication holds: `disabled` (they create it) or
    `no_tables` (Debezium creates it empty, they add the tables)."""
    return config.get("publication.autocreate.mode", "all_tables") in ("disabled", "no_tables")


def publishes_via_root(config: Mapping[str, str]) -> bool:
    return config.get(PUBLISH_VIA_ROOT, "false").strip().lower() == "true"


def publication_via_root(settings: Settings, publication: str) -> bool | None:
    """Whether the publication publishes via the partition root; None when it does not exist."""
    found = _sql(
        settings, "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (publication,)
    )
    return bool(found[0][0]) if found else None


def connector_state(settings: Settings, name: str) -> str:
    """`RUNNING`, `not registered`, or the connector's and its tasks' states (a failed one's
    error as one line)."""
    status, body = http("GET", f"{connector_url(settings, check_name(name))}/status")
    if status == 404:
        return "not registered"
    if status != 200 or not isinstance(body, dict):
        raise ServiceError(f"GET status of connector {name!r} answered HTTP {status}")
    try:
        if running(name, body):
            return "RUNNING"
    except ServiceError as failed:
        return str(failed)
    tasks = ", ".join(f"task {t.get('id')} {t.get('state')}" for t in body.get("tasks", []))
    return f"{body.get('connector', {}).get('state')} ({tasks or 'no task yet'})"


def _create_afresh(settings: Settings, name: str, config: dict[str, str]) -> bool:
    """Create the connector stopped, forget its offsets, then create it again running; False
    when someone else created it meanwhile (HTTP 409).

    A new slot starts at the current WAL position, so source offsets left in the standalone
    offsets file by an earlier connector of this name (a crashed test, a worker restart:
    REST-created connectors do not survive it) would point at WAL that the slot never had and
    the task would fail. Without them it snapshots and streams afresh.

    Not `PUT .../resume`: a standalone worker (Kafka 4.3.1) takes its config store's lock and
    then the herder's to resume, while the task update a previous resume scheduled takes them
    the other way round, so two connectors started close together could deadlock the worker
    (seen: every REST call then hung). Deleting and creating take them in one order.
    """
    status, body = http(
        "POST",
        f"{rest_url(settings)}/connectors",
        {"name": name, "config": config, "initial_state": "STOPPED"},
        timeout=60.0,
    )
    if status == 409:
        return False
    _expect((status, body), (200, 201), name, "create")
    base = connector_url(settings, name)
    _expect(http("DELETE", f"{base}/offsets", timeout=60.0), (200,), name, "offsets")
    _expect(http("DELETE", base, timeout=60.0), (200, 204), name, "delete stopped")
    status, body = http(
        "POST", f"{rest_url(settings)}/connectors", {"name": name, "config": config}, timeout=60.0
    )
    if status == 409:
        return False
    _expect((status, body), (200, 201), name, "create")
    return True


def _expect(response: tuple[int, Any], ok: Sequence[int], name: str, step: str) -> None:
    status, body = response
    if status not in ok:
        raise ServiceError(
            f"Kafka Connect rejected connector {name!r} ({step}, HTTP {status}): "
            f"{error_message(body)}"
        )


def _sql(
    settings: Settings, statement: str, params: Sequence[object] = ()
) -> list[tuple[Any, ...]]:
    """Run one statement on `postgres:` (autocommit); its rows, if it returns any."""
    with postgres.connect(settings) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def _slot_exists(settings: Settings, slot: str) -> bool:
    found = _sql(
        settings,
        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
        (_check_slot(slot),),
    )
    return bool(found and found[0][0])


# --------------------------------------------------------------------------------------------
# Delete


def delete_connector(
    settings: Settings,
    name: str,
    *,
    drop_slot: bool = True,
    slot_name: str | None = None,
    timeout: float = 60.0,
) -> None:
    """Delete connector `name` (no-op if absent), forget its source offsets, and drop its
    replication slot and publication in PostgreSQL so repeated runs leak nothing."""
    base = connector_url(settings, name)
    status, config = http("GET", f"{base}/config")
    slot = slot_name or default_slot_name(name)
    publication = publication_name(slot)
    if status == 200 and isinstance(config, dict):
        slot = slot_name or str(config.get("slot.name", slot))
        publication = str(config.get("publication.name", publication_name(slot)))
        _stop_and_delete(base, name, timeout)
    elif status != 404:
        raise ServiceError(f"GET {base}/config answered HTTP {status}")
    if drop_slot:
        _drop_slot(settings, slot, publication, timeout)


def _stop_and_delete(base: str, name: str, timeout: float) -> None:
    """Stop first so the offsets can be reset: a connector of the same name registered later
    then starts afresh (its slot is dropped too) instead of resuming at a dead LSN."""
    http("PUT", f"{base}/stop")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body = http("GET", f"{base}/status")
        if code != 200 or (
            isinstance(body, dict) and body.get("connector", {}).get("state") == "STOPPED"
        ):
            break
        time.sleep(0.3)
    http("DELETE", f"{base}/offsets", timeout=60.0)
    code, body = http("DELETE", base, timeout=60.0)
    if code not in (200, 204, 404):
        raise ServiceError(
            f"deleting connector {name!r} failed (HTTP {code}): {error_message(body)}"
        )


def _drop_slot(settings: Settings, slot: str, publication: str, timeout: float) -> None:
    if not _SLOT_RE.fullmatch(slot) or not _PUBLICATION_RE.fullmatch(publication):
        raise ServiceError(f"refusing to drop odd slot/publication names {slot!r}/{publication!r}")
    _sql(settings, f'DROP PUBLICATION IF EXISTS "{publication}"')
    deadline = time.monotonic() + timeout
    while True:
        # The walsender may need a moment to let go of the slot after the task stopped.
        _sql(
            settings,
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s AND NOT active",
            (slot,),
        )
        if not _slot_exists(settings, slot):
            return
        if time.monotonic() > deadline:
            raise ServiceError(
                f"replication slot {slot!r} is still in use {timeout:.0f}s after deleting its "
                f"connector; {SEE_LOG}"
            )
        time.sleep(0.5)
