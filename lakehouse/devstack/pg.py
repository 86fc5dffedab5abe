"""A PostgreSQL connection from the settings (the demo's and the tests' way into the CDC source)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from lakehouse.core.settings import Settings


def connect(settings: Settings) -> psycopg.Connection[Any]:
    """An autocommit connection to the configured database; the password is the `.env`
    secret, never a default."""
    import psycopg

    pg = settings.postgres
    return psycopg.connect(
        host=pg.host,
        port=pg.port,
        dbname=pg.database,
        user=pg.user,
        password=pg.password.get(),
        autocommit=True,
    )
