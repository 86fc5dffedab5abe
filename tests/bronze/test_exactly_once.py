"""Exactly once under crashes: SIGKILL the continuous ingest job at random moments while a
producer writes into several partitions; every (topic, partition, offset) ends in bronze once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from chispa import assert_df_equality
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from lakehouse.core import kafka, system, tables
from lakehouse.core.settings import Settings
from tests.bronze.helpers import (
    bronze,
    delete_records,
    job_env,
    new_source,
    newest_version,
    reaped,
    run_ingest,
    short_lived,
    start_job,
)

MAX_EVENTS = 40_000
CHUNK = 100


def committed_rows(spark: SparkSession, settings: Settings, name: str) -> int:
    if not tables.exists(spark, settings.storage.path("bronze", name)):
        return 0
    return bronze(spark, settings, name).count()


def wait_for_more(
    spark: SparkSession, settings: Settings, name: str, than: int, job: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + 180
    counted = -1  # the bronze log's commit the last count saw
    while time.monotonic() < deadline and job.poll() is None:
        if (newest := newest_version(spark, settings.storage.path("bronze", name))) != counted:
            counted = newest
            if committed_rows(spark, settings, name) > than:
                return
        time.sleep(0.5)
    os.killpg(job.pid, signal.SIGKILL)
    raise AssertionError(f"the ingest job committed nothing new within 180 s (exit {job.poll()})")


def test_sigkill_mid_batch_loses_and_duplicates_nothing(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    name, topic, settings = new_source(kafka_up, partitions=3)
    delivered: list[tuple[int, int]] = []
    failures: list[BaseException] = []

    stop = threading.Event()

    def produce_chunk() -> None:
        start = len(delivered)
        records = [
            (str(i).encode(), f'{{"n":{i}}}'.encode(), i % 3) for i in range(start, start + CHUNK)
        ]
        delivered.extend(kafka.produce(settings.kafka, topic, records))

    def produce() -> None:
        # Keeps producing until every kill is done, so each restart has new records to ingest.
        try:
            while not stop.is_set() and len(delivered) < MAX_EVENTS:
                produce_chunk()
                time.sleep(0.5)
        except BaseException as exc:  # surfaced by the assertion below
            failures.append(exc)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    rng = random.Random(7)  # noqa: S311 - test timing, not security
    # Bronze compacts every 3 commits as it goes: kills land in compactions too.
    env = {**job_env(settings, name, topic), "LAKEHOUSE__STORAGE__COMPACT_EVERY": "3"}
    progress: list[int] = []
    log = tmp_path / "ingest.log"
    for _kill in range(5):
        # Five cold starts, each killed a few batches in: C1 alone starts a JVM sooner
        # (`short_lived`); the JIT tier changes no result.
        job = start_job(
            "ingest_events", ["--source", name, "--trigger", "continuous"], short_lived(env), log
        )
        # Let this run commit something (a cold JVM's first batch takes ~20 s here), then kill
        # it at a random moment among the batches that follow.
        wait_for_more(spark, settings, name, than=progress[-1] if progress else 0, job=job)
        time.sleep(rng.uniform(0.2, 4.0))
        assert job.poll() is None, f"the job exited by itself; see {log}"
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        progress.append(bronze(spark, settings, name).count())
    stop.set()
    producer.join(timeout=120)
    assert not failures, failures

    # Catch up what is left, in this process, from the same checkpoint, compacting as the
    # killed runs did. A kill may land in every compaction a killed run started (a cold JVM's
    # first OPTIMIZE outlasts the 0.2-4 s before its kill): this run has a batch to write
    # (one more chunk), so it compacts unless a compaction committed in the last 3 commits.
    produce_chunk()
    compacting = replace(settings, storage=replace(settings.storage, compact_every=3))
    run_ingest(spark, compacting, name)

    assert len(delivered) >= 3000, len(delivered)  # thousands of events, 3 partitions
    assert progress == sorted(set(progress)), progress  # every killed run had committed more
    history = DeltaTable.forPath(spark, settings.storage.path("bronze", name)).history()
    assert history.where("operation = 'OPTIMIZE'").count() > 0  # the runs did compact
    expected = spark.createDataFrame(delivered, "partition int, offset long")
    assert_df_equality(
        bronze(spark, settings, name).select("partition", "offset"),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # And each record whole: every event once, its key, value and partition as produced.
    produced = spark.createDataFrame(
        [(str(i), f'{{"n":{i}}}', i % 3) for i in range(len(delivered))],
        "key string, value string, partition int",
    )
    assert_df_equality(
        bronze(spark, settings, name).selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition"
        ),
        produced,
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_sigterm_stops_continuous_cleanly(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(10)])
    log = tmp_path / "ingest.log"
    job = start_job(
        "ingest_events",
        ["--source", name, "--trigger", "continuous"],
        job_env(settings, name, topic),
        log,
    )
    with reaped(job):
        deadline = time.monotonic() + 180  # generous: JVM start on a loaded 2-core CI machine
        committed = 0
        while time.monotonic() < deadline and committed < 10:
            time.sleep(1)
            committed = committed_rows(spark, settings, name)
        assert committed == 10, log.read_text()[-3000:]
        job.send_signal(signal.SIGTERM)  # to the Python driver only, as a scheduler would
        assert job.wait(timeout=120) == 0, log.read_text()[-3000:]
    assert bronze(spark, settings, name).count() == 10


def jvm_started(group: int) -> bool:
    """Whether a `java` process runs in the process group `group` (the job's driver JVM)."""
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
        except (OSError, ValueError):
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        if name == "java" and int(rest.split()[2]) == group:
            return True
    return False


def test_sigterm_while_the_session_starts_stops_the_continuous_job_cleanly(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    """A scheduler stops a job whenever it likes, also in the ~10-30 s its JVM takes to start:
    that is a clean stop (exit 0), as it is once the query runs, not a kill by the signal."""
    name, topic, settings = new_source(kafka_up)
    log = tmp_path / "ingest.log"
    job = start_job(
        "ingest_events",
        ["--source", name, "--trigger", "continuous"],
        job_env(settings, name, topic),
        log,
    )
    with reaped(job):
        deadline = time.monotonic() + 180
        # The job's JVM has been launched, well before the session is ready.
        while not jvm_started(job.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed_rows(spark, settings, name) == 0
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0, log.read_text()[-3000:]
    assert "stopped by a signal before it started" in log.read_text(), log.read_text()[-3000:]


@pytest.mark.parametrize("allow", [False, True], ids=["refused", "recorded"])
def test_offsets_kafka_drops_while_a_continuous_job_reads_are_never_skipped_silently(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path, allow: bool
) -> None:
    """Retention overtakes a running job (here: Kafka drops offsets below 250 while the job,
    10 records a second, is near the start). Without --allow-data-loss the job stops with
    exit 3 naming the loss; with it, the gap is recorded like one found at start and the
    job goes on from the first offset Kafka still holds."""
    name, topic, settings = new_source(kafka_up)
    # 100 kB records: the job's consumer fetches ~10 at a time (1 MB per partition fetch), so
    # what Kafka drops has not been fetched yet.
    value = b'{"pad": "' + b"x" * 100_000 + b'"}'
    kafka.produce(settings.kafka, topic, [(None, value, 0) for _ in range(300)])
    env = {
        **job_env(settings, name, topic),
        f"LAKEHOUSE__SOURCES__{name.upper()}__MAX_OFFSETS_PER_TRIGGER": "10",
    }
    flags = ["--allow-data-loss"] if allow else []
    log = tmp_path / "ingest.log"
    job = start_job(
        "ingest_events", ["--source", name, "--trigger", "continuous", *flags], env, log
    )
    with reaped(job):
        deadline = time.monotonic() + 180
        while committed_rows(spark, settings, name) == 0:
            assert job.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no batch committed in 180 s"
            time.sleep(0.5)
        delete_records(settings, topic, 0, 250)
        if allow:
            while 299 not in {r["offset"] for r in bronze(spark, settings, name).collect()}:
                assert job.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "offset 299 not in bronze after 180 s"
                time.sleep(1)
            job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=120)
    text = log.read_text()
    offsets = sorted(r["offset"] for r in bronze(spark, settings, name).collect())
    first_missing = next(i for i, o in enumerate([*offsets, -1]) if o != i)
    assert 0 < first_missing < 250
    gaps = [
        (e["first_missing"], e["last_missing"])
        for e in system.read_log(spark, settings, system.INGEST_LOG, name)
        if e["event"] == "gap"
    ]
    if allow:
        assert code == 0, text[-3000:]
        assert offsets == [*range(first_missing), *range(250, 300)]
        assert gaps == [(first_missing, 249)]
    else:
        assert code == 3, text[-3000:]
        assert offsets == list(range(first_missing))
        assert gaps == []
        last = text.strip().splitlines()[-1]
        assert last.startswith(
            f"ingest_events: Kafka no longer holds offsets {name!r} was reading"
        ), last
