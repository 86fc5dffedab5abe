"""Crash and replay: SIGKILL refine_silver inside a batch's commits (after silver's, after
the quarantine's, after the metrics', before Spark's checkpoint commit: named fault points, so
each kill lands exactly there) and at a random moment of a continuous run; silver, the
quarantine and the metrics table end exactly as after one uninterrupted run."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections.abc import Mapping
from pathlib import Path

import yaml
from chispa import assert_df_equality
from pyspark.sql import DataFrame, Row, SparkSession

from lakehouse.core import kafka, tables
from lakehouse.core.faults import FAULT_ENV
from lakehouse.core.settings import Settings, load_settings, project_root
from tests.bronze.helpers import new_source, newest_version, run_ingest, run_job, start_job
from tests.silver.helpers import (
    ORDER_SCHEMA,
    change,
    current,
    metrics,
    produce,
    quarantine,
    run_refine,
    silver_table,
)

FILES = 6
PER_FILE = 40

TABLE = {
    "mode": "upsert",
    "schema": ORDER_SCHEMA,
    "keys": ["order_id"],
    "sequence_by": "ts",
    "max_files_per_trigger": 1,  # one bronze file per batch: the same batches in both runs
    "expectations": [
        {"name": "amount_not_negative", "sql": "amount >= 0", "action": "quarantine"},
        {
            "name": "ts_present",
            "expect": "expect_column_values_to_not_be_null",
            "kwargs": {"column": "ts"},
            "action": "drop",
        },
        {"name": "small", "sql": "amount < 900", "action": "warn"},
    ],
}


def events(seed: int) -> list[object]:
    rng = random.Random(seed)  # noqa: S311 - test data
    out: list[object] = []
    for i in range(FILES * PER_FILE):
        amount = rng.choice([rng.uniform(0, 1000), -1.0])
        ts = None if rng.random() < 0.05 else i
        out.append(
            {
                "order_id": rng.randint(1, 200),
                "customer_id": 1,
                "order_status": "paid",
                "amount": round(amount, 2),
                "ts": ts,
            }
        )
    return out


def conf_dir(
    tmp_path: Path,
    source: str,
    topic: str,
    names: tuple[str, ...],
    kind: str = "events",
    table: Mapping[str, object] | None = None,
) -> Path:
    """A copy of conf/ whose test overlay declares this test's source and silver table, for
    the job subprocess (expectations are lists, which environment variables cannot carry)."""
    conf = tmp_path / "conf"
    shutil.copytree(project_root() / "conf", conf, ignore=shutil.ignore_patterns("local"))
    overlay = {
        "sources": {source: {"kind": kind, "topics": [topic]}},
        "silver": {name: {"source": source, **(table or TABLE)} for name in names},
    }
    (conf / "test" / "crash.yml").write_text(yaml.safe_dump(overlay))
    return conf


def committed_batches(spark: SparkSession, settings: Settings, name: str) -> int:
    path = settings.storage.path("_system", "expectation_metrics")
    if not tables.exists(spark, path):
        return 0
    return metrics(spark, settings, name).select("batch_id").distinct().count()


def comparable(spark: SparkSession, settings: Settings, name: str) -> list[DataFrame]:
    return [
        silver_table(spark, settings, name).drop("__deleted_at"),
        quarantine(spark, settings, name).drop("id", "table", "run_id", "quarantined_at"),
        metrics(spark, settings, name).drop("table", "run_id", "at"),
    ]


def test_sigkill_refine_mid_batch_ends_as_uninterrupted(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up, max_offsets_per_trigger=PER_FILE)
    produce(settings, topic, events(seed=11))
    run_ingest(spark, settings, source)  # FILES bronze commits of PER_FILE records each
    reference, crashed = "ref_" + source, "crash_" + source
    # Both tables declared in one conf overlay, read by the same loader as the job subprocess.
    conf = conf_dir(tmp_path, source, topic, (reference, crashed))
    settings = load_settings(
        "test", conf_dir=conf, overrides={"storage.root": settings.storage.root}
    )
    run_refine(spark, settings, reference)

    env = dict(os.environ)
    env.update(
        {
            "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
            "LAKEHOUSE_CONF_DIR": str(conf),
        }
    )
    # The job compacts silver after every commit (a compaction is a commit of its own, after
    # the batch's metrics and before the checkpoint's commit).
    env["LAKEHOUSE__STORAGE__COMPACT_EVERY"] = "1"
    # Each run dies inside batch 0, between two of its commits; the next redoes the batch,
    # and must neither repeat what was committed nor lose what was not.
    points = ("after_silver_commit", "after_quarantine_commit", "after_metrics_commit")
    for point in (*points, "after_compaction"):
        died = run_job("refine_silver", ["--table", crashed], {**env, FAULT_ENV: point})
        assert died.returncode == -signal.SIGKILL, f"{point}: {died.stderr[-3000:]}"
    assert committed_batches(spark, settings, crashed) == 1  # batch 0's metrics, once

    # Then a kill at a random moment of a continuous run (often inside a MERGE).
    rng = random.Random(5)  # noqa: S311 - test timing
    log = tmp_path / "refine.log"
    job = start_job(
        "refine_silver",
        ["--table", crashed, "--trigger", "continuous", "--trigger-interval", "1 second"],
        env,
        log,
    )
    try:
        deadline = time.monotonic() + 180
        metrics_table = settings.storage.path("_system", "expectation_metrics")
        counted = -1  # the metrics log's commit the last count saw
        while True:
            # A Spark count only when the metrics log has a new commit: counting every 0.3 s
            # took the CPU the starting job needed.
            if (newest := newest_version(spark, metrics_table)) != counted:
                counted = newest
                if committed_batches(spark, settings, crashed) > 1:
                    break
            assert job.poll() is None, f"refine_silver exited by itself: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "no batch committed within 180 s"
            time.sleep(0.3)
        time.sleep(rng.uniform(0.1, 2.0))
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    assert committed_batches(spark, settings, crashed) < FILES, "finished before the kill"
    run_refine(spark, settings, crashed)  # the rest, from the same checkpoint

    for expected, actual in zip(
        comparable(spark, settings, reference), comparable(spark, settings, crashed), strict=True
    ):
        assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    assert committed_batches(spark, settings, crashed) == FILES
    history = spark.sql(f"DESCRIBE HISTORY delta.`{settings.storage.path('silver', crashed)}`")
    # The kill after a compaction met one (the job reached that point only after an OPTIMIZE
    # commit); the continuous run's batches compact only when a MERGE left several files.
    assert history.where("operation = 'OPTIMIZE'").count() >= 1


def test_a_cdc_batch_replayed_after_its_silver_commit_resolves_as_it_did_the_first_time(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    """A batch whose unchanged-TOAST placeholder takes silver's value and whose tombstone
    deletes silver's row, killed after its silver commit: the rerun resolved both against
    silver holding the batch's own MERGE (the placeholder found no older value and was
    quarantined; the tombstone found the row deleted and changed nothing), so its quarantine
    and metrics differed from one uninterrupted run. They are equal."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    reference, crashed = "ref_" + source, "crash_" + source
    table = {"mode": "scd1", "schema": "id INT, body STRING, n INT", "keys": ["id"]}
    conf = conf_dir(tmp_path, source, topic, (reference, crashed), "cdc", table)
    settings = load_settings(
        "test", conf_dir=conf, overrides={"storage.root": settings.storage.root}
    )

    def send(records: list[tuple[int, bytes | None]]) -> None:
        kafka.produce(
            settings.kafka, topic, [(f'{{"id": {k}}}'.encode(), v, 0) for k, v in records]
        )
        run_ingest(spark, settings, source, kind="cdc")

    send(
        [
            (1, change("c", 100, after={"id": 1, "body": "long text", "n": 1})),
            (2, change("c", 110, after={"id": 2, "body": "other", "n": 1})),
        ]
    )
    for name in (reference, crashed):
        run_refine(spark, settings, name)
    send(
        [
            (1, change("u", 120, after={"id": 1, "body": "__debezium_unavailable_value", "n": 2})),
            (2, None),  # a tombstone alone: the delete of id 2
        ]
    )
    run_refine(spark, settings, reference)
    env = {
        **os.environ,
        "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
        "LAKEHOUSE_CONF_DIR": str(conf),
        FAULT_ENV: "after_silver_commit",
    }
    died = run_job("refine_silver", ["--table", crashed], env)
    assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]
    run_refine(spark, settings, crashed)

    assert current(spark, settings, crashed).select("id", "body", "n").collect() == [
        Row(id=1, body="long text", n=2)
    ]
    for expected, actual in zip(
        comparable(spark, settings, reference), comparable(spark, settings, crashed), strict=True
    ):
        assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
