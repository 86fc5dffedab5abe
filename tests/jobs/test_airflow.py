"""The pipeline scheduled by Apache Airflow on a real Spark standalone cluster, as a user
deploys it: Airflow in its own venv (`./dev airflow`), the DAGs of `deploy/airflow/`, and
`airflow dags test` running one pipeline run and one backfill, each job spark-submitted to the
cluster (master + one worker on loopback) with the options `lakehouse spark-submit-args`
prints. The executors run the system's `python3` with no venv in sight and import the library
from the archive spark-submit ships; the configuration has no dev-stack sections (`postgres`,
`connect`) and the jobs get no POSTGRES_PASSWORD. Afterwards every task succeeded in stage
order, every job ran on the cluster, and the tables hold what the produced records say: silver
from events (a column evolved on the executors) and from CDC, gold, and the offline table with
the backfill's correction."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import current, kafka
from lakehouse.core.config import project_root
from lakehouse.core.settings import Settings, load_settings
from lakehouse.devstack import cluster
from lakehouse.gold.build import gold_path
from lakehouse.offline import boundary, store
from lakehouse.silver.plan import silver_path
from tests.bronze.helpers import SHORT_JVM_OPTIONS, short_lived
from tests.jobs.helpers import conf_overlay

AIRFLOW = project_root() / ".lakehouse" / "airflow" / "venv" / "bin" / "airflow"
DAGS = project_root() / "deploy" / "airflow"
STAGES = ("ingest", "refine", "gold", "offline")  # each starts when the one before is done
TASKS = [
    "ingest.ingest_cdc.customers",
    "ingest.ingest_events.orders",
    "refine.refine_silver.customers",
    "refine.refine_silver.orders",
    "gold.build_gold.daily_revenue",
    "offline.realtime_to_offline.orders_offline",
]
# The applications the master saw, one per task and the backfill.
APPS = [task.split(".")[1] for task in TASKS] + ["backfill"]


def ms(year: int, month: int, day: int, hour: int) -> int:
    return int(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


def order(
    order_id: int, customer: int, status: str, amount: object, ts: int, **extra: object
) -> dict[str, object]:
    return {
        "order_id": order_id,
        "customer_id": customer,
        "order_status": status,
        "amount": amount,
        "ts": ts,
        **extra,
    }


EVENTS = [
    order(1, 7, "paid", "10.50", ms(2026, 1, 5, 10)),
    order(2, 7, "paid", 4.5, ms(2026, 1, 5, 11)),
    # A field the schema lacks: evolving the table infers its type in Python on the executors.
    order(3, 8, "created", 20, ms(2026, 1, 6, 9), coupon="C3"),
    order(1, 7, "shipped", "10.50", ms(2026, 1, 5, 12)),
    order(4, 9, "paid", -1, ms(2026, 1, 6, 10)),  # quarantined: a negative amount
]
# Order 2 re-priced by a backfill of [10:00, 12:00) on 2026-01-05; a backfill's input names
# every column, the evolved one too.
FIX = order(2, 7, "paid", "5.00", ms(2026, 1, 5, 11), coupon=None)


def envelope(op: str, lsn: int, after: dict[str, object]) -> bytes:
    """A Debezium change as the connector writes it with schemas off."""
    source = {"lsn": lsn, "ts_ms": ms(2026, 1, 5, 9) + lsn, "schema": "public", "table": "c"}
    return json.dumps({"before": None, "after": after, "source": source, "op": op}).encode()


def customer(customer_id: int, name: str) -> dict[str, object]:
    return {"customer_id": customer_id, "name": name, "email": f"{name}@x.io", "country": "UK"}


CHANGES = [
    (b'{"customer_id": 1}', envelope("c", 100, customer(1, "ada")), 0),
    (b'{"customer_id": 1}', envelope("u", 110, customer(1, "ada2")), 0),
    (b'{"customer_id": 2}', envelope("c", 120, customer(2, "bob")), 0),
]


@pytest.fixture
def spark_cluster(settings: Settings) -> Iterator[str]:
    """The dev stack's standalone cluster (master + one worker on loopback), stopped after."""
    cluster.start_cluster(settings)
    try:
        yield cluster.MASTER_URL
    finally:
        cluster.stop_cluster(settings)


