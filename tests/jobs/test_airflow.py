"""The pipeline scheduled by Apache Airflow as a user deploys it: Airflow in its own venv
(`./dev airflow`), the DAGs of `deploy/airflow/`, and `airflow dags test` running one pipeline
run against the real services, each job through spark-submit with the options
`lakehouse spark-submit-args` prints. Afterwards every task succeeded in stage order and the
tables hold what the produced events say: silver, gold and the offline layer."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import current, kafka
from lakehouse.core.config import project_root
from lakehouse.core.settings import Settings, load_settings
from lakehouse.gold.build import gold_path
from lakehouse.offline import boundary, store
from lakehouse.silver.plan import silver_path
from tests.jobs.helpers import conf_overlay

AIRFLOW = project_root() / ".lakehouse" / "airflow" / "venv" / "bin" / "airflow"
DAGS = project_root() / "deploy" / "airflow"
STAGES = ("ingest", "refine", "gold", "offline")  # each starts when the one before is done
TASKS = [
    "ingest.ingest_cdc.customers",
    "ingest.ingest_events.lineitem",
    "ingest.ingest_events.orders",
    "refine.refine_silver.customers",
    "refine.refine_silver.customers_history",
    "refine.refine_silver.orders",
    "gold.build_gold.daily_revenue",
    "offline.realtime_to_offline.orders_offline",
]


def ms(year: int, month: int, day: int, hour: int) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


EVENTS = [
    {
        "order_id": 1,
        "customer_id": 7,
        "order_status": "paid",
        "amount": "10.50",
        "ts": ms(2026, 1, 5, 10),
    },
    {
        "order_id": 2,
        "customer_id": 7,
        "order_status": "paid",
        "amount": 4.5,
        "ts": ms(2026, 1, 5, 11),
    },
    {
        "order_id": 3,
        "customer_id": 8,
        "order_status": "created",
        "amount": 20,
        "ts": ms(2026, 1, 6, 9),
    },
    {
        "order_id": 1,
        "customer_id": 7,
        "order_status": "shipped",
        "amount": "10.50",
        "ts": ms(2026, 1, 5, 12),
    },
    {
        "order_id": 4,
        "customer_id": 9,
        "order_status": "paid",
        "amount": -1,
        "ts": ms(2026, 1, 6, 10),
    },
]


def airflow(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AIRFLOW), *args], env=env, capture_output=True, text=True, timeout=900, check=False
    )


def listed(done: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    """The JSON a listing command prints last (Airflow's warnings come before it)."""
    assert done.returncode == 0, done.stderr[-3000:]
    rows: list[dict[str, str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def test_airflow_runs_the_pipeline_stage_by_stage_and_the_tables_are_right(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    assert AIRFLOW.exists(), (
        f"{AIRFLOW} missing: `./dev airflow` sets Airflow up (`./dev test` does)"
    )
    tag = uuid.uuid4().hex[:8]
    orders, lineitem, prefix = f"af-orders-{tag}", f"af-lineitem-{tag}", f"af{tag}"
    customers = f"{prefix}.public.customers"
    conf = conf_overlay(
        tmp_path,
        {
            "sources": {
                "orders": {"topics": [orders]},
                "lineitem": {"topics": [lineitem]},
                "customers": {"topics": [customers], "connector": {"topic_prefix": prefix}},
            }
        },
    )
    lake = tmp_path / "lake"
    settings = load_settings("test", conf, {"storage.root": str(lake)})
    for topic in (orders, lineitem, customers):
        kafka.ensure_topic(settings.kafka, topic)
    kafka.produce(settings.kafka, orders, [(None, json.dumps(e).encode(), 0) for e in EVENTS])
    home = tmp_path / "airflow"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_LAKEHOUSE": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "LAKEHOUSE_ENV": "test",
        "LAKEHOUSE_CONF_DIR": str(conf),
        "LAKEHOUSE__STORAGE__ROOT": str(lake),
        "LAKEHOUSE_TASK_RETRIES": "0",
    }

    migrated = airflow(["db", "migrate"], env)
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    ran = airflow(["dags", "test", "lakehouse_pipeline"], env)
    assert ran.returncode == 0, ran.stdout[-5000:] + ran.stderr[-3000:]

    runs = airflow(["dags", "list-runs", "lakehouse_pipeline", "-o", "json"], env)
    (run,) = listed(runs)
    assert run["state"] == "success"
    states = airflow(
        ["tasks", "states-for-dag-run", "lakehouse_pipeline", run["run_id"], "-o", "json"], env
    )
    tasks = listed(states)
    assert sorted((t["task_id"], t["state"]) for t in tasks) == [
        (t, "success") for t in sorted(TASKS)
    ]
    stages = [[t for t in tasks if t["task_id"].startswith(f"{s}.")] for s in STAGES]
    for before, after in itertools.pairwise(stages):
        assert max(t["end_date"] for t in before) <= min(t["start_date"] for t in after)

    # Silver: the latest version of each order; order 4 (negative amount) quarantined.
    silver = current.current_rows(spark.read.format("delta").load(silver_path(settings, "orders")))
    expected_silver = spark.createDataFrame(
        [
            (1, 7, "shipped", Decimal("10.50"), ms(2026, 1, 5, 12)),
            (2, 7, "paid", Decimal("4.50"), ms(2026, 1, 5, 11)),
            (3, 8, "created", Decimal("20.00"), ms(2026, 1, 6, 9)),
        ],
        "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), ts BIGINT",
    )
    assert_df_equality(
        silver.select(*expected_silver.columns),
        expected_silver,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Gold: revenue and orders per UTC day and customer.
    gold = spark.read.format("delta").load(gold_path(settings, "daily_revenue"))
    expected_gold = spark.createDataFrame(
        [
            (date(2026, 1, 5), 7, Decimal("15.00"), 2),
            (date(2026, 1, 6), 8, Decimal("20.00"), 1),
        ],
        "day DATE, customer_id BIGINT, revenue DECIMAL(22,2), orders BIGINT",
    )
    assert_df_equality(
        gold.select(*expected_gold.columns),
        expected_gold,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Offline: the buckets closed months ago moved, and the boundary after them.
    offline = spark.read.format("delta").load(store.offline_path(settings, "orders_offline"))
    assert sorted(r["order_id"] for r in offline.collect()) == [1, 2, 3]
    moved = boundary.current(spark, settings, "orders_offline")
    assert moved is not None
    assert moved.boundary > datetime(2026, 1, 6, 10)
