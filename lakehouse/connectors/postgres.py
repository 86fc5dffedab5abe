"""A psycopg connection to the database `postgres:` describes: the one way into the CDC source
for the connectors' slot and publication work, the dev stack, the demo and the tests.

The password is the secret `postgres.password`, resolved only here, where the connection is
made; never a default, never printed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from lakehouse.core.settings import Settings


def connect(settings: Settings) -> psycopg.Connection[Any]:
    """An autocommit connection to the configured database (a `SettingsError` naming the fix
    when the password is not set)."""
    import psycopg

    pg = settings.postgres
    return psycopg.connect(
        host=pg.host,
        port=pg.port,
        dbname=pg.database,
        user=pg.user,
        password=pg.require_password(),
        autocommit=True,
    )