def finished_apps() -> list[str]:
    """The names of the applications the master saw finish."""
    state = cluster.master_state() or {}
    apps = state.get("completedapps", [])
    assert isinstance(apps, list)
    return [str(app["name"]) for app in apps]


def airflow(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AIRFLOW), *args], env=env, capture_output=True, text=True, timeout=900, check=False
    )


def test_airflow_runs_the_pipeline_and_a_backfill_on_a_standalone_cluster(
    spark: SparkSession, kafka_up: Settings, spark_cluster: str, tmp_path: Path
) -> None:
    assert AIRFLOW.exists(), (
        f"{AIRFLOW} missing: `./dev airflow` sets Airflow up (`./dev test` does)"
    )
    tag = uuid.uuid4().hex[:8]
    orders, prefix = f"af-orders-{tag}", f"af{tag}"
    customers = f"{prefix}.public.customers"
    conf = conf_overlay(
        tmp_path,
        {
            "sources": {
                "orders": {"topics": [orders]},
                "customers": {"topics": [customers], "connector": {"topic_prefix": prefix}},
            },
            "silver": {"orders": {"schema_drift": "evolve"}},
            # The executors of these short applications JIT with C1 alone, as their drivers
            # do (tests/bronze/helpers.py, short_lived).
            "spark": {"conf": {"spark.executor.extraJavaOptions": SHORT_JVM_OPTIONS}},
        },
        devstack=False,
        # Two applications fewer (~90 s each): an ingest of an empty topic and an SCD2 refine
        # add no step kind the others do not run (test_pipeline checks the shipped plan).
        drop=("sources.lineitem", "silver.customers_history"),
    )
    lake = tmp_path / "lake"
    settings = load_settings("test", conf, {"storage.root": str(lake)})
    for topic in (orders, customers):
        kafka.ensure_topic(settings.kafka, topic)
    kafka.produce(settings.kafka, orders, [(None, json.dumps(e).encode(), 0) for e in EVENTS])
    kafka.produce(settings.kafka, customers, CHANGES)
    fix = tmp_path / "fix.jsonl"
    fix.write_text(json.dumps(FIX) + "\n")
    host, port = spark_cluster.rsplit(":", 1)
    env = short_lived(
        {
            **{
                k: v
                for k, v in os.environ.items()
                # Nor does the driver name a Python for the executors: they use their own python3.
                if not k.startswith("AIRFLOW")
                and k not in {"POSTGRES_PASSWORD", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
            },
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARK_LAKEHOUSE": json.dumps(
                {"conn_type": "spark", "host": host, "port": int(port)}
            ),
            "LAKEHOUSE_ENV": "test",
            "LAKEHOUSE_CONF_DIR": str(conf),
            "LAKEHOUSE__STORAGE__ROOT": str(lake),
            "LAKEHOUSE_TASK_RETRIES": "0",
        }
    )
    params = {
        "table": "orders_offline",
        "start": "2026-01-05T10:00Z",
        "end": "2026-01-05T12:00Z",
        "input": str(fix),
        "reason": "order 2 re-priced",
    }

    migrated = airflow(["db", "migrate"], env)
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    started = datetime.now(UTC)
    ran = airflow(["dags", "test", "lakehouse_pipeline"], env)
    finished = datetime.now(UTC)
    assert ran.returncode == 0, ran.stdout[-5000:] + ran.stderr[-3000:]
    pipeline_apps = finished_apps()
    backfilled = airflow(["dags", "test", "lakehouse_backfill", "-c", json.dumps(params)], env)
    assert backfilled.returncode == 0, backfilled.stdout[-5000:] + backfilled.stderr[-3000:]

    # Every job ran on the cluster (a local master would never reach it), the backfill last.
    assert Counter(pipeline_apps) == Counter(f"lakehouse-{app}" for app in APPS[:-1])
    assert finished_apps()[len(pipeline_apps) :] == ["lakehouse-backfill"]
    # The runs and task instances as Airflow recorded them (its SQLite database: three more
    # `airflow` CLIs would each import Airflow again).
    with closing(sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db")) as db:
        runs = db.execute("SELECT dag_id, run_id, state FROM dag_run").fetchall()
        assert sorted((dag, state) for dag, _, state in runs) == [
            ("lakehouse_backfill", "success"),
            ("lakehouse_pipeline", "success"),
        ]
        (run_id,) = [run for dag, run, _ in runs if dag == "lakehouse_pipeline"]
        columns = ("task_id", "state", "start_date", "end_date")
        tasks = [
            dict(zip(columns, row, strict=True))
            for row in db.execute(
                f"SELECT {', '.join(columns)} FROM task_instance WHERE dag_id = ? AND run_id = ?",
                ("lakehouse_pipeline", run_id),
            )
        ]
    assert sorted((t["task_id"], t["state"]) for t in tasks) == [
        (t, "success") for t in sorted(TASKS)
    ]
    stages = [[t for t in tasks if t["task_id"].startswith(f"{s}.")] for s in STAGES]
    for before, after in itertools.pairwise(stages):
        assert max(t["end_date"] for t in before) <= min(t["start_date"] for t in after)

    def table(path: str) -> DataFrame:
        return spark.read.format("delta").load(path)

    # Silver from events: the latest version of each order, the evolved coupon column; order
    # 4 (negative amount) quarantined.
    expected_silver = spark.createDataFrame(
        [
            (1, 7, "shipped", Decimal("10.50"), ms(2026, 1, 5, 12), None),
            (2, 7, "paid", Decimal("4.50"), ms(2026, 1, 5, 11), None),
            (3, 8, "created", Decimal("20.00"), ms(2026, 1, 6, 9), "C3"),
        ],
        "order_id BIGINT, customer_id BIGINT, order_status STRING, amount DECIMAL(12,2), "
        "ts BIGINT, coupon STRING",
    )
    silver = current.current_rows(table(silver_path(settings, "orders")))
    assert_df_equality(
        silver.select(*expected_silver.columns),
        expected_silver,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Silver from CDC: the current row of each customer.
    expected_customers = spark.createDataFrame(
        [(1, "ada2", "ada2@x.io"), (2, "bob", "bob@x.io")],
        "customer_id INT, name STRING, email STRING",
    )
    customers_now = current.current_rows(table(silver_path(settings, "customers")))
    assert_df_equality(
        customers_now.select(*expected_customers.columns),
        expected_customers,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Gold (built before the move and the backfill): revenue and orders per day and customer.
    expected_gold = spark.createDataFrame(
        [
            (date(2026, 1, 5), 7, Decimal("15.00"), 2),
            (date(2026, 1, 6), 8, Decimal("20.00"), 1),
        ],
        "day DATE, customer_id BIGINT, revenue DECIMAL(22,2), orders BIGINT",
    )
    assert_df_equality(
        table(gold_path(settings, "daily_revenue")).select(*expected_gold.columns),
        expected_gold,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    # Offline: the buckets closed months ago moved, order 2 as the backfill re-priced it.
    expected_offline = spark.createDataFrame(
        [(1, Decimal("10.50"), None), (2, Decimal("5.00"), None), (3, Decimal("20.00"), "C3")],
        "order_id BIGINT, amount DECIMAL(12,2), coupon STRING",
    )
    assert_df_equality(
        table(store.offline_path(settings, "orders_offline")).select(*expected_offline.columns),
        expected_offline,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    moved = boundary.current(spark, settings, "orders_offline")
    assert moved is not None
    assert moved.boundary in {newest_closed_end(started), newest_closed_end(finished)}


def newest_closed_end(at: datetime) -> datetime:
    """The boundary a move sets at `at` for orders_offline (2h buckets, 1m buffer): the end of
    the newest bucket closed by then, as naive UTC."""
    seconds = int(at.timestamp()) - 60
    return datetime.fromtimestamp(seconds - seconds % 7200, UTC).replace(tzinfo=None)
