"""The local Kafka Connect worker (Apache Kafka 4.3.1, standalone) and its REST API.

The worker listens where `connect.url` points (http://127.0.0.1:18083 by default), talks to the
broker of `kafka.bootstrap_servers` and loads Debezium from `.lakehouse/connect-plugins/` as an
isolated plugin. It logs to `.lakehouse/logs/connect.log`.

Connect runs standalone: connectors are created, updated and deleted through its REST API (see
`debezium`) and do not survive a worker restart (register them again; their source offsets do
survive, in `.lakehouse/connect/offsets.dat`).

The worker reads the PostgreSQL password itself through its `EnvVarConfigProvider`: connector
configs say `${env:POSTGRES_PASSWORD}` and the worker process gets the value of
`postgres.password` in that environment variable, so the REST API never sees it.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from lakehouse.core.settings import Settings
from lakehouse.devstack import ServiceError
from lakehouse.devstack.jvm import JvmServer, describe, start_jvm, stop_jvm, write_properties
from lakehouse.devstack.kafka import broker_address, start_kafka
from lakehouse.devstack.packages import install_connect_jars
from lakehouse.devstack.pg import password
from lakehouse.devstack.processes import StatePaths, one_line, state_paths

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
ENV_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
PASSWORD_ENV = "POSTGRES_PASSWORD"  # noqa: S105 (the variable's name, not a password)
URL_SETTING = "connect.url"
SEE_LOG = "see .lakehouse/logs/connect.log"

_START_TIMEOUT = 240.0
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


# --------------------------------------------------------------------------------------------
# REST


def rest_url(settings: Settings) -> str:
    """The REST API's base URL: `connect.url` without a trailing slash."""
    return settings.connect.url.rstrip("/")


def http(
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
            "start it with `lakehouse services start connect`"
        ) from None
    try:
        parsed: Any = json.loads(raw) if raw else None
    except ValueError:
        parsed = raw.decode("utf-8", "replace")
    return status, parsed


def error_message(body: object) -> str:
    """Connect's error message in an answer's body, as one line."""
    return one_line(body.get("message") if isinstance(body, dict) else body)


def check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise ServiceError(f"connector name {name!r}: use letters, digits, '.', '_' or '-'")
    return name


def connector_url(settings: Settings, name: str) -> str:
    """`<connect.url>/connectors/<name>`, the name checked first."""
    return f"{rest_url(settings)}/connectors/{urllib.parse.quote(check_name(name))}"


def _ready(settings: Settings) -> bool:
    try:
        status, body = http("GET", f"{rest_url(settings)}/connectors", timeout=3.0)
    except ServiceError:
        return False
    return status == 200 and isinstance(body, list)


def list_connectors(settings: Settings) -> list[str]:
    """The names of the connectors the worker runs."""
    url = f"{rest_url(settings)}/connectors"
    status, body = http("GET", url)
    if status != 200 or not isinstance(body, list):
        raise ServiceError(f"GET {url} answered HTTP {status}")
    return [str(item) for item in body]


def _trace_line(trace: object) -> str:
    """First line of a Java trace plus its innermost `Caused by:`, as one line."""
    if not isinstance(trace, str) or not trace.strip():
        return "no trace"
    lines = [line.strip() for line in trace.strip().splitlines()]
    causes = [line for line in lines if line.startswith("Caused by:")]
    return lines[0][:400] + (f" / {causes[-1][:300]}" if causes else "")


def _running(name: str, body: dict[str, Any]) -> bool:
    """Whether a connector status says it and all its tasks run; raises when one FAILED."""
    connector = body.get("connector", {})
    tasks = body.get("tasks", [])
    if connector.get("state") == "FAILED":
        raise ServiceError(
            f"connector {name!r} FAILED: {_trace_line(connector.get('trace'))}; {SEE_LOG}"
        )
    for task in tasks:
        if task.get("state") == "FAILED":
            raise ServiceError(
                f"connector {name!r} task {task.get('id')} FAILED: "
                f"{_trace_line(task.get('trace'))}; {SEE_LOG}"
            )
    return bool(
        connector.get("state") == "RUNNING"
        and tasks
        and all(task.get("state") == "RUNNING" for task in tasks)
    )


def wait_connector_running(settings: Settings, name: str, timeout: float = 120.0) -> None:
    """Wait until connector `name` and all its tasks are RUNNING; fail fast on FAILED."""
    url = f"{connector_url(settings, name)}/status"
    deadline = time.monotonic() + timeout
    while True:
        status, body = http("GET", url)
        if status == 200 and isinstance(body, dict) and _running(name, body):
            return
        if time.monotonic() > deadline:
            raise ServiceError(
                f"connector {name!r} not RUNNING after {timeout:.0f}s (last status: "
                f"{json.dumps(body)[:300]}); {SEE_LOG}"
            )
        time.sleep(0.5)


# --------------------------------------------------------------------------------------------
# The worker


def _listen_address(settings: Settings) -> tuple[str, int]:
    """The worker's (host, port) from `connect.url`, which must be a plain http URL."""
    url = settings.connect.url
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or 80
    except ValueError:
        parts, port = urllib.parse.urlsplit(""), 0
    if parts.scheme != "http" or not parts.hostname or not port:
        raise ServiceError(
            f"{URL_SETTING} {url!r}: the local worker needs http://host:port "
            "(e.g. http://127.0.0.1:18083)"
        )
    return parts.hostname, port


def _write_worker_properties(paths: StatePaths, settings: Settings) -> Path:
    host, port = _listen_address(settings)
    broker_host, broker_port = broker_address(settings)
    paths.connect_dir.mkdir(parents=True, exist_ok=True)
    props = {
        "bootstrap.servers": f"{broker_host}:{broker_port}",
        "listeners": f"http://{host}:{port}",
        "rest.advertised.host.name": host,
        "rest.advertised.port": str(port),
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
    return write_properties(paths.conf / "connect-standalone.properties", props)


def _server(settings: Settings, paths: StatePaths) -> JvmServer:
    host, port = _listen_address(settings)
    return JvmServer(
        "connect",
        "Kafka Connect",
        paths.connect_jars,
        CONNECT_MAIN,
        paths.connect_dir,
        ports=((host, port, URL_SETTING),),
        ready=lambda: _ready(settings),
    )


def start_connect(settings: Settings, *, timeout: float = _START_TIMEOUT) -> None:
    """Start the standalone Connect worker (Kafka first, if needed); wait for its REST API."""
    secret = password(settings)
    paths = state_paths()
    server = _server(settings, paths)
    install_connect_jars(paths)
    start_kafka(settings)

    def prepare() -> list[str]:
        return [str(_write_worker_properties(paths, settings))]

    env = {**os.environ, PASSWORD_ENV: secret}
    start_jvm(server, paths, prepare, env=env, timeout=timeout)


def stop_connect(settings: Settings) -> None:
    """Stop the Connect worker; fine when not running."""
    stop_jvm("connect", "Kafka Connect", state_paths())


def connect_status(settings: Settings) -> str:
    """`running (pid N, <url>)` (`, REST not answering` when it does not) or `stopped`."""
    paths = state_paths()
    return describe(
        "connect",
        paths,
        lambda: _ready(settings),
        installed=paths.connect_jars.is_dir() and paths.debezium_plugin.is_dir(),
        where=rest_url(settings),
        unready="REST not answering",
    )
