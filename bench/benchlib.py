"""What the benchmarks share: CPU accounting of the local-mode driver and a Kafka preload.

Imported by the scripts next to it (`python bench/NAME.py` puts this directory on sys.path).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.core import kafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.core.settings import Settings


def jvm_pid(spark: SparkSession) -> int:
    """The driver JVM's process id (local mode: every executor thread runs in it)."""
    context: Any = spark.sparkContext  # py4j handles are untyped
    return int(context._jvm.ProcessHandle.current().pid())


def cpu_seconds(pid: int) -> float:
    """utime+stime of the driver JVM `pid` plus this Python process's own."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return (int(fields[11]) + int(fields[12])) / ticks + own.user + own.system


def preload(
    settings: Settings,
    topic: str,
    events: int,
    event: Callable[[int], dict[str, Any]],
    partitions: int,
    key: Callable[[int], bytes] = lambda i: str(i).encode(),
) -> None:
    """Produce `event(i)` as JSON for i in 0..events-1 (key `key(i)`, partition
    i % partitions) into `topic`, created if missing, and wait until the broker has
    acknowledged them all."""
    from confluent_kafka import Producer

    kafka.ensure_topic(settings.kafka, topic, partitions=partitions)
    producer = Producer(
        kafka.client_config(
            settings.kafka, **{"linger.ms": 50, "batch.size": 1_000_000, "acks": "all"}
        )
    )
    for i in range(events):
        value = json.dumps(event(i)).encode()
        while True:
            try:
                producer.produce(topic, value=value, key=key(i), partition=i % partitions)
                break
            except BufferError:  # the local queue is full: let the producer drain it
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"preload of {topic} did not finish")
