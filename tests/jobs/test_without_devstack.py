"""The jobs run where there is no dev stack: a configuration without `postgres` and `connect`
sections, no `.env` and no `POSTGRES_PASSWORD` (a cluster node, a scheduler's worker)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings, project_root
from tests.bronze.helpers import new_source, run_job
from tests.silver.helpers import ORDER_SCHEMA, produce


def conf_without_devstack(tmp_path: Path, extra: dict[str, object]) -> Path:
    conf = tmp_path / "conf"
    shutil.copytree(project_root() / "conf", conf, ignore=shutil.ignore_patterns("local"))
    base = conf / "base" / "lakehouse.yml"
    sections = yaml.safe_load(base.read_text())
    del sections["postgres"], sections["connect"]
    base.write_text(yaml.safe_dump(sections))
    (conf / "test" / "job.yml").write_text(yaml.safe_dump(extra))
    return conf


def test_ingest_and_refine_run_without_postgres_settings_or_password(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source, topic, settings = new_source(kafka_up)
    produce(
        settings,
        topic,
        [{"order_id": 1, "customer_id": 2, "order_status": "paid", "amount": 5.0, "ts": 1}],
    )
    name = "nodev_" + source
    conf = conf_without_devstack(
        tmp_path,
        {
            "sources": {source: {"kind": "events", "topics": [topic]}},
            "silver": {name: {"source": source, "mode": "append", "schema": ORDER_SCHEMA}},
        },
    )
    home = tmp_path / "home"  # no .env here, so nothing brings the password in
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "POSTGRES_PASSWORD"}
    env.update(
        {
            "LAKEHOUSE_HOME": str(home),
            "LAKEHOUSE_CONF_DIR": str(conf),
            "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
            # The JVM packages resolved by the set-up (a cluster has its own --packages).
            "LAKEHOUSE__SPARK__IVY_DIR": str(project_root() / ".lakehouse" / "ivy"),
        }
    )

    for job, args in (
        ("ingest_events", ["--source", source]),
        ("refine_silver", ["--table", name]),
    ):
        done = run_job(job, args, env)
        assert done.returncode == 0, done.stderr[-3000:]

    assert_df_equality(
        spark.read.format("delta").load(settings.storage.path("silver", name)),
        spark.createDataFrame(
            [(1, 2, "paid", 5.0, 1, None)], f"{ORDER_SCHEMA}, _rescued_data STRING"
        ),
        ignore_nullable=True,
    )
