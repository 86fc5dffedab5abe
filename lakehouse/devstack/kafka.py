"""The local Kafka broker: Apache Kafka 4.3.1, a single-node KRaft broker+controller.

The broker listens where `kafka.bootstrap_servers` points (its first `host:port`, by default
127.0.0.1:19092); the KRaft controller listens on the same host at the broker port + 1 (19093).
Its storage under `.lakehouse/kafka/data/` is formatted once, with the cluster id kept in
`.lakehouse/kafka/cluster.id`; it logs to `.lakehouse/logs/kafka.log`.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import uuid
from pathlib import Path

from lakehouse.core.settings import Settings
from lakehouse.devstack import ServiceError
from lakehouse.devstack.jvm import (
    JvmServer,
    describe,
    start_jvm,
    stop_jvm,
    tool_argv,
    write_properties,
)
from lakehouse.devstack.packages import install_kafka_jars
from lakehouse.devstack.processes import StatePaths, failure, run_logged, state_paths

KAFKA_VERSION = "4.3.1"
KAFKA_MAIN = "kafka.Kafka"
KAFKA_STORAGE_TOOL = "kafka.tools.StorageTool"
BOOTSTRAP_SETTING = "kafka.bootstrap_servers"

_START_TIMEOUT = 120.0


def broker_address(settings: Settings) -> tuple[str, int]:
    """The broker's (host, port): the first `host:port` of `kafka.bootstrap_servers`."""
    servers = settings.kafka.bootstrap_servers
    host, _, port_text = servers.split(",")[0].strip().rpartition(":")
    port = int(port_text) if port_text.isdigit() else -1
    if not host or not 1 <= port <= 65534:
        raise ServiceError(
            f"{BOOTSTRAP_SETTING} {servers!r}: the local broker needs a host:port first "
            "(port 1-65534: its KRaft controller takes the broker port + 1)"
        )
    return host, port


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def _answers(host: str, port: int, timeout: float = 2.0) -> bool:
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


def kafka_answers(settings: Settings, timeout: float = 2.0) -> bool:
    """True when the configured broker answers an ApiVersions request (a real protocol round
    trip, not just an open port)."""
    host, port = broker_address(settings)
    return _answers(host, port, timeout)


def kafka_cli(settings: Settings, main_class: str, *args: str) -> list[str]:
    """argv running one of Kafka's own tools from the resolved jars, for example
    `kafka_cli(settings, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--topic", "t")`
    (give it `--bootstrap-server` from `settings.kafka.bootstrap_servers` where it needs one).
    """
    paths = state_paths()
    install_kafka_jars(paths)
    return tool_argv(paths, paths.kafka_jars, main_class, *args)


def _cluster_id(paths: StatePaths) -> str:
    path = paths.kafka_dir / "cluster.id"
    if path.is_file():
        return path.read_text().strip()
    while True:  # Kafka's Uuid: url-safe base64 of 16 random bytes, never starting with '-'
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            break
    path.write_text(cluster_id + "\n")
    return cluster_id


def _write_server_properties(paths: StatePaths, host: str, port: int) -> Path:
    broker, controller = f"{host}:{port}", f"{host}:{port + 1}"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{controller}",
        "listeners": f"PLAINTEXT://{broker},CONTROLLER://{controller}",
        "advertised.listeners": f"PLAINTEXT://{broker}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(paths.kafka_dir / "data"),
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
    return write_properties(paths.conf / "server.properties", props)


def _format_storage(paths: StatePaths, properties: Path) -> None:
    """`kafka-storage format` once: a formatted data directory is left alone."""
    data = paths.kafka_dir / "data"
    if (data / "meta.properties").is_file():
        return
    data.mkdir(parents=True, exist_ok=True)
    log = paths.log("kafka-format")
    cmd = tool_argv(
        paths,
        paths.kafka_jars,
        KAFKA_STORAGE_TOOL,
        "format",
        "-t",
        _cluster_id(paths),
        "-c",
        str(properties),
        "--ignore-formatted",
    )
    if run_logged(cmd, log, timeout=120) != 0:
        raise failure("formatting the Kafka storage failed", paths, log)


def _server(settings: Settings, paths: StatePaths) -> JvmServer:
    host, port = broker_address(settings)
    return JvmServer(
        "kafka",
        "Kafka",
        paths.kafka_jars,
        KAFKA_MAIN,
        paths.kafka_dir,
        ports=(
            (host, port, BOOTSTRAP_SETTING),
            (host, port + 1, f"{BOOTSTRAP_SETTING} (the controller takes the broker port + 1)"),
        ),
        ready=lambda: _answers(host, port),
    )


def start_kafka(settings: Settings, *, timeout: float = _START_TIMEOUT) -> None:
    """Start the single-node KRaft broker unless it already runs; wait until it answers."""
    paths = state_paths()
    host, port = broker_address(settings)
    install_kafka_jars(paths)

    def prepare() -> list[str]:
        paths.kafka_dir.mkdir(parents=True, exist_ok=True)
        properties = _write_server_properties(paths, host, port)
        _format_storage(paths, properties)
        return [str(properties)]

    start_jvm(_server(settings, paths), paths, prepare, env=os.environ, timeout=timeout)


def stop_kafka(settings: Settings) -> None:
    """Stop the broker (SIGTERM, then SIGKILL of its process group); fine when not running."""
    stop_jvm("kafka", "Kafka", state_paths())


def kafka_status(settings: Settings) -> str:
    """`running (pid N, host:port)` (`, not answering` when it does not) or `stopped`."""
    paths = state_paths()
    host, port = broker_address(settings)
    return describe(
        "kafka",
        paths,
        lambda: _answers(host, port),
        installed=paths.kafka_jars.is_dir(),
        where=f"{host}:{port}",
        unready="not answering",
    )
