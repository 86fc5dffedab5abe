"""`refine_silver` as the scheduler runs it: a `fail` expectation ends the job with exit 5 and
a last line naming the rule, the count and a sample; nothing of the batch is committed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml
from pyspark.sql import SparkSession

from lakehouse.core.errors import EXIT_CONTRACT
from lakehouse.core.settings import Settings, project_root
from tests.bronze.helpers import new_source, run_ingest, run_job
from tests.silver.helpers import ORDER_SCHEMA, produce


def test_fail_expectation_exits_5_and_commits_nothing(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    produce(
        settings,
        topic,
        [
            {"order_id": 1, "customer_id": 1, "order_status": "paid", "amount": 5.0, "ts": 1},
            {"order_id": 2, "customer_id": 1, "order_status": "paid", "amount": -3.0, "ts": 2},
        ],
    )
    run_ingest(spark, settings, source)
    name = "job_" + source
    # The table is declared in a conf overlay: expectations are lists, which environment
    # variables cannot carry.
    conf = tmp_path / "conf"
    shutil.copytree(project_root() / "conf", conf, ignore=shutil.ignore_patterns("local"))
    table = {
        "source": source,
        "mode": "append",
        "schema": ORDER_SCHEMA,
        "expectations": [{"name": "amount_not_negative", "sql": "amount >= 0", "action": "fail"}],
    }
    (conf / "test" / "job.yml").write_text(
        yaml.safe_dump(
            {"sources": {source: {"kind": "events", "topics": [topic]}}, "silver": {name: table}}
        )
    )
    env = dict(os.environ)
    env.update({"LAKEHOUSE__STORAGE__ROOT": settings.storage.root, "LAKEHOUSE_CONF_DIR": str(conf)})

    done = run_job("refine_silver", ["--table", name], env)

    assert done.returncode == EXIT_CONTRACT, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("refine_silver: expectation 'amount_not_negative' (action fail) failed")
    assert "for 1 row(s); nothing of this batch was committed" in last
    assert "'order_id': 2" in last  # the sample row
    # Nothing of the batch: the job creates silver and the metrics table before its first
    # batch; neither holds a row of this table.
    silver = spark.read.format("delta").load(settings.storage.path("silver", name))
    metrics = spark.read.format("delta").load(
        settings.storage.path("_system", "expectation_metrics")
    )
    assert (silver.count(), metrics.where(f"table = '{name}'").count()) == (0, 0)
