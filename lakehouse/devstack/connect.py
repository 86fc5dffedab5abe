"""The local Kafka Connect worker (Apache Kafka 4.3.1, standalone) and its REST API.

The worker listens where `connect.url` points (http://127.0.0.1:18083 by default), talks to the
broker of `kafka.bootstrap_servers` and loads Debezium from `.lakehouse/connect-plugins/` as an
isolated plugin. It logs to `.lakehouse/logs/connect.log`.

Connect runs standalone: connectors are created, updated and deleted through its REST API
(`lakehouse.connectors`) and do not survive a worker restart (register them again; their
source offsets do survive, in `.lakehouse/connect/offsets.dat`).

The worker reads the PostgreSQL password itself through its `EnvVarConfigProvider`: connector
configs say `${env:POSTGRES_PASSWORD}` and the worker process gets the value of
`postgres.password` in that environment variable, so the REST API never sees it.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from lakehouse.connectors.debezium import PASSWORD_ENV
from lakehouse.connectors.rest import JSON_CONVERTER, http, rest_url
from lakehouse.core.settings import Settings
from lakehouse.devstack import ServiceError
from lakehouse.devstack.jvm import JvmServer, describe, start_jvm, stop_jvm, write_properties
from lakehouse.devstack.kafka import broker_address, start_kafka
from lakehouse.devstack.packages import install_connect_jars
from lakehouse.devstack.pg import password
from lakehouse.devstack.processes import StatePaths, state_paths

CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
ENV_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
URL_SETTING = "connect.url"

_START_TIMEOUT = 240.0


def _ready(settings: Settings) -> bool:
    try:
        status, body = http("GET", f"{rest_url(settings)}/connectors", timeout=3.0)
    except ServiceError:
        return False
    return status == 200 and isinstance(body, list)


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
        heap="2g",
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
