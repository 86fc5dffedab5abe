"""Every job spark-submitted to a real Spark standalone cluster, as the README tells a user
to: `spark-submit --master spark://... $(lakehouse spark-submit-args) jobs/<job>.py`. The
executors run the system's `python3` with no venv in sight and import the library from the
archive spark-submit ships; the driver runs where there is no dev stack (a configuration
without `postgres` and `connect` sections, no `.env`, no `POSTGRES_PASSWORD`, a source's secret
it does not need unset)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import kafka
from lakehouse.core.current import current_rows
from lakehouse.core.settings import Settings, project_root
from lakehouse.devstack import cluster
from tests.bronze.helpers import new_source
from tests.jobs.helpers import conf_overlay
from tests.silver.helpers import ORDER_SCHEMA, produce

BIN = Path(sys.executable).parent

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
H_MS = 3_600_000
NOW = "2026-01-01T04:01:00Z"  # buckets [00:00, 02:00) and [02:00, 04:00) are closed


def order(order_id: int, customer: int, amount: float, hours: float) -> dict[str, object]:
    ts = T0_MS + int(hours * H_MS)
    return {
        "order_id": order_id,
        "customer_id": customer,
        "order_status": "paid",
        "amount": amount,
        "ts": ts,
    }


def envelope(op: str, lsn: int, after: dict[str, object]) -> bytes:
    source = {"lsn": lsn, "ts_ms": T0_MS + lsn, "schema": "public", "table": "t"}
    return json.dumps({"before": None, "after": after, "source": source, "op": op}).encode()


def job_env(tmp_path: Path, settings: Settings, conf: Path) -> dict[str, str]:
    home = tmp_path / "home"  # no .env here, so nothing brings the password in
    home.mkdir()
    # Nor does the driver name a Python for the executors: they use their own `python3`.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"POSTGRES_PASSWORD", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
    }
    env.update(
        {
            # What `source .venv/bin/activate` does, as the README asks before spark-submit
            # (its launcher finds Spark through the `python3` on PATH).
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(BIN.parent),
            "LAKEHOUSE_HOME": str(home),
            "LAKEHOUSE_CONF_DIR": str(conf),
            "LAKEHOUSE__STORAGE__ROOT": settings.storage.root,
            # The JVM packages resolved by the set-up (a cluster has its own --packages).
            "LAKEHOUSE__SPARK__IVY_DIR": str(project_root() / ".lakehouse" / "ivy"),
        }
    )
    return env


@pytest.fixture
def spark_cluster(settings: Settings) -> Iterator[str]:
    """The dev stack's standalone cluster (master + one worker on loopback), stopped after."""
    cluster.start_cluster(settings)
    try:
        yield cluster.MASTER_URL
    finally:
        cluster.stop_cluster(settings)


