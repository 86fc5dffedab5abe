"""The storage root on a file system that is not the driver's disk: a real single-node HDFS
(`lakehouse services start hdfs`), reached only through Hadoop's FileSystem as s3a:// or
abfss:// are on a real deployment. Bronze, silver (checkpoints, quarantine, metrics) and
`lakehouse validate` keep everything under that root."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import fs, system
from lakehouse.core.settings import Settings, project_root
from lakehouse.devstack import hdfs, stack
from lakehouse.quality.validate import validate
from lakehouse.silver.refine import checkpoint_path
from tests.bronze.helpers import bronze, run_ingest
from tests.quality.test_validate import ORDER_COLUMNS, ORDER_RULES, declare, write
from tests.silver.helpers import (
    ORDER_SCHEMA,
    current,
    events_pipeline,
    produce,
    quarantine,
    rule,
    run_refine,
)


@pytest.fixture(scope="module")
def on_hdfs(settings: Settings) -> Iterator[Settings]:
    """`settings` with a fresh storage root on the dev stack's HDFS (started if need be)."""
    already_up = stack.status(settings)["hdfs"].startswith("running")
    hdfs.start_hdfs(settings)
    root = f"{hdfs.HDFS_URL}/lakehouse-{uuid.uuid4().hex[:8]}"
    try:
        yield replace(settings, storage=replace(settings.storage, root=root))
    finally:
        if not already_up:
            hdfs.stop_hdfs(settings)


def order(order_id: int, customer: int, status: str, amount: float, ts: int) -> dict[str, object]:
    return {
        "order_id": order_id,
        "customer_id": customer,
        "order_status": status,
        "amount": amount,
        "ts": ts,
    }


def test_bronze_and_silver_run_and_resume_on_an_hdfs_root(
    spark: SparkSession, kafka_up: Settings, on_hdfs: Settings
) -> None:
    settings = replace(kafka_up, storage=on_hdfs.storage)
    first = [
        order(1, 7, "paid", 10.0, 1),
        order(2, 7, "paid", 5.0, 1),
        order(3, 8, "paid", -1.0, 1),
    ]
    source, topic, name, settings = events_pipeline(
        spark,
        settings,
        [*first, b"not json"],
        schema=ORDER_SCHEMA,
        mode="upsert",
        keys=("order_id",),
        sequence_by="ts",
        expectations=(rule("amount_not_negative", "quarantine", sql="amount >= 0"),),
    )
    run_refine(spark, settings, name)
    checkpoint = checkpoint_path(settings, name)
    assert checkpoint.startswith(f"{hdfs.HDFS_URL}/")
    assert fs.exists(spark, f"{checkpoint}/commits/0")
    # A second run of each job resumes from its checkpoint on HDFS.
    produce(settings, topic, [order(1, 7, "shipped", 10.0, 2), order(4, 8, "paid", 2.5, 1)])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)

    assert bronze(spark, settings, source).count() == 6
    assert_df_equality(
        current(spark, settings, name).selectExpr(
            *(c.split()[0] for c in ORDER_SCHEMA.split(", "))
        ),
        spark.createDataFrame(
            [(1, 7, "shipped", 10.0, 2), (2, 7, "paid", 5.0, 1), (4, 8, "paid", 2.5, 1)],
            ORDER_SCHEMA,
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    assert_df_equality(
        quarantine(spark, settings, name).select("offset", "failed_rules", "parse_error"),
        spark.createDataFrame(
            [(2, ["amount_not_negative"], None), (3, ["parsable"], "invalid_json")],
            "offset long, failed_rules array<string>, parse_error string",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_results_and_data_docs_of_a_remote_root_live_under_it_and_accumulate(
    spark: SparkSession, on_hdfs: Settings
) -> None:
    name, settings = declare(on_hdfs, "append", ORDER_COLUMNS, expectations=ORDER_RULES)
    gx = f"{settings.storage.root}/_system/great_expectations"
    write(spark, settings, name, [(1, "paid", Decimal("10.00"), 100, None)], ORDER_COLUMNS)
    first = validate(spark, settings, name)
    write(spark, settings, name, [(2, "lost", Decimal("-1.00"), 101, None)], ORDER_COLUMNS)
    second = validate(spark, settings, name)

    assert (first.success, first.version, second.success, second.version) == (True, 0, False, 1)
    docs = f"{gx}/uncommitted/data_docs/local_site/index.html"
    assert first.data_docs == second.data_docs == docs
    for report, success in ((first, True), (second, False)):
        run = f"{gx}/uncommitted/validations/silver/{name}/version-{report.version}/"
        assert report.result_path.startswith(run), report.result_path
        stored = json.loads(fs.read_text(spark, report.result_path))
        assert (stored["suite_name"], stored["success"]) == (f"silver.{name}", success)
    # The second run's index still lists the first run: the project was carried over.
    index = fs.read_text(spark, docs)
    assert f"silver.{name}" in index
    assert "version-0" in index
    assert "version-1" in index
    logged = system.read_log(spark, settings, system.VALIDATION_LOG, f"silver.{name}")
    assert sorted(r["result_path"] for r in logged) == sorted(
        [first.result_path, second.result_path]
    )
    # Nothing of it on the driver's disk.
    local = project_root() / ".lakehouse" / "gx" / "uncommitted" / "validations" / "silver"
    assert not (local / name).exists()
