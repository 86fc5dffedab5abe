"""What a job prints, run as a user runs it: one line per micro-batch and a summary on stdout,
no Ivy report, no Spark banner and no routine Spark warnings unless `--verbose`; and an error
inside Spark still shows Spark's error lines above the one-line verdict."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.core import tables
from lakehouse.core.errors import EXIT_FAILED, EXIT_USAGE
from lakehouse.core.settings import Settings
from tests.bronze.helpers import job_env, new_source, run_ingest, run_job
from tests.jobs.helpers import conf_overlay, last_line, overlay_env
from tests.silver.helpers import ORDER_SCHEMA, produce

TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
NOISE = (
    ":: resolution report ::",  # Ivy
    "Ivy Default Cache",
    "Using Spark's default log4j profile",
    "Setting default log level",
    "NativeCodeLoader",
    "ResolveWriteToStream",
    "SparkStringUtils",
    " INFO SparkContext",
)


def order(order_id: int, amount: float) -> dict[str, object]:
    return {
        "order_id": order_id,
        "customer_id": 1,
        "order_status": "paid",
        "amount": amount,
        "ts": 1_000 + order_id,
    }


def test_a_quiet_job_prints_a_line_per_batch_and_its_summary_and_verbose_shows_spark(
    kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    produce(settings, topic, [order(i, 1.0) for i in range(5)])
    env = {
        **job_env(settings, source, topic),
        f"LAKEHOUSE__SOURCES__{source.upper()}__MAX_OFFSETS_PER_TRIGGER": "3",
    }

    done = run_job("ingest_events", ["--source", source], env)

    assert done.returncode == 0, done.stderr[-3000:]
    bronze = settings.storage.path("bronze", source)
    assert done.stdout == f"{source}: 5 record(s) ingested into {bronze} in 2 batch(es)\n"
    lines = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Using")]
    behind = ", 0 records behind (max per partition)"
    pattern = (
        rf"{TIME} INFO lakehouse.core.streaming: "
        rf"ingest_{source} batch (\d+): (\d+) rows in, \d+ rows/s(.*)"
    )
    batches = [re.fullmatch(pattern, line) for line in lines]
    assert all(batches), lines  # nothing else: no Ivy, no banner, no routine warning
    assert [(m[1], m[2]) for m in batches if m] == [("0", "3"), ("1", "2")]
    assert [m[3] for m in batches if m][-1] == behind

    produce(settings, topic, [order(9, 1.0)])
    verbose = run_job("ingest_events", ["--source", source, "--verbose"], env)

    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert " INFO SparkContext: " in verbose.stderr  # Spark's INFO lines, on request
    assert verbose.stdout.startswith(f"{source}: 1 record(s) ingested")
    for noise in NOISE:
        assert noise not in done.stderr, noise


def test_an_error_inside_spark_keeps_sparks_error_lines_above_the_verdict(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    produce(settings, topic, [order(1, 1.0)])
    name = "console_" + source
    # ANSI SQL (Spark 4's default): a division by zero fails the task that evaluates it.
    declared = {
        "source": source,
        "mode": "append",
        "schema": ORDER_SCHEMA,
        "expectations": [{"name": "ratio", "sql": "amount / (order_id - 1) > 0"}],
    }
    conf = conf_overlay(
        tmp_path,
        {"sources": {source: {"kind": "events", "topics": [topic]}}, "silver": {name: declared}},
    )
    env = overlay_env(settings, conf)
    run_ingest(spark, settings, source)  # set-up in this JVM; the refine job is the subject

    done = run_job("refine_silver", ["--table", name], env)

    assert done.returncode == EXIT_FAILED, done.stderr[-3000:]
    assert re.search(r"ERROR \w+: .*DIVIDE_BY_ZERO", done.stderr), done.stderr[-3000:]
    assert last_line(done).startswith("refine_silver: ")
    assert "DIVIDE_BY_ZERO" in last_line(done)


def test_a_source_topic_that_does_not_exist_stops_the_job_at_start_naming_it(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up)
    env = {**job_env(settings, source, f"{topic}-typo")}

    done = run_job("ingest_events", ["--source", source], env)

    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    assert last_line(done) == (
        f"ingest_events: source {source!r}: topic(s) ['{topic}-typo'] do not exist on "
        f"{settings.kafka.bootstrap_servers}; create them (or let their producer create them), "
        f"or fix sources.{source}.topics"
    )
    assert not tables.exists(spark, settings.storage.path("bronze", source))  # nothing written


def test_a_broker_that_cannot_be_reached_ends_the_job_with_one_line_naming_it(
    kafka_up: Settings,
) -> None:
    source, topic, settings = new_source(kafka_up)
    env = {**job_env(settings, source, topic), "LAKEHOUSE__KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9"}

    done = run_job("ingest_events", ["--source", source], env)

    assert done.returncode == EXIT_FAILED, done.stderr[-3000:]
    line = last_line(done)
    assert line.startswith("ingest_events: Kafka at 127.0.0.1:9 cannot be reached within 15 s ("), (
        line
    )
    assert line.endswith(
        "): start the broker (locally: lakehouse services start kafka) "
        "or fix kafka.bootstrap_servers"
    ), line
    assert "Traceback" not in done.stderr  # anticipated: no stack
    assert "rdkafka" not in done.stderr  # nor the Kafka client's retries, one per 50 ms


def test_a_storage_root_that_cannot_be_written_stops_the_job_at_start_with_one_line(
    kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    produce(settings, topic, [order(1, 1.0)])
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # where the root's parent folder should be
    root = blocker / "lake"
    env = {**job_env(settings, source, topic), "LAKEHOUSE__STORAGE__ROOT": str(root)}

    done = run_job("ingest_events", ["--source", source], env)

    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    line = last_line(done)
    assert line.startswith(f"ingest_events: storage.root {root} cannot be written ("), line
    assert line.endswith(
        "); fix storage.root (LAKEHOUSE__STORAGE__ROOT), or the permissions or credentials "
        "of that location"
    ), line
    assert "Traceback" not in done.stderr


def test_a_delta_table_written_by_a_newer_delta_ends_the_job_with_one_line(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    # Its own storage root: the table it leaves behind is unreadable by design.
    settings = replace(settings, storage=replace(settings.storage, root=str(tmp_path / "lake")))
    produce(settings, topic, [order(1, 1.0)])
    env = job_env(settings, source, topic)
    run_ingest(spark, settings, source)
    # A newer Delta Lake's commit: a table feature this one does not know.
    bronze = settings.storage.path("bronze", source)
    version = tables.latest_version(spark, bronze) + 1
    commit = Path(bronze) / "_delta_log" / f"{version:020d}.json"
    commit.write_text(
        '{"commitInfo": {"timestamp": 1, "operation": "UPGRADE PROTOCOL"}}\n'
        '{"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, '
        '"readerFeatures": ["futureFeature"], "writerFeatures": ["futureFeature"]}}\n'
    )
    produce(settings, topic, [order(2, 1.0)])

    done = run_job("ingest_events", ["--source", source], env)

    assert done.returncode == EXIT_FAILED, done.stderr[-3000:]
    line = last_line(done)
    assert line.startswith(
        "ingest_events: a Delta table needs a newer Delta Lake than this job's 4.0.0 ("
    ), line
    assert line.endswith(
        "); upgrade delta-spark (lakehouse/core/versions.py and pyproject.toml) to the version "
        "that wrote it, or write the table with this one"
    ), line
    assert "Traceback" not in done.stderr


def test_refine_prints_a_line_per_batch_with_what_it_did_where_its_time_went_its_rate_and_lag(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    # Three records a bronze commit: four records make two commits (and two refine batches).
    source, topic, settings = new_source(kafka_up, max_offsets_per_trigger=3)
    name = "lines_" + source
    declared = {
        "source": source,
        "mode": "append",
        "schema": ORDER_SCHEMA,
        "max_files_per_trigger": 1,  # one bronze commit per batch
        "expectations": [{"name": "positive", "sql": "amount > 0", "action": "quarantine"}],
    }
    conf = conf_overlay(
        tmp_path,
        {"sources": {source: {"kind": "events", "topics": [topic]}}, "silver": {name: declared}},
    )
    env = overlay_env(settings, conf)
    produce(settings, topic, [order(1, 1.0), order(2, -1.0), order(3, 2.0), order(4, 1.0)])
    run_ingest(spark, settings, source)

    done = run_job("refine_silver", ["--table", name], env)

    assert done.returncode == 0, done.stderr[-3000:]
    pattern = (
        rf"{TIME} INFO lakehouse.core.streaming: refine_silver_{name} batch (\d+): "
        r"(\d+) rows in, (.*); \d+\.\d\d s: (.*), \d+ rows/s, (.*)"
    )
    lines = [line for line in done.stderr.splitlines() if not line.startswith("WARNING: Using")]
    batches = [re.fullmatch(pattern, line) for line in lines]
    assert all(batches), lines  # nothing else
    # Where each batch's time went: its phases in order, each with its seconds.
    phases = [re.sub(r" \d+\.\d\d(,|$)", r"\1", m.group(4)) for m in batches if m]
    assert phases == ["check, silver, quarantine, metrics", "check, silver, metrics"]
    assert [m.group(1, 2, 3, 5) for m in batches if m] == [
        # Bronze: v0 created it, v1 and v2 are the ingest's two batches.
        (
            "0",
            "3",
            "2 written, 0 dropped, 1 quarantined (failed: positive=1)",
            "1 commit(s) behind (read through v1 of v2)",
        ),
        (
            "1",
            "1",
            "1 written, 0 dropped, 0 quarantined",
            "0 commit(s) behind (read through v2 of v2)",
        ),
    ]
    assert done.stdout == (
        f"silver.{name}: 2 batch(es), 4 row(s) in, 3 written, 0 dropped, 1 quarantined; "
        "failed per rule: positive=1\n"
    )
