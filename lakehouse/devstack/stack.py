"""The dev stack as a whole: install, start, stop and report Kafka, PostgreSQL and Connect
(what `lakehouse setup`, `lakehouse services ...`, the demo and the test fixtures call)."""

from __future__ import annotations

from collections.abc import Callable

from lakehouse.core.settings import Settings
from lakehouse.devstack import ServiceError
from lakehouse.devstack.cluster import cluster_status, start_cluster, stop_cluster
from lakehouse.devstack.connect import connect_status, start_connect, stop_connect
from lakehouse.devstack.hdfs import hdfs_status, start_hdfs, stop_hdfs
from lakehouse.devstack.jvm import java
from lakehouse.devstack.kafka import kafka_status, start_kafka, stop_kafka
from lakehouse.devstack.packages import (
    ensure_postgres_package,
    install_connect_jars,
    install_hdfs_jars,
    install_kafka_jars,
)
from lakehouse.devstack.postgres import postgres_status, start_postgres, stop_postgres
from lakehouse.devstack.processes import state_paths

SERVICES = ("kafka", "postgres", "connect")
# Started only by name: the jobs, the demo and most tests run on local[2] with a local root.
ON_DEMAND = ("spark", "hdfs")

_STARTERS: dict[str, Callable[[Settings], None]] = {
    "kafka": start_kafka,
    "postgres": start_postgres,
    "connect": start_connect,
    "spark": start_cluster,
    "hdfs": start_hdfs,
}
_STOPPERS: dict[str, Callable[[Settings], None]] = {
    "kafka": stop_kafka,
    "postgres": stop_postgres,
    "connect": stop_connect,
    "spark": stop_cluster,
    "hdfs": stop_hdfs,
}
_STATUS: dict[str, Callable[[Settings], str]] = {
    "kafka": kafka_status,
    "postgres": postgres_status,
    "connect": connect_status,
    "spark": cluster_status,
    "hdfs": hdfs_status,
}


def install(settings: Settings) -> None:
    """Resolve every jar set (Maven, once) and install PostgreSQL (apt, once); start nothing."""
    paths = state_paths()
    java()
    install_kafka_jars(paths)
    install_connect_jars(paths)
    install_hdfs_jars(paths)
    ensure_postgres_package(paths)


def start_all(settings: Settings) -> None:
    """Kafka, PostgreSQL, then Kafka Connect; each is a no-op when already running."""
    for name in SERVICES:
        _STARTERS[name](settings)


def stop_all(settings: Settings) -> None:
    """Connect, PostgreSQL, then Kafka; tries all three and reports every failure."""
    errors: list[str] = []
    for name in reversed(SERVICES):
        try:
            _STOPPERS[name](settings)
        except ServiceError as error:
            errors.append(str(error))
    if errors:
        raise ServiceError("; ".join(errors))


def start(settings: Settings, name: str = "all") -> None:
    """Start one service (`kafka`, `postgres`, `connect`, `spark`, `hdfs`) or `all` (the first
    three)."""
    if name == "all":
        start_all(settings)
    else:
        _STARTERS[_known(name)](settings)


def stop(settings: Settings, name: str = "all") -> None:
    """Stop one service (`kafka`, `postgres`, `connect`, `spark`, `hdfs`) or `all` (every one)."""
    if name == "all":
        stop_all(settings)
        stop_cluster(settings)
        stop_hdfs(settings)
    else:
        _STOPPERS[_known(name)](settings)


def status(settings: Settings) -> dict[str, str]:
    """One line per service: `running (pid N, <where>)` or `stopped`."""
    return {name: _STATUS[name](settings) for name in (*SERVICES, *ON_DEMAND)}


def _known(name: str) -> str:
    if name not in (*SERVICES, *ON_DEMAND):
        known = ", ".join((*SERVICES, *ON_DEMAND))
        raise ServiceError(f"unknown service {name!r}: use {known} or all")
    return name
