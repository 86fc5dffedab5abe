"""The local PostgreSQL server: Debian's PostgreSQL (`apt-get install postgresql` when missing)
running our own cluster, never the system one, as `settings.postgres` describes it.

The cluster listens on `postgres.host`:`postgres.port` (127.0.0.1:15432 by default) with
`wal_level=logical`; `start_postgres` makes sure the role `postgres.user` (LOGIN REPLICATION)
exists with the configured password, owns the database `postgres.database`, and that the sample
table `public.customers` is there. PostgreSQL receives only a SCRAM verifier computed here, never
the password itself.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` OS user
(`runuser -u postgres`); as any other user it belongs to that user. The `postgres` user must be
able to traverse every parent of `.lakehouse/`; when it cannot (e.g. a checkout under a 0700
home directory) the cluster is put in `/var/tmp/lakehouse-<sha256(root)[:12]>/postgres/` instead
(its log then sits there too, as `postgres.log`). `postgres_status()` shows the data directory
in use.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lakehouse.core.settings import Settings
from lakehouse.devstack import ServiceError
from lakehouse.devstack.packages import ensure_postgres_package, postgres_bindir
from lakehouse.devstack.pg import password, psql_argv, psql_error
from lakehouse.devstack.processes import (
    STOP_TIMEOUT,
    StatePaths,
    children,
    failure,
    is_root,
    lock,
    pid_alive,
    port_open,
    read_pid,
    require_free,
    state_paths,
    terminate,
    wait_gone,
)

_START_TIMEOUT = 60.0
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_CUSTOMERS_DDL = """
CREATE TABLE IF NOT EXISTS public.customers (
    customer_id int PRIMARY KEY,
    name        text NOT NULL,
    email       text,
    country     text,
    updated_at  timestamptz DEFAULT now()
);
"""


# --------------------------------------------------------------------------------------------
# Where the cluster lives, and as whom it runs


@dataclass(frozen=True)
class _Layout:
    bindir: Path
    base: Path
    log: Path
    socket_dir: Path
    os_user: str

    @property
    def data(self) -> Path:
        return self.base / "data"


def _os_user() -> str:
    if is_root():
        return "postgres"
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _as_pg(cmd: Sequence[str]) -> list[str]:
    """As the cluster's owner: `runuser -u postgres` when we are root (Postgres refuses root)."""
    if is_root():
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


def _traversable_by_postgres(path: Path) -> bool:
    if not is_root():
        return True
    result = subprocess.run(
        _as_pg(["test", "-x", str(path)]),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _layout(paths: StatePaths, bindir: Path) -> _Layout:
    digest = hashlib.sha256(str(paths.root).encode()).hexdigest()[:12]
    preferred = paths.state / "postgres"
    # Deterministic per checkout and owned by the service user, not a racy temp file.
    fallback = Path("/var/tmp") / f"lakehouse-{digest}" / "postgres"  # noqa: S108
    if (preferred / "data" / "PG_VERSION").exists():
        base = preferred
    elif (fallback / "data" / "PG_VERSION").exists() or not _traversable_by_postgres(paths.state):
        base = fallback
    else:
        base = preferred
    log = paths.log("postgres") if base == preferred else base / "postgres.log"
    socket_dir = base / "run"
    if len(str(socket_dir)) > 80:  # unix socket paths are limited to ~107 bytes
        socket_dir = Path("/tmp") / f"lakehouse-pg-{digest}"  # noqa: S108 (mode 0700)
    return _Layout(bindir, base, log, socket_dir, _os_user())


def _prepare_dirs(layout: _Layout) -> None:
    for directory in (layout.base, layout.socket_dir):
        if not directory.parent.exists():
            # Created here, so the postgres user must be able to traverse it whatever the
            # caller's umask is (a 0077 umask would lock the service out of its own data).
            directory.parent.mkdir(parents=True, exist_ok=True)
            directory.parent.chmod(0o755)
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
    layout.log.parent.mkdir(parents=True, exist_ok=True)
    layout.log.touch(exist_ok=True)
    if is_root():
        for path in (layout.base, layout.socket_dir, layout.log):
            shutil.chown(path, "postgres", "postgres")
        if layout.data.exists():
            shutil.chown(layout.data, "postgres", "postgres")


# --------------------------------------------------------------------------------------------
# Commands as the cluster's owner


def _run(
    layout: _Layout,
    cmd: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float = 120,
    new_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _as_pg(cmd),
        input=input_text,
        capture_output=True,
        text=True,
        cwd=layout.base,
        stdin=None if input_text is not None else subprocess.DEVNULL,
        start_new_session=new_session,
        timeout=timeout,
        check=False,
    )


def _pg_ctl(
    layout: _Layout, action: str, *args: str, wait: float | None = None, new_session: bool = False
) -> subprocess.CompletedProcess[str]:
    """`pg_ctl <action> -D <data> <args>`, waiting up to `wait` seconds when given."""
    cmd = [str(layout.bindir / "pg_ctl"), action, "-D", str(layout.data), *args]
    if wait is not None:
        cmd += ["-w", "-t", str(int(wait))]
    return _run(layout, cmd, timeout=(wait or 90) + 30, new_session=new_session)


def _running(layout: _Layout) -> int | None:
    """The postmaster's pid when our cluster runs."""
    if not (layout.data / "PG_VERSION").exists():
        return None
    if _pg_ctl(layout, "status").returncode != 0:
        return None
    pid = read_pid(layout.data / "postmaster.pid")
    return pid if pid is not None and pid_alive(pid) else None


def _initdb(layout: _Layout, paths: StatePaths) -> None:
    shutil.rmtree(layout.data, ignore_errors=True)
    initdb = str(layout.bindir / "initdb")
    auth = ("--auth-local=peer", "--auth-host=scram-sha-256")
    encoding = ("-E", "UTF8", "--locale=C", "--no-instructions")
    result = _run(layout, [initdb, "-D", str(layout.data), "-U", layout.os_user, *auth, *encoding])
    if result.returncode != 0:
        with layout.log.open("a") as out:
            out.write(result.stdout + result.stderr)
        raise failure("PostgreSQL initdb failed", paths, layout.log)


# --------------------------------------------------------------------------------------------
# Configuration and bootstrap


def _hba_address(host: str) -> str:
    """`host` as a pg_hba.conf address: one IP as a /32 (or /128), a host name as it is."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    return f"{ip}/{ip.max_prefixlen}"


def _write_config(layout: _Layout, settings: Settings) -> None:
    pg = settings.postgres
    conf = {
        "listen_addresses": f"'{pg.host}'",
        "port": str(pg.port),
        "unix_socket_directories": f"'{layout.socket_dir}'",
        "unix_socket_permissions": "0700",
        "wal_level": "logical",
        "max_replication_slots": "10",
        "max_wal_senders": "10",
        "max_connections": "50",
        "shared_buffers": "64MB",
        "password_encryption": "'scram-sha-256'",
        "logging_collector": "off",
        "log_line_prefix": "'%m [%p] %q%u@%d '",
        "fsync": "on",
    }
    lakehouse_conf = layout.data / "lakehouse.conf"
    lakehouse_conf.write_text(
        "# Written by lakehouse.devstack.postgres on every start; edit there, not here.\n"
        + "".join(f"{key} = {value}\n" for key, value in conf.items())
    )
    address = _hba_address(pg.host)
    hba = layout.data / "pg_hba.conf"
    hba.write_text(
        "# Written by lakehouse.devstack.postgres on every start.\n"
        "# TYPE  DATABASE     USER  ADDRESS       METHOD\n"
        "local   all          all                 peer\n"
        "local   replication  all                 peer\n"
        f"host    all          all   {address}  scram-sha-256\n"
        f"host    replication  all   {address}  scram-sha-256\n"
    )
    main_conf = layout.data / "postgresql.conf"
    include = "include_if_exists = 'lakehouse.conf'"
    text = main_conf.read_text()
    if include not in text:
        main_conf.write_text(text.rstrip("\n") + f"\n\n{include}\n")
    if is_root():
        for path in (lakehouse_conf, hba, main_conf):
            shutil.chown(path, "postgres", "postgres")
            path.chmod(0o600)


def _scram_verifier(secret: str) -> str:
    """A SCRAM-SHA-256 verifier (as PostgreSQL stores it), so the plain password never leaves."""
    salt = secrets.token_bytes(16)
    iterations = 4096
    salted = hashlib.pbkdf2_hmac("sha256", secret.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _names(settings: Settings) -> tuple[str, str]:
    """`postgres.user` and `postgres.database`, checked before they go into SQL."""
    pg = settings.postgres
    for key, value in (("postgres.user", pg.user), ("postgres.database", pg.database)):
        if not _IDENTIFIER.fullmatch(value):
            raise ServiceError(
                f"{key} {value!r}: the local PostgreSQL creates it, so use 1-63 lower-case "
                "letters, digits and '_' (not starting with a digit)"
            )
    return pg.user, pg.database


def _admin_sql(
    layout: _Layout, port: int, sql: str, database: str, paths: StatePaths, what: str
) -> None:
    """SQL as the cluster's superuser over the unix socket (peer authentication)."""
    psql = str(layout.bindir / "psql")
    cmd = psql_argv(psql, str(layout.socket_dir), port, layout.os_user, database)
    result = _run(layout, cmd, input_text="SET client_min_messages = warning;\n" + sql)
    if result.returncode != 0:
        raise ServiceError(
            f"PostgreSQL: {what} failed: {psql_error(result)}; see {paths.show(layout.log)}"
        )


def _bootstrap(layout: _Layout, settings: Settings, secret: str, paths: StatePaths) -> None:
    """The role (LOGIN REPLICATION, the configured password), its database, the sample table."""
    user, database = _names(settings)
    port = settings.postgres.port
    _admin_sql(
        layout,
        port,
        f"SELECT 'CREATE ROLE {user}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_roles WHERE rolname = '{user}')\\gexec\n"
        f"ALTER ROLE {user} WITH LOGIN REPLICATION PASSWORD '{_scram_verifier(secret)}';\n"
        f"SELECT 'CREATE DATABASE {database} OWNER {user}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_database WHERE datname = '{database}')\\gexec\n",
        "postgres",
        paths,
        f"creating role and database {database!r}",
    )
    _admin_sql(
        layout,
        port,
        f"SET ROLE {user};\n{_CUSTOMERS_DDL}",
        database,
        paths,
        "creating table public.customers",
    )


# --------------------------------------------------------------------------------------------
# Start, stop, status


def _wait_listening(layout: _Layout, settings: Settings, paths: StatePaths, timeout: float) -> None:
    host, port = settings.postgres.host, settings.postgres.port
    deadline = time.monotonic() + timeout
    while not port_open(host, port):
        if time.monotonic() > deadline:
            raise failure(
                f"PostgreSQL runs but does not listen on {host}:{port}", paths, layout.log
            )
        time.sleep(0.3)


def start_postgres(settings: Settings, *, timeout: float = _START_TIMEOUT) -> None:
    """Start our own PostgreSQL cluster (initdb on first use) and ensure role, database, table."""
    secret = password(settings)
    _names(settings)  # a bad name fails before anything starts
    paths = state_paths()
    bindir = ensure_postgres_package(paths)
    with lock(paths, "postgres"):
        layout = _layout(paths, bindir)
        _prepare_dirs(layout)
        if not (layout.data / "PG_VERSION").exists():
            _initdb(layout, paths)
        _write_config(layout, settings)
        if _running(layout) is None:
            require_free(
                "PostgreSQL", settings.postgres.host, settings.postgres.port, "postgres.port"
            )
            started = _pg_ctl(
                layout, "start", "-l", str(layout.log), wait=timeout, new_session=True
            )
            if started.returncode != 0:
                raise failure("PostgreSQL did not start", paths, layout.log)
        _wait_listening(layout, settings, paths, timeout)
        _bootstrap(layout, settings, secret, paths)


def stop_postgres(settings: Settings) -> None:
    """`pg_ctl stop -m fast`; the postmaster's process group is killed if it lingers."""
    bindir = postgres_bindir()
    if bindir is None:
        return
    paths = state_paths()
    with lock(paths, "postgres"):
        layout = _layout(paths, bindir)
        pid = _running(layout)
        if pid is None:
            return
        backends = children(pid)
        result = _pg_ctl(layout, "stop", "-m", "fast", wait=STOP_TIMEOUT)
        if result.returncode != 0 or wait_gone([pid], 10.0):
            terminate([pid], "PostgreSQL", timeout=5.0)
        # Backends notice the postmaster's death and exit; make sure none lingers.
        terminate(wait_gone(backends, 5.0), "PostgreSQL backends", timeout=5.0)


def postgres_status(settings: Settings) -> str:
    """`running (pid N, host:port, data <dir>)`, `stopped` or `stopped (not installed)`."""
    bindir = postgres_bindir()
    if bindir is None:
        return "stopped (not installed)"
    paths = state_paths()
    layout = _layout(paths, bindir)
    pid = _running(layout)
    if pid is None:
        return "stopped"
    pg = settings.postgres
    return f"running (pid {pid}, {pg.host}:{pg.port}, data {paths.show(layout.data)})"
