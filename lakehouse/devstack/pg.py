"""PostgreSQL from the client side, as `settings.postgres` describes it: a psycopg connection
(the demo's and the tests' way into the CDC source) and `psql` over TCP.

The password is the secret `postgres.password`: resolved only where a connection is made, handed
to psycopg or to psql's environment (`PGPASSWORD`), never put on a command line or printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from lakehouse.core.errors import one_line
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.devstack import ServiceError
from lakehouse.devstack.packages import postgres_bindir

if TYPE_CHECKING:
    import psycopg


def password(settings: Settings) -> str:
    """The value of `postgres.password`; a `ServiceError` naming the fix when it is not set."""
    try:
        return settings.postgres.require_password()
    except SettingsError as error:
        raise ServiceError(str(error)) from None


def connect(settings: Settings) -> psycopg.Connection[Any]:
    """The library's connection (`lakehouse.connectors.postgres`); a missing password is a
    `ServiceError` here, as for every dev stack command."""
    from lakehouse.connectors import postgres

    password(settings)
    return postgres.connect(settings)


def psql_argv(
    binary: str, host: str, port: int, user: str, database: str, *options: str
) -> list[str]:
    """`psql` reading SQL from stdin, stopping at the first error, without any `~/.psqlrc`."""
    return [
        binary,
        "-X",
        "-q",
        *options,
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        host,
        "-p",
        str(port),
        "-U",
        user,
        "-d",
        database,
        "-f",
        "-",
    ]


def psql_error(result: subprocess.CompletedProcess[str]) -> str:
    """The last line psql wrote to stderr, as one line."""
    return one_line((result.stderr.strip().splitlines() or ["psql failed"])[-1])


def _psql_binary() -> str:
    bindir = postgres_bindir()
    if bindir is not None and (bindir / "psql").is_file():
        return str(bindir / "psql")
    found = shutil.which("psql")
    if found is None:
        raise ServiceError("psql not found: apt-get install -y postgresql-client")
    return found


def psql(settings: Settings, sql: str, *, timeout: float = 60.0) -> str:
    """Run SQL as the configured user over TCP (password via the environment, never argv);
    return the unaligned, tuples-only output."""
    pg = settings.postgres
    env = {**os.environ, "PGPASSWORD": password(settings), "PGCONNECT_TIMEOUT": "5"}
    cmd = psql_argv(_psql_binary(), pg.host, pg.port, pg.user, pg.database, "-A", "-t")
    result = subprocess.run(
        cmd, input=sql, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise ServiceError(f"PostgreSQL at {pg.host}:{pg.port}: {psql_error(result)}")
    return result.stdout
