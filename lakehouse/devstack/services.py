"""The real local services, installed and started by the project itself (stdlib only).

* **Kafka** 4.3.1: a single-node KRaft broker+controller on 127.0.0.1
  (`LAKEHOUSE_KAFKA_PORT`, default 19092; controller `LAKEHOUSE_KAFKA_CONTROLLER_PORT`, 19093).
* **PostgreSQL** from Debian (`apt-get install postgresql` when missing): our own cluster, never
  the system one, on 127.0.0.1 (`LAKEHOUSE_PG_PORT`, default 15432) with `wal_level=logical`,
  role and database `lakehouse` and the sample table `public.customers`.
* **Kafka Connect** 4.3.1 standalone worker with the Debezium 3.7.0.Final PostgreSQL connector
  as an isolated plugin, REST on 127.0.0.1 (`LAKEHOUSE_CONNECT_PORT`, default 18083).

Everything lives in the gitignored state directory `<root>/.lakehouse/`::

    jars/kafka/          broker + Kafka CLI tools   (services/maven/kafka/pom.xml)
    jars/connect/        Connect worker runtime     (services/maven/connect/pom.xml)
    connect-plugins/debezium-postgres/  connector   (services/maven/debezium-postgres/pom.xml)
    conf/                generated server.properties, worker.properties, log4j2.properties
    kafka/               cluster.id and data/ (formatted once)
    connect/             standalone offsets file
    postgres/            data/ and run/ (unix socket), owned by the `postgres` OS user
    logs/                kafka.log, connect.log, postgres.log, maven-*.log, apt.log
    run/                 pid files and lock files

Jars are resolved once with `mvn -q dependency:copy-dependencies` (Maven's own cache is the
usual `~/.m2`); a marker file holding the POM's hash makes every later run skip Maven, so a warm
machine starts offline.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` OS user
(`runuser -u postgres`); as any other user it belongs to that user. The `postgres` user must be
able to traverse every parent of `.lakehouse/`; when it cannot (e.g. a checkout under a 0700
home directory) the cluster is put in `/var/tmp/lakehouse-<sha256(root)[:12]>/postgres/` instead
(its log then sits there too, as `postgres.log`). `status()` shows the data directory in use.

The password of the `lakehouse` role is the secret `POSTGRES_PASSWORD`, taken from the
environment or else from `<root>/.env`; it has no default and is never printed or put on a
command line. PostgreSQL receives only a SCRAM verifier computed here, and Kafka Connect reads the
variable itself through its `EnvVarConfigProvider` (connector configs say
`${env:POSTGRES_PASSWORD}`), so the REST API never sees it either.

Connect runs standalone: connectors are created, updated and deleted through its REST API
(`register_postgres_connector`, `delete_connector`) and do not survive a worker restart (register
them again; their source offsets do survive, in `connect/offsets.dat`, and are reset whenever the
replication slot they refer to is gone). `delete_connector` also drops the connector's slot and
publication so repeated test runs leak none.

Every failure raises `ServiceError` with one line naming what failed and where its log is.
Manual use:
``python -m lakehouse.services {install,start,stop,status} [kafka|postgres|connect|all]``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KAFKA_VERSION = "4.3.1"
DEBEZIUM_VERSION = "3.7.0.Final"

STATE_DIR_NAME = ".lakehouse"
HOST = "127.0.0.1"
PASSWORD_ENV = "POSTGRES_PASSWORD"  # noqa: S105 (the variable's name, not a password)
KAFKA_PORT_ENV = "LAKEHOUSE_KAFKA_PORT"
KAFKA_CONTROLLER_PORT_ENV = "LAKEHOUSE_KAFKA_CONTROLLER_PORT"
PG_PORT_ENV = "LAKEHOUSE_PG_PORT"
CONNECT_PORT_ENV = "LAKEHOUSE_CONNECT_PORT"
DEFAULT_KAFKA_PORT = 19092
DEFAULT_KAFKA_CONTROLLER_PORT = 19093
DEFAULT_PG_PORT = 15432
DEFAULT_CONNECT_PORT = 18083
PG_DATABASE = "lakehouse"
PG_USER = "lakehouse"
JVM_HEAP = "-Xmx512m"

KAFKA_MAIN = "kafka.Kafka"
KAFKA_STORAGE_TOOL = "kafka.tools.StorageTool"
CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
DEBEZIUM_POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
DEBEZIUM_UNWRAP_SMT = "io.debezium.transforms.ExtractNewRecordState"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
ENV_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"

SERVICES = ("kafka", "postgres", "connect")

_KAFKA_START_TIMEOUT = 120.0
_CONNECT_START_TIMEOUT = 240.0
_PG_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0
_MARKER = ".lakehouse-resolved"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SLOT_RE = re.compile(r"[a-z0-9_]{1,63}")


class ServiceError(RuntimeError):
    """A local service could not be installed, started, stopped or used (one clear line)."""


# --------------------------------------------------------------------------------------------
# Endpoints and environment


def _dotenv(root: Path | None) -> dict[str, str]:
    """`KEY=VALUE` lines of `<root>/.env` (comments, `export` and simple quotes handled)."""
    if root is None:
        return {}
    path = root / ".env"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def _env(name: str, root: Path | None) -> str | None:
    """The environment wins over `<root>/.env`; empty counts as unset."""
    value = os.environ.get(name)
    if not value:
        value = _dotenv(root).get(name)
    return value or None


def _env_port(name: str, default: int, root: Path | None) -> int:
    raw = _env(name, root)
    if raw is None:
        return default
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise ServiceError(f"{name}={raw!r} is not a TCP port (1-65535); fix it or unset it")
    return port


@dataclass(frozen=True)
class ServiceEndpoints:
    """Where the local services listen; `from_env()` applies the `LAKEHOUSE_*_PORT` variables.

    The password is kept out of `repr()`/`str()`; `require_password()` raises a clear error when
    it is not configured.
    """

    host: str = HOST
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    connect_port: int = DEFAULT_CONNECT_PORT
    pg_port: int = DEFAULT_PG_PORT
    pg_database: str = PG_DATABASE
    pg_user: str = PG_USER
    pg_password: str | None = field(default=None, repr=False, compare=False)

    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def connect_url(self) -> str:
        return f"http://{self.host}:{self.connect_port}"

    @property
    def pg_host(self) -> str:
        return self.host

    def require_password(self) -> str:
        if not self.pg_password:
            raise ServiceError(
                f"{PASSWORD_ENV} is not set: export it or put {PASSWORD_ENV}=... in .env "
                "(see .env.example); it is the password of the PostgreSQL role 'lakehouse'"
            )
        return self.pg_password

    @classmethod
    def from_env(cls, root: Path | str | None = None) -> ServiceEndpoints:
        """Endpoints from the environment, then `<root>/.env` (root defaults to `$LAKEHOUSE_HOME`
        or this checkout), then the defaults."""
        base = Path(root).resolve() if root is not None else _default_root()
        return cls(
            kafka_port=_env_port(KAFKA_PORT_ENV, DEFAULT_KAFKA_PORT, base),
            kafka_controller_port=_env_port(
                KAFKA_CONTROLLER_PORT_ENV, DEFAULT_KAFKA_CONTROLLER_PORT, base
            ),
            connect_port=_env_port(CONNECT_PORT_ENV, DEFAULT_CONNECT_PORT, base),
            pg_port=_env_port(PG_PORT_ENV, DEFAULT_PG_PORT, base),
            pg_password=_env(PASSWORD_ENV, base),
        )


# --------------------------------------------------------------------------------------------
# Layout of the state directory


@dataclass(frozen=True)
class _Paths:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR_NAME

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def run(self) -> Path:
        return self.state / "run"

    @property
    def conf(self) -> Path:
        return self.state / "conf"

    @property
    def kafka_jars(self) -> Path:
        return self.state / "jars" / "kafka"

    @property
    def connect_jars(self) -> Path:
        return self.state / "jars" / "connect"

    @property
    def plugins(self) -> Path:
        return self.state / "connect-plugins"

    @property
    def debezium_plugin(self) -> Path:
        return self.plugins / "debezium-postgres"

    @property
    def kafka_dir(self) -> Path:
        return self.state / "kafka"

    @property
    def connect_dir(self) -> Path:
        return self.state / "connect"

    def log(self, service: str) -> Path:
        return self.logs / f"{service}.log"

    def pidfile(self, service: str) -> Path:
        return self.run / f"{service}.pid"

    def show(self, path: Path) -> str:
        """A path as the user should read it: relative to the project root when inside it."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def _paths(root: Path | str) -> _Paths:
    paths = _Paths(Path(root).resolve())
    for directory in (paths.state, paths.logs, paths.run, paths.conf):
        directory.mkdir(parents=True, exist_ok=True)
    return paths