def spark_submit(
    master: str, job: str, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The README's command line: the options come from `lakehouse spark-submit-args`."""
    printed = subprocess.run(
        [str(BIN / "lakehouse"), "--env", "test", "spark-submit-args"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    command = [str(BIN / "spark-submit"), "--master", master, *shlex.split(printed)]
    return subprocess.run(
        [*command, str(project_root() / "jobs" / f"{job}.py"), "--env", "test", *args],
        env=env,
        cwd=env["LAKEHOUSE_HOME"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def finished_apps() -> list[str]:
    """The names of the applications the master saw finish."""
    state = cluster.master_state() or {}
    apps = state.get("completedapps", [])
    assert isinstance(apps, list)
    return [str(app["name"]) for app in apps]


def test_every_job_runs_spark_submitted_to_a_standalone_cluster_without_the_dev_stack(
    spark: SparkSession, kafka_up: Settings, spark_cluster: str, tmp_path: Path
) -> None:
    events, topic, settings = new_source(kafka_up)
    produce(
        settings,
        topic,
        # Order 3 brings a field the schema lacks: evolving the table infers its type in
        # Python on the executors (an RDD of the records' text).
        [order(1, 2, 5.0, 0.5), order(2, 2, 7.0, 2.5), {**order(3, 3, 1.0, 4.5), "coupon": "C3"}],
    )
    cdc, cdc_topic, settings = new_source(settings, kind="cdc")
    kafka.produce(
        settings.kafka,
        cdc_topic,
        [
            (b'{"id": 1}', envelope("c", 100, {"id": 1, "name": "ada"}), 0),
            (b'{"id": 1}', envelope("u", 110, {"id": 1, "name": "ada2"}), 0),
            (b'{"id": 2}', envelope("c", 120, {"id": 2, "name": "bob"}), 0),
        ],
    )
    orders, people = f"nodev_{events}", f"nodev_{cdc}"
    offline, view, gold = f"{orders}_offline", f"{orders}_hybrid", f"{orders}_revenue"
    conf = conf_overlay(
        tmp_path,
        {
            "sources": {
                events: {"kind": "events", "topics": [topic]},
                cdc: {"kind": "cdc", "topics": [cdc_topic]},
                # A source whose secret this machine lacks: only its own jobs may need it.
                f"{events}_locked": {
                    "kind": "events",
                    "topics": [f"{topic}-locked"],
                    "kafka_options": {"sasl.password": "${NODEV_UNSET_KAFKA_SECRET}"},
                },
            },
            "silver": {
                orders: {
                    "source": events,
                    "mode": "append",
                    "schema": ORDER_SCHEMA,
                    "schema_drift": "evolve",
                },
                people: {
                    "source": cdc,
                    "mode": "scd1",
                    "schema": "id INT, name STRING",
                    "keys": ["id"],
                },
            },
            "offline": {
                offline: {
                    "realtime": orders,
                    "time_column": "ts",
                    "time_format": "epoch_ms",
                    "bucket": "2h",
                    "buffer": "1m",
                    "hybrid_view": view,
                }
            },
            "gold": {
                gold: {
                    "source": view,
                    "group_by": {"customer_id": "customer_id"},
                    "aggregates": {"revenue": "sum(amount)", "orders": "count(*)"},
                }
            },
        },
        devstack=False,
    )
    fix = tmp_path / "fix.jsonl"
    # Order 1 re-priced; a backfill's input names every column, the evolved one too.
    fix.write_text(json.dumps({**order(1, 2, 6.0, 0.5), "coupon": None}) + "\n")
    env = job_env(tmp_path, settings, conf)

    for job, args in (
        ("ingest_events", ["--source", events]),
        ("ingest_cdc", ["--source", cdc]),
        ("refine_silver", ["--table", orders]),
        ("refine_silver", ["--table", people]),
        ("realtime_to_offline", ["--table", offline, "--now", NOW]),
        (
            "backfill",
            [
                "--table",
                offline,
                "--input",
                str(fix),
                "--from",
                "2026-01-01T00:00Z",
                "--to",
                "2026-01-01T02:00Z",
                "--now",
                NOW,
            ],
        ),
        ("build_gold", ["--table", gold]),
    ):
        done = spark_submit(spark_cluster, job, args, env)
        # spark-submit merges the Python driver's stderr into its stdout (PythonRunner).
        assert done.returncode == 0, f"{job}: {done.stdout[-3000:]}"
    # Each ran on the cluster (a local master would never reach it), in this order.
    jobs = ["ingest_events", "ingest_cdc", "refine_silver", "refine_silver"]
    jobs += ["realtime_to_offline", "backfill", "build_gold"]
    assert finished_apps() == [f"{job}.py" for job in jobs]

    def table(layer: str, name: str) -> DataFrame:
        return spark.read.format("delta").load(settings.storage.path(layer, name))

    assert_df_equality(
        current_rows(table("silver", people)),
        spark.createDataFrame([(1, "ada2"), (2, "bob")], "id INT, name STRING"),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_columns=["_rescued_data"],
    )
    assert_df_equality(
        table("silver", orders).select("order_id", "coupon"),
        spark.createDataFrame([(1, None), (2, None), (3, "C3")], "order_id BIGINT, coupon STRING"),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    offline_ids = table("offline", offline).select("order_id", "amount").orderBy("order_id")
    assert [tuple(r) for r in offline_ids.collect()] == [(1, 6.0), (2, 7.0)]
    assert_df_equality(
        table("gold", gold).select("customer_id", "revenue", "orders"),
        spark.createDataFrame(
            [(2, 13.0, 2), (3, 1.0, 1)], "customer_id BIGINT, revenue DOUBLE, orders BIGINT"
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )
