"""What the benchmarks share: CPU accounting of the local-mode driver, a Kafka preload, and
the shipped Spark settings the test overlay changes.

Imported by the scripts next to it (`python bench/NAME.py` puts this directory on sys.path).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.core import kafka

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse.core.settings import Settings

# The benches run on the test services (`--env test`), whose overlay turns adaptive execution
# off for the suite's speed on tables of a few rows: a bench measures the shipped settings.
SHIPPED_SPARK = {"spark.sql.adaptive.enabled": "true"}


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


def noop_timed(spark: SparkSession, job: Callable[[], DataFrame]) -> tuple[float, float]:
    """Wall and CPU seconds of writing `job()` to Spark's `noop` sink (every row computed,
    nothing stored)."""
    pid = jvm_pid(spark)
    cpu, start = cpu_seconds(pid), time.perf_counter()
    job().write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start, cpu_seconds(pid) - cpu


def alternate(
    spark: SparkSession, jobs: Mapping[str, Callable[[], DataFrame]], rounds: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each job's wall and CPU seconds per round (`noop_timed`), the jobs taking turns, after
    `warmup` untimed rounds."""
    for _ in range(warmup):
        for job in jobs.values():
            noop_timed(spark, job)
    seconds: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            wall, used = noop_timed(spark, job)
            seconds[name].append(wall)
            cpu[name].append(used)
    return seconds, cpu


def print_against_baseline(
    seconds: Mapping[str, list[float]], cpu: Mapping[str, list[float]], rows: int
) -> None:
    """Each job's median wall and CPU seconds and its runs, then the ratio of the `baseline`
    job's median time to the `lakehouse` job's."""
    for name in seconds:
        wall = statistics.median(seconds[name])
        print(
            f"{name:10s} {wall:6.2f} s  {rows / wall:>10,.0f} rows/s  "
            f"{statistics.median(cpu[name]):6.2f} CPU-s  "
            f"runs {[round(s, 2) for s in seconds[name]]}"
        )
    ratio = statistics.median(seconds["baseline"]) / statistics.median(seconds["lakehouse"])
    print(f"ratio (baseline time / lakehouse time): {ratio:.2f}")