@contextlib.contextmanager
def _lock(paths: _Paths, name: str) -> Iterator[None]:
    """Serialise start/stop/install of one thing across processes (pytest-xdist, two shells)."""
    with (paths.run / f"{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------
# Small helpers: commands, apt, processes, ports


def _is_root() -> bool:
    return os.geteuid() == 0


def _last_error_line(log: Path) -> str:
    """The last ERROR/FATAL/exception line of a log, shortened, for one-line error messages."""
    try:
        with log.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64_000))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    pattern = re.compile(r"\b(ERROR|FATAL|PANIC|Exception|Error:)")
    for line in reversed(lines):
        if pattern.search(line):
            line = line.strip()
            return f" (last error: {line[:300]})"
    return ""


def _one_line(message: object, limit: int = 400) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure(what: str, paths: _Paths, log: Path) -> ServiceError:
    return ServiceError(f"{what}; see {paths.show(log)}{_last_error_line(log)}")


def _apt_install(packages: Sequence[str], paths: _Paths) -> None:
    log = paths.log("apt")
    prefix: list[str] = []
    if not _is_root():
        if shutil.which("sudo") is None:
            raise ServiceError(
                f"need Debian packages {' '.join(packages)} but not root and no sudo: "
                f"run `apt-get install -y {' '.join(packages)}` as root"
            )
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log.open("a") as out:
        for cmd in (
            [*prefix, "apt-get", "update", "-q"],
            [*prefix, "apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        ):
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            result = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                check=False,
            )
            if result.returncode != 0:
                raise _failure(f"`{' '.join(cmd)}` failed", paths, log)


def _require_command(name: str, apt_package: str, paths: _Paths) -> str:
    found = shutil.which(name)
    if found is None:
        _apt_install([apt_package], paths)
        found = shutil.which(name)
    if found is None:
        raise ServiceError(f"`{name}` not found even after installing {apt_package}")
    return found


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ServiceError("`java` (17+) not found: apt-get install -y default-jre-headless")
    return found


def _proc_stat_state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


def _pid_alive(pid: int) -> bool:
    if Path("/proc").is_dir():
        state = _proc_stat_state(pid)
        if state is None:
            return False
        if state in ("Z", "X"):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            return False
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _markers(service: str, paths: _Paths) -> tuple[str, str]:
    return f"-Dlakehouse.service={service}", f"-Dlakehouse.state={paths.state}"


def _is_ours(pid: int, service: str, paths: _Paths) -> bool:
    if not Path("/proc").is_dir():
        return True
    args = _cmdline(pid)
    return all(marker in args for marker in _markers(service, paths))


def _find_ours(service: str, paths: _Paths) -> list[int]:
    """Our JVMs of `service` for this state directory, found by their -D markers."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            if pid != os.getpid() and _is_ours(pid, service, paths) and _pid_alive(pid):
                found.append(pid)
    return sorted(found)


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (PostgreSQL backends run in sessions of their own)."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
                if int(fields[1]) == pid:
                    found.append(int(entry.name))
    return found


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _running_pid(service: str, paths: _Paths) -> int | None:
    """The pid of our running `service`; cleans a stale pid file, adopts an orphan."""
    pidfile = paths.pidfile(service)
    pid = _read_pid(pidfile)
    if pid is not None and _pid_alive(pid) and _is_ours(pid, service, paths):
        return pid
    pidfile.unlink(missing_ok=True)
    orphans = _find_ours(service, paths)
    if orphans:
        pidfile.write_text(f"{orphans[0]}\n")
        return orphans[0]
    return None


def _spawn(cmd: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path) -> int:
    """Start `cmd` detached in its own session, output appended to `log`; return its pid.

    A throw-away `sh` backgrounds the command and exits, so the service is not our child: no
    zombie, no ResourceWarning, and it outlives this Python process (as a server should).
    """
    if log.exists() and log.stat().st_size > 0:
        log.replace(log.with_name(log.name + ".1"))
    script = 'exec 0</dev/null; "$@" >>"$LAKEHOUSE_LOG" 2>&1 & echo $!'
    result = subprocess.run(
        ["sh", "-c", script, "sh", *cmd],
        env={**env, "LAKEHOUSE_LOG": str(log)},
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=30,
        check=False,
    )
    try:
        return int(result.stdout.strip())
    except ValueError:
        raise ServiceError(f"could not start {cmd[0]}: {result.stderr.strip()[:300]}") from None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        pgid = os.getpgid(pid)
        if pgid not in (os.getpgrp(), 0, 1):
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_gone(pids: Sequence[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [pid for pid in pids if _pid_alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in alive if _pid_alive(pid)]
    return alive


def _terminate(pids: Sequence[int], what: str, timeout: float = _STOP_TIMEOUT) -> None:
    """SIGTERM the process groups, wait, then SIGKILL whatever is left."""
    if not pids:
        return
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    alive = _wait_gone(pids, timeout)
    for pid in alive:
        _signal_group(pid, signal.SIGKILL)
    alive = _wait_gone(alive, 10.0)
    if alive:
        raise ServiceError(f"{what} (pid {', '.join(map(str, alive))}) survived SIGKILL")


def _port_open(port: int, host: str = HOST, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def kafka_answers(port: int, host: str = HOST, timeout: float = 2.0) -> bool:
    """True when a Kafka broker answers an ApiVersions request (a real protocol round trip)."""
    client_id = b"lakehouse-probe"
    correlation = 0x1A4E
    header = struct.pack(">hhih", 18, 0, correlation, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(header)) + header)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            body = _recv_exact(sock, min(size, 1 << 20))
    except OSError:
        return False
    if len(body) < 6:
        return False
    got, error = struct.unpack(">ih", body[:6])
    # 0: fine; 35 (UNSUPPORTED_VERSION): still a live Kafka request handler.
    return bool(got == correlation and error in (0, 35))


def _wait_until(
    ready: Callable[[], bool],
    *,
    timeout: float,
    alive: Callable[[], bool],
    what: str,
    paths: _Paths,
    log: Path,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if not alive():
            raise _failure(f"{what} exited during start-up", paths, log)
        if time.monotonic() > deadline:
            raise _failure(f"{what} did not become ready within {timeout:.0f}s", paths, log)
        time.sleep(0.5)


# --------------------------------------------------------------------------------------------
# Jars from Maven Central


def _pom_dir(paths: _Paths, name: str) -> Path:
    for base in (paths.root, Path(__file__).resolve().parent.parent.parent):
        candidate = base / "services" / "maven" / name
        if (candidate / "pom.xml").is_file():
            return candidate
    raise ServiceError(f"services/maven/{name}/pom.xml is missing from {paths.root}")


def _resolve_jars(paths: _Paths, name: str, dest: Path) -> None:
    """Copy the POM's runtime dependencies into `dest` once; later calls never run Maven."""
    pom = _pom_dir(paths, name) / "pom.xml"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    marker = dest / _MARKER
    if marker.is_file() and marker.read_text().strip() == digest:
        return
    with _lock(paths, f"install-{name}"):
        if marker.is_file() and marker.read_text().strip() == digest:
            return
        mvn = _require_command("mvn", "maven", paths)
        log = paths.log(f"maven-{name}")
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={partial}",
        ]
        with log.open("w") as out:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            result = subprocess.run(
                cmd,
                cwd=pom.parent,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if result.returncode != 0 or not any(partial.glob("*.jar")):
            raise _failure(f"resolving {paths.show(pom)} with Maven failed", paths, log)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial.rename(dest)
        marker.write_text(digest + "\n")


def _install_kafka(paths: _Paths) -> None:
    _resolve_jars(paths, "kafka", paths.kafka_jars)


def _install_connect(paths: _Paths) -> None:
    _resolve_jars(paths, "connect", paths.connect_jars)
    _resolve_jars(paths, "debezium-postgres", paths.debezium_plugin)


def kafka_cli(root: Path | str, main_class: str, *args: str) -> list[str]:
    """argv running one of Kafka's own tools from the resolved jars, for example
    `kafka_cli(root, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--topic", "t", ...)`.
    """
    paths = _paths(root)
    _install_kafka(paths)
    return [
        _java(),
        "-Xmx256m",
        f"-Dlog4j2.configurationFile={_write_log4j(paths, 'WARN')}",
        "-cp",
        f"{paths.kafka_jars}/*",
        main_class,
        *args,
    ]


def _write_log4j(paths: _Paths, level: str = "INFO") -> Path:
    path = paths.conf / f"log4j2-{level.lower()}.properties"
    text = "\n".join(
        [
            "status = warn",
            "name = lakehouse",
            "appender.out.type = Console",
            "appender.out.name = OUT",
            f"appender.out.target = {'SYSTEM_OUT' if level == 'INFO' else 'SYSTEM_ERR'}",
            "appender.out.layout.type = PatternLayout",
            "appender.out.layout.pattern = [%d] %p %m (%c)%n",
            f"rootLogger.level = {level}",
            "rootLogger.appenderRef.out.ref = OUT",
            "logger.reflections.name = org.reflections",
            "logger.reflections.level = ERROR",
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "",
        ]
    )
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def _jvm(service: str, paths: _Paths, jars: Path, main: str, *args: str) -> list[str]:
    return [
        _java(),
        JVM_HEAP,
        "-Xms64m",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={_write_log4j(paths)}",
        *_markers(service, paths),
        "-cp",
        f"{jars}/*",
        main,
        *args,
    ]


def _write_properties(path: Path, props: Mapping[str, str]) -> Path:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n")

    path.write_text("".join(f"{key}={escape(value)}\n" for key, value in props.items()))
    return path


# --------------------------------------------------------------------------------------------
# Kafka


def _kafka_cluster_id(paths: _Paths) -> str:
    path = paths.kafka_dir / "cluster.id"
    if path.is_file():
        return path.read_text().strip()
    while True:  # Kafka's Uuid: url-safe base64 of 16 random bytes, never starting with '-'
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            break
    path.write_text(cluster_id + "\n")
    return cluster_id


def _kafka_properties(paths: _Paths, ep: ServiceEndpoints) -> Path:
    data = paths.kafka_dir / "data"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{ep.host}:{ep.kafka_controller_port}",
        "listeners": (
            f"PLAINTEXT://{ep.host}:{ep.kafka_port},CONTROLLER://{ep.host}:{ep.kafka_controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{ep.host}:{ep.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "log.retention.check.interval.ms": "5000",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }
    return _write_properties(paths.conf / "server.properties", props)


def _kafka_format(paths: _Paths, properties: Path) -> None:
    data = paths.kafka_dir / "data"
    if (data / "meta.properties").is_file():
        return
    data.mkdir(parents=True, exist_ok=True)
    log = paths.log("kafka-format")
    cmd = [
        _java(),
        "-Xmx256m",
        f"-Dlog4j2.configurationFile={_write_log4j(paths, 'WARN')}",
        "-cp",
        f"{paths.kafka_jars}/*",
        KAFKA_STORAGE_TOOL,
        "format",
        "-t",
        _kafka_cluster_id(paths),
        "-c",
        str(properties),
        "--ignore-formatted",
    ]
    with log.open("w") as out:
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=120,
        )
    if result.returncode != 0:
        raise _failure("formatting the Kafka storage failed", paths, log)


def start_kafka(root: Path | str, *, timeout: float = _KAFKA_START_TIMEOUT) -> None:
    """Start the single-node KRaft broker unless it already runs; wait until it answers."""
    paths = _paths(root)
    ep = ServiceEndpoints.from_env(paths.root)
    _install_kafka(paths)
    log = paths.log("kafka")
    with _lock(paths, "kafka"):
        pid = _running_pid("kafka", paths)
        if pid is not None:
            running = pid
            _wait_until(
                lambda: kafka_answers(ep.kafka_port),
                timeout=timeout,
                alive=lambda: _pid_alive(running),
                what=f"Kafka (pid {running})",
                paths=paths,
                log=log,
            )
            return
        for port, env_name in (
            (ep.kafka_port, KAFKA_PORT_ENV),
            (ep.kafka_controller_port, KAFKA_CONTROLLER_PORT_ENV),
        ):
            if _port_open(port):
                raise ServiceError(
                    f"cannot start Kafka: {ep.host}:{port} is taken by another process "
                    f"(not ours); stop it or set {env_name}"
                )
        paths.kafka_dir.mkdir(parents=True, exist_ok=True)
        properties = _kafka_properties(paths, ep)
        _kafka_format(paths, properties)
        cmd = _jvm("kafka", paths, paths.kafka_jars, KAFKA_MAIN, str(properties))
        pid = _spawn(cmd, log, os.environ, paths.kafka_dir)
        paths.pidfile("kafka").write_text(f"{pid}\n")
        started = pid
        try:
            _wait_until(
                lambda: kafka_answers(ep.kafka_port),
                timeout=timeout,
                alive=lambda: _pid_alive(started),
                what="Kafka",
                paths=paths,
                log=log,
            )
        except ServiceError:
            _terminate([started], "Kafka")
            paths.pidfile("kafka").unlink(missing_ok=True)
            raise


def _stop_jvm(service: str, label: str, paths: _Paths) -> None:
    with _lock(paths, service):
        pids = set(_find_ours(service, paths))
        pid = _read_pid(paths.pidfile(service))
        if pid is not None and _pid_alive(pid) and _is_ours(pid, service, paths):
            pids.add(pid)
        _terminate(sorted(pids), label)
        paths.pidfile(service).unlink(missing_ok=True)


def stop_kafka(root: Path | str) -> None:
    """Stop the broker (SIGTERM, then SIGKILL of its process group); fine when not running."""
    _stop_jvm("kafka", "Kafka", _paths(root))


# --------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_bindir() -> Path | None:
    found: list[tuple[int, Path]] = []
    for pg_ctl in Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"):
        version = pg_ctl.parent.parent.name
        if version.isdigit():
            found.append((int(version), pg_ctl.parent))
    return max(found)[1] if found else None


def _ensure_postgres_package(paths: _Paths) -> Path:
    bindir = _pg_bindir()
    if bindir is None:
        _apt_install(["postgresql"], paths)
        bindir = _pg_bindir()
    if bindir is None:
        raise ServiceError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
    return bindir


@dataclass(frozen=True)
class _PgLayout:
    bindir: Path
    base: Path
    log: Path
    socket_dir: Path
    os_user: str

    @property
    def data(self) -> Path:
        return self.base / "data"


def _pg_os_user() -> str:
    if _is_root():
        return "postgres"
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _as_pg(cmd: Sequence[str]) -> list[str]:
    """As the cluster's owner: `runuser -u postgres` when we are root (Postgres refuses root)."""
    if _is_root():
        return ["runuser", "-u", "postgres", "--", *cmd]
    return list(cmd)


def _traversable_by_postgres(path: Path) -> bool:
    if not _is_root():
        return True
    result = subprocess.run(
        ["runuser", "-u", "postgres", "--", "test", "-x", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _pg_layout(paths: _Paths, bindir: Path) -> _PgLayout:
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
    return _PgLayout(bindir, base, log, socket_dir, _pg_os_user())


def _pg_prepare_dirs(layout: _PgLayout) -> None:
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
    if _is_root():
        for path in (layout.base, layout.socket_dir, layout.log):
            shutil.chown(path, "postgres", "postgres")
        if layout.data.exists():
            shutil.chown(layout.data, "postgres", "postgres")


def _pg_run(
    layout: _PgLayout, cmd: Sequence[str], *, input_text: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _as_pg(cmd),
        input=input_text,
        capture_output=True,
        text=True,
        cwd=layout.base,
        stdin=None if input_text is not None else subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def _pg_write_config(layout: _PgLayout, ep: ServiceEndpoints) -> None:
    conf = {
        "listen_addresses": f"'{ep.host}'",
        "port": str(ep.pg_port),
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
        "# Written by lakehouse.services on every start; edit there, not here.\n"
        + "".join(f"{key} = {value}\n" for key, value in conf.items())
    )
    hba = layout.data / "pg_hba.conf"
    hba.write_text(
        "# Written by lakehouse.services on every start.\n"
        "# TYPE  DATABASE     USER  ADDRESS       METHOD\n"
        "local   all          all                 peer\n"
        "local   replication  all                 peer\n"
        f"host    all          all   {ep.host}/32  scram-sha-256\n"
        f"host    replication  all   {ep.host}/32  scram-sha-256\n"
    )
    main_conf = layout.data / "postgresql.conf"
    include = "include_if_exists = 'lakehouse.conf'"
    text = main_conf.read_text()
    if include not in text:
        main_conf.write_text(text.rstrip("\n") + f"\n\n{include}\n")
    if _is_root():
        for path in (lakehouse_conf, hba, main_conf):
            shutil.chown(path, "postgres", "postgres")
            path.chmod(0o600)


def _pg_running(layout: _PgLayout) -> int | None:
    """The postmaster's pid when our cluster runs."""
    if not (layout.data / "PG_VERSION").exists():
        return None
    result = _pg_run(layout, [str(layout.bindir / "pg_ctl"), "status", "-D", str(layout.data)])
    if result.returncode != 0:
        return None
    pid = _read_pid(layout.data / "postmaster.pid")
    return pid if pid is not None and _pid_alive(pid) else None


def _scram_verifier(password: str) -> str:
    """A SCRAM-SHA-256 verifier (as PostgreSQL stores it), so the plain password never leaves."""
    salt = secrets.token_bytes(16)
    iterations = 4096
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


_CUSTOMERS_DDL = """
CREATE TABLE IF NOT EXISTS public.customers (
    customer_id int PRIMARY KEY,
    name        text NOT NULL,
    email       text,
    country     text,
    updated_at  timestamptz DEFAULT now()
);
"""


def _pg_admin_sql(
    layout: _PgLayout, ep: ServiceEndpoints, sql: str, database: str, paths: _Paths, what: str
) -> None:
    cmd = [
        str(layout.bindir / "psql"),
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        str(layout.socket_dir),
        "-p",
        str(ep.pg_port),
        "-U",
        layout.os_user,
        "-d",
        database,
        "-f",
        "-",
    ]
    result = _pg_run(layout, cmd, input_text="SET client_min_messages = warning;\n" + sql)
    if result.returncode != 0:
        detail = _one_line((result.stderr.strip().splitlines() or ["psql failed"])[-1])
        raise ServiceError(f"PostgreSQL: {what} failed: {detail}; see {paths.show(layout.log)}")


def _pg_bootstrap(layout: _PgLayout, ep: ServiceEndpoints, password: str, paths: _Paths) -> None:
    """Role `lakehouse` (LOGIN REPLICATION, password from env), its database, the sample table."""
    verifier = _scram_verifier(password)
    _pg_admin_sql(
        layout,
        ep,
        f"SELECT 'CREATE ROLE {PG_USER}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_roles WHERE rolname = '{PG_USER}')\\gexec\n"
        f"ALTER ROLE {PG_USER} WITH LOGIN REPLICATION PASSWORD '{verifier}';\n"
        f"SELECT 'CREATE DATABASE {PG_DATABASE} OWNER {PG_USER}' WHERE NOT EXISTS "
        f"(SELECT FROM pg_database WHERE datname = '{PG_DATABASE}')\\gexec\n",
        "postgres",
        paths,
        f"creating role and database {PG_DATABASE!r}",
    )
    _pg_admin_sql(
        layout,
        ep,
        f"SET ROLE {PG_USER};\n{_CUSTOMERS_DDL}",
        PG_DATABASE,
        paths,
        "creating table public.customers",
    )


def start_postgres(root: Path | str, *, timeout: float = _PG_START_TIMEOUT) -> None:
    """Start our own PostgreSQL cluster (initdb on first use) and ensure role, database, table."""
    paths = _paths(root)
    ep = ServiceEndpoints.from_env(paths.root)
    password = ep.require_password()
    bindir = _ensure_postgres_package(paths)
    with _lock(paths, "postgres"):
        layout = _pg_layout(paths, bindir)
        _pg_prepare_dirs(layout)
        if not (layout.data / "PG_VERSION").exists():
            shutil.rmtree(layout.data, ignore_errors=True)
            result = _pg_run(
                layout,
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(layout.data),
                    "-U",
                    layout.os_user,
                    "--auth-local=peer",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-instructions",
                ],
            )
            if result.returncode != 0:
                with layout.log.open("a") as out:
                    out.write(result.stdout + result.stderr)
                raise _failure("PostgreSQL initdb failed", paths, layout.log)
        _pg_write_config(layout, ep)
        if _pg_running(layout) is None:
            if _port_open(ep.pg_port):
                raise ServiceError(
                    f"cannot start PostgreSQL: {ep.host}:{ep.pg_port} is taken by another "
                    f"process (not ours); stop it or set {PG_PORT_ENV}"
                )
            result = subprocess.run(
                _as_pg(
                    [
                        str(bindir / "pg_ctl"),
                        "start",
                        "-D",
                        str(layout.data),
                        "-l",
                        str(layout.log),
                        "-w",
                        "-t",
                        str(int(timeout)),
                    ]
                ),
                cwd=layout.base,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                start_new_session=True,
                timeout=timeout + 30,
                check=False,
            )
            if result.returncode != 0:
                raise _failure("PostgreSQL did not start", paths, layout.log)
        deadline = time.monotonic() + timeout
        while not _port_open(ep.pg_port):
            if time.monotonic() > deadline:
                raise _failure(
                    f"PostgreSQL runs but does not listen on {ep.host}:{ep.pg_port}",
                    paths,
                    layout.log,
                )
            time.sleep(0.3)
        _pg_bootstrap(layout, ep, password, paths)


def stop_postgres(root: Path | str) -> None:
    """`pg_ctl stop -m fast`; the postmaster's process group is killed if it lingers."""
    paths = _paths(root)
    bindir = _pg_bindir()
    if bindir is None:
        return
    with _lock(paths, "postgres"):
        layout = _pg_layout(paths, bindir)
        pid = _pg_running(layout)
        if pid is None:
            return
        backends = _children(pid)
        result = _pg_run(
            layout,
            [
                str(bindir / "pg_ctl"),
                "stop",
                "-D",
                str(layout.data),
                "-m",
                "fast",
                "-w",
                "-t",
                str(int(_STOP_TIMEOUT)),
            ],
            timeout=_STOP_TIMEOUT + 30,
        )
        if result.returncode != 0 or _wait_gone([pid], 10.0):
            _terminate([pid], "PostgreSQL", timeout=5.0)
        # Backends notice the postmaster's death and exit; make sure none lingers.
        _terminate(_wait_gone(backends, 5.0), "PostgreSQL backends", timeout=5.0)


# --------------------------------------------------------------------------------------------
# Kafka Connect + Debezium


def _connect_properties(paths: _Paths, ep: ServiceEndpoints) -> Path:
    paths.connect_dir.mkdir(parents=True, exist_ok=True)
    props = {
        "bootstrap.servers": ep.kafka_bootstrap,
        "listeners": ep.connect_url,
        "rest.advertised.host.name": ep.host,
        "rest.advertised.port": str(ep.connect_port),
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(paths.connect_dir / "offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "plugin.path": str(paths.plugins),
        "plugin.discovery": "service_load",
        "task.shutdown.graceful.timeout.ms": "5000",
        # Connector configs say ${env:POSTGRES_PASSWORD}; the worker resolves it itself.
        "config.providers": "env",
        "config.providers.env.class": ENV_CONFIG_PROVIDER,
        "config.providers.env.param.allowlist.pattern": f"^{PASSWORD_ENV}$",
    }
    return _write_properties(paths.conf / "connect-standalone.properties", props)


def _http(
    method: str, url: str, body: object | None = None, timeout: float = 15.0
) -> tuple[int, Any]:
    """JSON over HTTP; returns (status, parsed body or None). Raises only when unreachable."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (our loopback URL)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as error:
        status, raw = int(error.code), error.read()
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ServiceError(
            f"Kafka Connect is not reachable at {url} ({reason}); "
            "start it with `python -m lakehouse.services start connect`"
        ) from None
    try:
        parsed: Any = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return status, parsed


def _connect_ready(ep: ServiceEndpoints) -> bool:
    try:
        status, body = _http("GET", f"{ep.connect_url}/connectors", timeout=3.0)
    except ServiceError:
        return False
    return status == 200 and isinstance(body, list)


def start_connect(root: Path | str, *, timeout: float = _CONNECT_START_TIMEOUT) -> None:
    """Start the standalone Connect worker (Kafka first, if needed); wait for its REST API."""
    paths = _paths(root)
    ep = ServiceEndpoints.from_env(paths.root)
    password = ep.require_password()
    _install_connect(paths)
    start_kafka(paths.root)
    log = paths.log("connect")
    with _lock(paths, "connect"):
        pid = _running_pid("connect", paths)
        if pid is not None:
            running = pid
            _wait_until(
                lambda: _connect_ready(ep),
                timeout=timeout,
                alive=lambda: _pid_alive(running),
                what=f"Kafka Connect (pid {running})",
                paths=paths,
                log=log,
            )
            return
        if _port_open(ep.connect_port):
            raise ServiceError(
                f"cannot start Kafka Connect: {ep.host}:{ep.connect_port} is taken by another "
                f"process (not ours); stop it or set {CONNECT_PORT_ENV}"
            )
        properties = _connect_properties(paths, ep)
        cmd = _jvm("connect", paths, paths.connect_jars, CONNECT_MAIN, str(properties))
        env = {**os.environ, PASSWORD_ENV: password}
        pid = _spawn(cmd, log, env, paths.connect_dir)
        paths.pidfile("connect").write_text(f"{pid}\n")
        started = pid
        try:
            _wait_until(
                lambda: _connect_ready(ep),
                timeout=timeout,
                alive=lambda: _pid_alive(started),
                what="Kafka Connect",
                paths=paths,
                log=log,
            )
        except ServiceError:
            _terminate([started], "Kafka Connect")
            paths.pidfile("connect").unlink(missing_ok=True)
            raise


def stop_connect(root: Path | str) -> None:
    """Stop the Connect worker; fine when not running."""
    _stop_jvm("connect", "Kafka Connect", _paths(root))


def _check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise ServiceError(f"connector name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def default_slot_name(connector: str) -> str:
    """The replication slot a connector gets unless told otherwise: unique per connector."""
    return ("dbz_" + re.sub(r"[^a-z0-9_]", "_", connector.lower()))[:63]


def _publication_name(slot: str) -> str:
    return f"{slot[:59]}_pub"


def _trace_line(trace: object) -> str:
    """First line of a Java trace plus its innermost `Caused by:`, as one line."""
    if not isinstance(trace, str) or not trace.strip():
        return "no trace"
    lines = [line.strip() for line in trace.strip().splitlines()]
    causes = [line for line in lines if line.startswith("Caused by:")]
    return lines[0][:400] + (f" / {causes[-1][:300]}" if causes else "")


def wait_connector_running(
    name: str, timeout: float = 120.0, *, endpoints: ServiceEndpoints | None = None
) -> None:
    """Wait until connector `name` and all its tasks are RUNNING; fail fast on FAILED."""
    ep = endpoints or ServiceEndpoints.from_env()
    url = f"{ep.connect_url}/connectors/{urllib.parse.quote(_check_name(name))}/status"
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        status, body = _http("GET", url)
        last = body
        if status == 200 and isinstance(body, dict):
            connector = body.get("connector", {})
            tasks = body.get("tasks", [])
            if connector.get("state") == "FAILED":
                raise ServiceError(
                    f"connector {name!r} FAILED: {_trace_line(connector.get('trace'))}; "
                    "see .lakehouse/logs/connect.log"
                )
            for task in tasks:
                if task.get("state") == "FAILED":
                    raise ServiceError(
                        f"connector {name!r} task {task.get('id')} FAILED: "
                        f"{_trace_line(task.get('trace'))}; see .lakehouse/logs/connect.log"
                    )
            if (
                connector.get("state") == "RUNNING"
                and tasks
                and all(task.get("state") == "RUNNING" for task in tasks)
            ):
                return
        if time.monotonic() > deadline:
            raise ServiceError(
                f"connector {name!r} not RUNNING after {timeout:.0f}s (last status: "
                f"{json.dumps(last)[:300]}); see .lakehouse/logs/connect.log"
            )
        time.sleep(0.5)


def postgres_connector_config(
    topic_prefix: str,
    tables: Sequence[str],
    *,
    schemas_enable: bool,
    unwrap: bool,
    slot_name: str,
    endpoints: ServiceEndpoints,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The Debezium PostgreSQL connector config (the password is a `${env:...}` reference)."""
    schemas = "true" if schemas_enable else "false"
    config = {
        "connector.class": DEBEZIUM_POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": endpoints.pg_host,
        "database.port": str(endpoints.pg_port),
        "database.user": endpoints.pg_user,
        "database.password": f"${{env:{PASSWORD_ENV}}}",
        "database.dbname": endpoints.pg_database,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "slot.name": slot_name,
        "publication.name": _publication_name(slot_name),
        "publication.autocreate.mode": "filtered",
        "tombstones.on.delete": "true",
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


def register_postgres_connector(
    name: str,
    topic_prefix: str,
    tables: list[str],
    *,
    schemas_enable: bool,
    unwrap: bool,
    slot_name: str | None = None,
    extra: dict[str, str] | None = None,
    endpoints: ServiceEndpoints | None = None,
    timeout: float = 120.0,
) -> None:
    """Create or update (PUT, idempotent) a Debezium PostgreSQL connector and wait until it and
    its task run. Topics are `<topic_prefix>.<schema>.<table>`; `tables` are `schema.table`.
    """
    ep = endpoints or ServiceEndpoints.from_env()
    ep.require_password()
    slot = slot_name or default_slot_name(_check_name(name))
    if not _SLOT_RE.fullmatch(slot):
        raise ServiceError(f"slot name {slot!r}: use 1-63 of a-z, 0-9 and '_'")
    if not tables:
        raise ServiceError(f"connector {name!r}: give at least one table (schema.table)")
    config = postgres_connector_config(
        topic_prefix,
        tables,
        schemas_enable=schemas_enable,
        unwrap=unwrap,
        slot_name=slot,
        endpoints=ep,
        extra=extra,
    )
    base = f"{ep.connect_url}/connectors/{urllib.parse.quote(name)}"
    exists, _ = _http("GET", base)
    if exists == 404 and not _slot_exists(config["slot.name"], ep):
        # A new slot starts at the current WAL position, so source offsets left in the
        # standalone offsets file by an earlier connector of this name (a crashed test, a worker
        # restart: REST-created connectors do not survive it) would point at WAL that the slot
        # never had and the task would fail. Create the connector stopped, forget its offsets,
        # then let it run: it snapshots and streams afresh.
        status, body = _http(
            "POST",
            f"{ep.connect_url}/connectors",
            {"name": name, "config": config, "initial_state": "STOPPED"},
            timeout=60.0,
        )
        if status in (200, 201):
            _expect(_http("DELETE", f"{base}/offsets", timeout=60.0), (200,), name, "offsets")
            _expect(_http("PUT", f"{base}/resume"), (200, 202, 204), name, "resume")
            wait_connector_running(name, timeout, endpoints=ep)
            return
        if status != 409:  # 409: created meanwhile by someone else; update it below
            _expect((status, body), (201,), name, "create")
    _expect(_http("PUT", f"{base}/config", config, timeout=60.0), (200, 201), name, "config")
    wait_connector_running(name, timeout, endpoints=ep)


def _expect(response: tuple[int, Any], ok: Sequence[int], name: str, step: str) -> None:
    status, body = response
    if status not in ok:
        message = body.get("message") if isinstance(body, dict) else body
        raise ServiceError(
            f"Kafka Connect rejected connector {name!r} ({step}, HTTP {status}): "
            f"{_one_line(message)}"
        )


def _slot_exists(slot: str, ep: ServiceEndpoints) -> bool:
    if not _SLOT_RE.fullmatch(slot):
        raise ServiceError(f"slot name {slot!r}: use 1-63 of a-z, 0-9 and '_'")
    out = psql(
        f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}';", endpoints=ep
    )
    return out.strip() not in ("", "0")


def list_connectors(*, endpoints: ServiceEndpoints | None = None) -> list[str]:
    ep = endpoints or ServiceEndpoints.from_env()
    status, body = _http("GET", f"{ep.connect_url}/connectors")
    if status != 200 or not isinstance(body, list):
        raise ServiceError(f"GET {ep.connect_url}/connectors answered HTTP {status}")
    return [str(item) for item in body]


def _psql_binary() -> str:
    bindir = _pg_bindir()
    if bindir is not None and (bindir / "psql").is_file():
        return str(bindir / "psql")
    found = shutil.which("psql")
    if found is None:
        raise ServiceError("psql not found: apt-get install -y postgresql-client")
    return found


def psql(sql: str, *, endpoints: ServiceEndpoints | None = None, timeout: float = 60.0) -> str:
    """Run SQL as `lakehouse` over TCP (password via the environment, never argv); return the
    unaligned, tuples-only output."""
    ep = endpoints or ServiceEndpoints.from_env()
    env = {**os.environ, "PGPASSWORD": ep.require_password(), "PGCONNECT_TIMEOUT": "5"}
    cmd = [
        _psql_binary(),
        "-X",
        "-q",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        ep.pg_host,
        "-p",
        str(ep.pg_port),
        "-U",
        ep.pg_user,
        "-d",
        ep.pg_database,
        "-f",
        "-",
    ]
    result = subprocess.run(
        cmd, input=sql, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if result.returncode != 0:
        detail = _one_line((result.stderr.strip().splitlines() or ["psql failed"])[-1])
        raise ServiceError(f"PostgreSQL at {ep.pg_host}:{ep.pg_port}: {detail}")
    return result.stdout


def _drop_slot(slot: str, publication: str, ep: ServiceEndpoints, timeout: float) -> None:
    if not _SLOT_RE.fullmatch(slot) or not re.fullmatch(r"[A-Za-z0-9_]{1,63}", publication):
        raise ServiceError(f"refusing to drop odd slot/publication names {slot!r}/{publication!r}")
    psql(f'DROP PUBLICATION IF EXISTS "{publication}";', endpoints=ep)
    deadline = time.monotonic() + timeout
    while True:
        # The walsender may need a moment to let go of the slot after the task stopped.
        left = psql(
            f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            f"WHERE slot_name = '{slot}' AND NOT active;\n"
            f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}';",
            endpoints=ep,
        ).split()
        if left and left[-1] == "0":
            return
        if time.monotonic() > deadline:
            raise ServiceError(
                f"replication slot {slot!r} is still in use {timeout:.0f}s after deleting its "
                "connector; see .lakehouse/logs/connect.log"
            )
        time.sleep(0.5)


def delete_connector(
    name: str,
    *,
    drop_slot: bool = True,
    slot_name: str | None = None,
    endpoints: ServiceEndpoints | None = None,
    timeout: float = 60.0,
) -> None:
    """Delete connector `name` (no-op if absent), forget its source offsets, and drop its
    replication slot and publication in PostgreSQL so repeated runs leak nothing."""
    ep = endpoints or ServiceEndpoints.from_env()
    base = f"{ep.connect_url}/connectors/{urllib.parse.quote(_check_name(name))}"
    status, config = _http("GET", f"{base}/config")
    slot = slot_name or default_slot_name(name)
    publication = _publication_name(slot)
    if status == 200 and isinstance(config, dict):
        slot = slot_name or str(config.get("slot.name", slot))
        publication = str(config.get("publication.name", _publication_name(slot)))
        # Stop first so the offsets can be reset: a connector of the same name registered later
        # then starts afresh (its slot is dropped below) instead of resuming at a dead LSN.
        _http("PUT", f"{base}/stop")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code, body = _http("GET", f"{base}/status")
            if code != 200 or (
                isinstance(body, dict) and body.get("connector", {}).get("state") == "STOPPED"
            ):
                break
            time.sleep(0.3)
        _http("DELETE", f"{base}/offsets", timeout=60.0)
        code, body = _http("DELETE", base, timeout=60.0)
        if code not in (200, 204, 404):
            message = body.get("message") if isinstance(body, dict) else body
            raise ServiceError(
                f"deleting connector {name!r} failed (HTTP {code}): {_one_line(message)}"
            )
    elif status != 404:
        raise ServiceError(f"GET {base}/config answered HTTP {status}")
    if drop_slot:
        _drop_slot(slot, publication, ep, timeout)


# --------------------------------------------------------------------------------------------
# All together


def install(root: Path | str) -> None:
    """Resolve every jar set (Maven, once) and install PostgreSQL (apt, once); start nothing."""
    paths = _paths(root)
    _java()
    _install_kafka(paths)
    _install_connect(paths)
    _ensure_postgres_package(paths)


def start_all(root: Path | str) -> None:
    """Kafka, PostgreSQL, then Kafka Connect; each is a no-op when already running."""
    start_kafka(root)
    start_postgres(root)
    start_connect(root)


def stop_all(root: Path | str) -> None:
    """Connect, PostgreSQL, then Kafka; tries all three and reports the first failure."""
    errors: list[str] = []
    for stop in (stop_connect, stop_postgres, stop_kafka):
        try:
            stop(root)
        except ServiceError as error:
            errors.append(str(error))
    if errors:
        raise ServiceError("; ".join(errors))


def status(root: Path | str) -> dict[str, str]:
    """One line per service: `running (pid N, 127.0.0.1:PORT)` or `stopped`."""
    paths = _paths(root)
    ep = ServiceEndpoints.from_env(paths.root)
    result: dict[str, str] = {}
    pid = _running_pid("kafka", paths)
    if pid is None:
        result["kafka"] = "stopped" if paths.kafka_jars.is_dir() else "stopped (not installed)"
    else:
        answers = "" if kafka_answers(ep.kafka_port) else ", not answering"
        result["kafka"] = f"running (pid {pid}, {ep.kafka_bootstrap}{answers})"
    bindir = _pg_bindir()
    if bindir is None:
        result["postgres"] = "stopped (not installed)"
    else:
        layout = _pg_layout(paths, bindir)
        pg_pid = _pg_running(layout)
        where = paths.show(layout.data)
        result["postgres"] = (
            f"running (pid {pg_pid}, {ep.pg_host}:{ep.pg_port}, data {where})"
            if pg_pid is not None
            else "stopped"
        )
    pid = _running_pid("connect", paths)
    if pid is None:
        installed = paths.connect_jars.is_dir() and paths.debezium_plugin.is_dir()
        result["connect"] = "stopped" if installed else "stopped (not installed)"
    else:
        answers = "" if _connect_ready(ep) else ", REST not answering"
        result["connect"] = f"running (pid {pid}, {ep.connect_url}{answers})"
    return result


def _default_root() -> Path:
    home = os.environ.get("LAKEHOUSE_HOME")
    return Path(home).resolve() if home else Path(__file__).resolve().parent.parent.parent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakehouse.services",
        description="Install, start, stop or inspect the local Kafka, PostgreSQL and Connect.",
    )
    parser.add_argument("action", choices=("install", "start", "stop", "status"))
    parser.add_argument("name", nargs="?", default="all", choices=(*SERVICES, "all"))
    parser.add_argument("--root", type=Path, default=None, help="project root (default: checkout)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve() if args.root else _default_root()
    starters: dict[str, Callable[[Path], None]] = {
        "kafka": start_kafka,
        "postgres": start_postgres,
        "connect": start_connect,
        "all": start_all,
    }
    stoppers: dict[str, Callable[[Path], None]] = {
        "kafka": stop_kafka,
        "postgres": stop_postgres,
        "connect": stop_connect,
        "all": stop_all,
    }
    try:
        if args.action == "install":
            paths = _paths(root)
            if args.name in ("kafka", "all"):
                _install_kafka(paths)
            if args.name in ("connect", "all"):
                _install_connect(paths)
            if args.name in ("postgres", "all"):
                _ensure_postgres_package(paths)
        elif args.action == "start":
            starters[args.name](root)
        elif args.action == "stop":
            stoppers[args.name](root)
        for name, state in status(root).items():
            if args.name in (name, "all"):
                print(f"{name:10s} {state}")
    except ServiceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
