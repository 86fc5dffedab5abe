"""The exit-code contract, as a scheduler sees it: each job or command run as a subprocess
ends with its code and one last stderr line that names the problem and the fix, and writes
nothing. 1 a check failed, 2 bad usage or config, 3 data loss, 4 a protected table, 5 the data
broke the table's contract (5 for a `fail` rule: tests/silver/test_job.py)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import kafka
from lakehouse.core.errors import (
    EXIT_CONTRACT,
    EXIT_DATA_LOSS,
    EXIT_FAILED,
    EXIT_PROTECTED,
    EXIT_USAGE,
)
from lakehouse.core.settings import Settings
from tests.bronze.helpers import bronze, delete_records, job_env, new_source, run_ingest, run_job
from tests.jobs.helpers import conf_overlay, last_line, overlay_env, run_cli
from tests.silver.helpers import ORDER_SCHEMA, produce


def offsets(spark: SparkSession, settings: Settings, name: str) -> list[int]:
    return sorted(r["offset"] for r in bronze(spark, settings, name).collect())


def table(spark: SparkSession, settings: Settings, layer: str, name: str) -> DataFrame:
    return spark.read.format("delta").load(settings.storage.path(layer, name))


def test_a_failed_validation_exits_1(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    name = "exit1_" + tmp_path.name[-8:].replace("-", "_")
    declared = {
        "source": "orders",
        "mode": "append",
        "schema": ORDER_SCHEMA,
        "expectations": [{"name": "amount_not_negative", "sql": "amount >= 0"}],
    }
    conf = conf_overlay(tmp_path, {"silver": {name: declared}})
    rows = [(1, 1, "paid", 5.0, 1, None), (2, 1, "paid", -3.0, 2, None)]
    silver = settings.storage.path("silver", name)
    spark.createDataFrame(rows, f"{ORDER_SCHEMA}, _rescued_data STRING").write.format("delta").save(
        silver
    )

    done = run_cli(["validate", f"silver.{name}"], overlay_env(settings, conf))

    assert done.returncode == EXIT_FAILED, done.stderr[-3000:]
    assert last_line(done).startswith(
        f"lakehouse validate: silver.{name}: 1 of 1 expectation(s) failed (amount_not_negative); "
        "see "
    )
    assert table(spark, settings, "silver", name).count() == 2  # validation writes no data


def test_an_unknown_table_exits_2_before_a_session_starts(
    settings: Settings, tmp_path: Path
) -> None:
    env = overlay_env(settings, conf_overlay(tmp_path, {}))
    done = run_job("refine_silver", ["--table", "no_such_table"], env)
    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    assert "no_such_table" in last_line(done)
    assert "conf/" in last_line(done)  # where to declare it


def test_offsets_lost_after_the_checkpoint_exit_3_and_write_nothing(
    spark: SparkSession, kafka_up: Settings
) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(5)])
    run_ingest(spark, settings, name)  # the checkpoint resumes at 5
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(15)])
    delete_records(settings, topic, 0, 12)  # 5..11 gone, as retention would
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(2)])

    done = run_job("ingest_events", ["--source", name], job_env(settings, name, topic))

    assert done.returncode == EXIT_DATA_LOSS, done.stderr[-3000:]
    assert f"{topic} partition 0 offsets 5..11" in last_line(done)
    assert "--allow-data-loss" in last_line(done)
    assert offsets(spark, settings, name) == [0, 1, 2, 3, 4]


def test_a_reset_of_protected_bronze_exits_4_and_removes_nothing(
    spark: SparkSession, kafka_up: Settings
) -> None:
    name, topic, settings = new_source(kafka_up)
    kafka.produce(settings.kafka, topic, [(None, b"{}", 0) for _ in range(3)])
    run_ingest(spark, settings, name)

    done = run_cli(["reset", f"bronze.{name}"], job_env(settings, name, topic))

    assert done.returncode == EXIT_PROTECTED, done.stderr[-3000:]
    assert last_line(done).startswith(f"lakehouse reset: reset of bronze.{name} refused: ")
    assert "lakehouse unprotect TABLE --reason" in last_line(done)
    assert offsets(spark, settings, name) == [0, 1, 2]


def test_schema_drift_fail_exits_5_naming_the_fields_and_writes_nothing(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    event = {"order_id": 1, "customer_id": 1, "order_status": "paid", "amount": 5.0, "ts": 1}
    produce(settings, topic, [event, {**event, "order_id": 2, "coupon": "X1"}])
    run_ingest(spark, settings, source)
    name = "drift_" + source
    declared = {"source": source, "mode": "append", "schema": ORDER_SCHEMA, "schema_drift": "fail"}
    conf = conf_overlay(
        tmp_path,
        {"sources": {source: {"kind": "events", "topics": [topic]}}, "silver": {name: declared}},
    )

    done = run_job("refine_silver", ["--table", name], overlay_env(settings, conf))

    assert done.returncode == EXIT_CONTRACT, done.stderr[-3000:]
    assert last_line(done) == (
        f"refine_silver: silver.{name}: records carry field(s) ['coupon'] that the declared "
        "schema lacks (schema_drift: fail); nothing of batch 0 was written. Add them to "
        f"silver.{name}.schema in conf/base/tables.yml, or set schema_drift: evolve or rescue"
    )
    assert table(spark, settings, "silver", name).count() == 0
