"""Kafka client plumbing (confluent-kafka) shared by jobs, the demo and tests."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from lakehouse.core.errors import LakehouseError, one_line
from lakehouse.core.settings import KafkaSettings


class KafkaError(LakehouseError):
    """A Kafka operation failed; the message names the topic and the broker."""


# librdkafka's own log lines (a retry every 50 ms while a broker is down: hundreds of
# "Connect ... failed" lines before the one-line verdict) go here, shown only with --verbose
# (`core.jobs.configure_logging`); what failed reaches the user as a KafkaError.
CLIENT_LOG = logging.getLogger("lakehouse.kafka.client")
CLIENT_LOG.setLevel(logging.CRITICAL)


def client_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": kafka.bootstrap_servers,
        "logger": CLIENT_LOG,
        **kafka.options,
        **extra,
    }


def spark_options(kafka: KafkaSettings) -> dict[str, str]:
    """Options for Spark's Kafka source/sink: client options get the `kafka.` prefix."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    options.update({f"kafka.{key}": value for key, value in kafka.options.items()})
    return options


def ensure_topic(
    kafka: KafkaSettings,
    topic: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create `topic` unless it exists (idempotent)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient(client_config(kafka))
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return
    futures = admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=partitions, replication_factor=1, config=dict(config or {})
            )
        ]
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise KafkaError(
                f"cannot create topic {topic!r} on {kafka.bootstrap_servers}: {exc}"
            ) from exc


def delete_topics(kafka: KafkaSettings, topics: Iterable[str], timeout_s: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient

    names = list(topics)
    if not names:
        return
    admin = AdminClient(client_config(kafka))
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    doomed = [name for name in names if name in existing]
    for future in admin.delete_topics(doomed, operation_timeout=timeout_s).values():
        future.result(timeout=timeout_s)


def topic_names(
    kafka: KafkaSettings, options: Mapping[str, str] | None = None, timeout_s: float = 30.0
) -> set[str]:
    """The topics the broker has now."""
    return set(metadata(kafka, options, timeout_s).topics)


def metadata(
    kafka: KafkaSettings, options: Mapping[str, str] | None = None, timeout_s: float = 30.0
) -> Any:
    """The cluster's metadata (topics and partitions); a broker that cannot be reached is a
    `KafkaError` naming it and the fix, not a client exception."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        return AdminClient(client_config(kafka, **(options or {}))).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaError(
            f"Kafka at {kafka.bootstrap_servers} cannot be reached within {timeout_s:g} s "
            f"({one_line(exc, 200)}): start the broker (locally: lakehouse services start "
            "kafka) or fix kafka.bootstrap_servers"
        ) from None


def watermarks(
    kafka: KafkaSettings,
    partitions: Mapping[str, Iterable[int]],
    options: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) per partition: the earliest offset Kafka still holds, and the next one to be
    written. `options` are a source's own client options (security settings and the like)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        client_config(kafka, **{**(options or {}), "group.id": "lakehouse-watermarks"})
    )
    try:
        result: dict[tuple[str, int], tuple[int, int]] = {}
        for topic, parts in partitions.items():
            for partition in parts:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout_s, cached=False
                )
                result[(topic, partition)] = (int(low), int(high))
        return result
    finally:
        consumer.close()


def end_offsets(kafka: KafkaSettings, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
    """The next offset to be written, per partition (Kafka's high watermark)."""
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(client_config(kafka)).list_topics(topic, timeout=timeout_s).topics[topic]
    if meta.error is not None:
        raise KafkaError(f"topic {topic!r} on {kafka.bootstrap_servers}: {meta.error}")
    marks = watermarks(kafka, {topic: sorted(meta.partitions)}, timeout_s=timeout_s)
    return {partition: high for (_topic, partition), (_low, high) in marks.items()}


def produce(
    kafka: KafkaSettings,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int | None]],
    timeout_s: float = 30.0,
) -> list[tuple[int, int]]:
    """Produce (key, value, partition) records synchronously; returns (partition, offset) each.

    Idempotent producer and acks=all: the broker never writes a retried record twice."""
    from confluent_kafka import Producer

    producer = Producer(
        client_config(kafka, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5})
    )
    delivered: list[tuple[int, int]] = []
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset()))

    for key, value, partition in records:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if errors or remaining:
        raise KafkaError(
            f"producing to {topic!r} on {kafka.bootstrap_servers} failed: "
            f"{remaining} undelivered, errors: {errors[:3]}"
        )
    return delivered


def alter_topic_config(
    kafka: KafkaSettings, topic: str, config: Mapping[str, str], timeout_s: float = 30.0
) -> None:
    """Set topic configs (incrementally: configs not named keep their values)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ],
    )
    admin = AdminClient(client_config(kafka))
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=timeout_s)
