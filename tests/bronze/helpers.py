"""Shared helpers for the bronze tests: per-test sources, bronze reads, job subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lakehouse.bronze.ingest import IngestOptions, IngestResult, ingest
from lakehouse.bronze.offsets import StartFrom
from lakehouse.core import kafka, tables
from lakehouse.core.settings import Settings, project_root
from lakehouse.core.specs import SourceSettings

ROOT = project_root()


def new_source(
    settings: Settings,
    kind: str = "events",
    partitions: int = 1,
    topic_config: Mapping[str, str] | None = None,
    **fields: Any,
) -> tuple[str, str, Settings]:
    """A fresh topic and a source reading it, added to a copy of `settings`."""
    name = f"t{uuid.uuid4().hex[:10]}"
    topic = f"{name}-topic"
    kafka.ensure_topic(settings.kafka, topic, partitions=partitions, config=topic_config)
    source = SourceSettings(kind=kind, topics=(topic,), **fields)
    return name, topic, replace(settings, sources={**settings.sources, name: source})


def run_ingest(
    spark: SparkSession,
    settings: Settings,
    name: str,
    kind: str = "events",
    start_from: StartFrom | None = None,
    **options: Any,
) -> IngestResult:
    return ingest(spark, settings, IngestOptions(name, start_from=start_from, **options), kind)


def delete_records(settings: Settings, topic: str, partition: int, before: int) -> None:
    """Make Kafka drop a partition's records below `before` now, as retention would later."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.client_config(settings.kafka))
    for future in admin.delete_records([TopicPartition(topic, partition, before)]).values():
        future.result(timeout=30)


def bronze(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(settings.storage.path("bronze", name))


def job_env(settings: Settings, name: str, topic: str, kind: str = "events") -> dict[str, str]:
    """Environment for a job subprocess: the same storage root and the per-test source."""
    env = dict(os.environ)
    env.update(
        {
            "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
            f"LAKEHOUSE__SOURCES__{name.upper()}__KIND": kind,
            f"LAKEHOUSE__SOURCES__{name.upper()}__TOPICS": topic,
            f"LAKEHOUSE__SOURCES__{name.upper()}__TRIGGER_INTERVAL": "1 second",
            f"LAKEHOUSE__SOURCES__{name.upper()}__MAX_OFFSETS_PER_TRIGGER": "300",
        }
    )
    return env


# A job a test runs to its end lives 20-60 s on two busy cores, where C2's compile threads cost
# more CPU than their code saves: three such JVMs side by side took 99 s with C2 and 57 s with
# C1 alone. A job that runs on (start_job, the fault test) keeps C2: under C1 the fault test's
# continuous refine took 80-100 s per batch. A JIT tier changes no result.
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def short_lived(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the short-lived JVM's options added to SPARK_SUBMIT_OPTS (which every
    `spark-submit`, pyspark's included, puts on the driver's command line)."""
    given = env.get("SPARK_SUBMIT_OPTS", "")
    return {**env, "SPARK_SUBMIT_OPTS": f"{given} {SHORT_JVM_OPTIONS}".strip()}


def start_job(
    job: str, args: list[str], env: Mapping[str, str], log: Path
) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(
        [sys.executable, str(ROOT / "jobs" / f"{job}.py"), "--env", "test", *args],
        env=dict(env),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@contextmanager
def reaped(job: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """`job`, SIGKILLed with its process group on leaving if it still runs: a failed assertion
    must not leak the job's JVM into the next test."""
    try:
        yield job
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)


def run_job(
    job: str, args: list[str], env: Mapping[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / f"{job}.py"), "--env", "test", *args],
        env=short_lived(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def newest_version(spark: SparkSession, table: str) -> int:
    """The table's newest commit (-1 before its first), from file probes: no Spark job, so a
    wait that checks it before counting takes no CPU from the job it waits for."""
    return tables.latest_version(spark, table) if tables.exists(spark, table) else -1


def wait_for_records(
    settings: Settings, topic: str, count: int, timeout_s: float = 90, poll_s: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = sum(kafka.end_offsets(settings.kafka, topic).values())
        except kafka.KafkaError:
            seen = 0
        if seen >= count:
            return
        time.sleep(poll_s)
    raise AssertionError(f"only {seen} of {count} records reached {topic}")
