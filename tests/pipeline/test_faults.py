"""The whole sample pipeline running continuously while things fail (#22): every job in
`--trigger continuous` as its own process, an orders producer and a PostgreSQL workload
running throughout, random SIGKILLs of the jobs (each restarted after a random delay), the
Kafka broker stopped and started, the Kafka Connect worker restarted (Debezium re-sends) and a
backfill of a closed window in the middle. Then the pipeline is drained and every layer is
checked against the workloads' own models and PostgreSQL: nothing lost, nothing twice.

It restarts the broker the whole suite shares, so it runs alone, after the rest (marker
`exclusive`; `./dev test` runs those in a second pass)."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.bronze.ingest import IngestOptions, ingest
from lakehouse.core import kafka, tables
from lakehouse.core.settings import Settings, load_settings
from lakehouse.devstack.chaos import Action, Job, Supervisor, chaos
from lakehouse.devstack.connect import start_connect, stop_connect
from lakehouse.devstack.kafka import start_kafka, stop_kafka
from lakehouse.devstack.sample_pipeline import (
    CUSTOMER_DDL,
    CUSTOMER_SCHEMA,
    ORDER_SCHEMA,
    Names,
    pipeline_conf,
    pipeline_jobs,
)
from lakehouse.devstack.workload import CustomersWorkload, OrdersWorkload, now_ms
from lakehouse.gold.build import GoldOptions, build_gold, gold_path
from lakehouse.offline import hybrid
from lakehouse.offline.backfill import BackfillOptions
from lakehouse.offline.backfill import backfill as backfill_job
from lakehouse.offline.buckets import EPOCH
from lakehouse.offline.move import MoveOptions, move_all
from lakehouse.silver.refine import RefineOptions, refine
from lakehouse.silver.scd2 import history_rows
from lakehouse.status import bronze_summary, gold_summary, silver_summary
from tests.conftest import pg_connect
from tests.jobs.helpers import conf_overlay, overlay_env
from tests.pipeline.helpers import (
    GOLD_SCHEMA,
    current,
    exactly_once,
    gold_model,
    order_tuples,
    same_rows,
    wait_for,
)
from tests.silver.helpers import debezium_table

pytestmark = pytest.mark.exclusive

CHAOS_S = 200.0
KILLS = 20  # at least, and at most 4 more
# A kill at most every 9 s: 22 of them fit in CHAOS_S whatever the draws (a job is always
# running to kill: seven run, each restarted within 8 s).
KILL_EVERY_S = (4.0, 9.0)
ORDERS_PER_S = 40.0
CHANGES_PER_S = 4.0
BROKER_DOWN_S = 8.0
SEED = 22
JOBS_NICE = 10  # the backfill and the workloads in this process come first (Supervisor)
ORDER_COLUMNS = [c.split()[0] for c in ORDER_SCHEMA.split(", ")]
CUSTOMER_COLUMNS = [c.split()[0] for c in CUSTOMER_SCHEMA.split(", ")]
KAFKA_READERS = ("ingest_events", "ingest_cdc")


def zone_window() -> tuple[int, int]:
    """A closed 15-minute bucket two days ago: the window the backfill replaces."""
    quarter = 15 * 60_000
    start = (now_ms() - 2 * 86_400_000) // quarter * quarter
    return start, start + quarter


def test_the_pipeline_under_kills_outages_and_a_backfill_loses_and_doubles_nothing(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    with debezium_table(kafka_up, [CUSTOMER_DDL]) as pg:
        names = Names(uuid.uuid4().hex[:8])
        topic = f"faults-{names.tag}"
        kafka.ensure_topic(kafka_up.kafka, topic, partitions=2)
        conf = conf_overlay(tmp_path, pipeline_conf(names, topic, pg.topic))
        settings = load_settings("test", conf, {"storage.root": str(tmp_path / "lake")})
        env = overlay_env(settings, conf)
        zone = zone_window()
        began = time.monotonic()

        def phase(what: str) -> None:
            print(f"{time.monotonic() - began:6.1f} s  {what}", flush=True)

        rng = random.Random(SEED)  # noqa: S311 - test schedule
        orders = OrdersWorkload(settings, topic, ORDERS_PER_S, SEED, zone)
        customers = CustomersWorkload(settings, pg.table, CHANGES_PER_S, SEED)
        supervisor = Supervisor(pipeline_jobs(names, tmp_path / "logs"), env, "test", JOBS_NICE)
        stop = threading.Event()
        workers = [
            threading.Thread(target=w.run, args=(stop,), daemon=True) for w in (orders, customers)
        ]
        outage: list[float] = []
        corrected: list[dict[str, object]] = []

        def restart_broker() -> None:
            outage.append(supervisor.elapsed())
            stop_kafka(settings)
            time.sleep(BROKER_DOWN_S)
            start_kafka(settings)
            outage.append(supervisor.elapsed())

        def restart_connect() -> None:
            stop_connect(settings)
            start_connect(settings)
            pg.register_again(settings)  # a standalone worker forgets its connectors

        def close_zone() -> None:
            orders.zone_open = False

        def backfill() -> None:
            # The window's orders as the producer last wrote them, every amount corrected,
            # one order dropped: the offline window becomes exactly this, while the move job
            # runs on (a move racing the backfill must not undo it: tests/offline/test_races).
            rows = sorted(orders.zone_orders(), key=lambda o: o["order_id"])[1:]
            corrected.extend({**o, "amount": o["amount"] + 1} for o in rows)
            path = tmp_path / "corrections.jsonl"
            path.write_text(
                "".join(json.dumps({**o, "amount": str(o["amount"])}) + "\n" for o in corrected)
            )
            # The job's library call in this process (warm JVM): as a subprocess, the
            # backfill took minutes on two cores shared with seven job JVMs.
            start, end = (EPOCH + timedelta(milliseconds=t) for t in zone)
            options = BackfillOptions(
                names.offline, str(path), start, end, reason="fault test: amounts corrected"
            )
            print(backfill_job(spark, settings, options).render())

        actions = [
            Action(0.1 * CHAOS_S, "zone closed", close_zone),
            Action(0.2 * CHAOS_S, "Kafka broker restarted", restart_broker),
            Action(0.3 * CHAOS_S, "backfill", backfill),
            Action(0.5 * CHAOS_S, "Kafka Connect restarted", restart_connect),
        ]
        for worker in workers:
            worker.start()
        try:
            supervisor.start_stages(stages(spark, settings, names, supervisor.jobs))
            phase("jobs started")
            report = chaos(
                supervisor, CHAOS_S, rng, actions, kill_every_s=KILL_EVERY_S, max_kills=KILLS + 4
            )
            phase(f"chaos done: {report}")
            assert not report.failures, report.failures
        finally:
            supervisor.kill_all()  # the last kill: the drain starts from a crash
            stop.set()
            for worker in workers:
                worker.join(timeout=150)
        assert not any(w.is_alive() for w in workers), "a workload did not stop"

        phase("jobs stopped")
        assert not orders.errors, orders.errors[:5]
        drain(spark, settings, names, customers)
        phase("drained")

        # Nothing died but for our kills (a Kafka reader may stop during the outage).
        unexpected = [
            (job.name, e)
            for job in supervisor.jobs
            for e in job.exits
            if not (job.script in KAFKA_READERS and outage[0] <= e.at_s <= outage[1] + 60)
        ]
        assert not unexpected, unexpected

        checked = exactly_once(spark, settings, names.orders, topic)
        checked += exactly_once(spark, settings, names.customers, pg.topic)

        live = orders.model.live()
        deleted = len(orders.model.latest()) - len(live)
        same_rows(
            current(spark, settings, "silver", names.orders).select(*ORDER_COLUMNS),
            spark.createDataFrame(order_tuples(live), ORDER_SCHEMA),
        )
        with pg_connect(settings) as conn:
            in_postgres = conn.execute(
                f"SELECT {', '.join(CUSTOMER_COLUMNS)} FROM public.{pg.table}"
            ).fetchall()
        expected_customers = spark.createDataFrame(in_postgres, CUSTOMER_SCHEMA)
        same_rows(
            current(spark, settings, "silver", names.customers).select(*CUSTOMER_COLUMNS),
            expected_customers,
        )
        same_rows(
            current(spark, settings, "silver", names.history).select(*CUSTOMER_COLUMNS),
            expected_customers,
        )
        history = history_rows(
            spark.read.format("delta").load(settings.storage.path("silver", names.history))
        )
        same_rows(
            history.select("customer_id", "name", "email", "country", F.col("__end_seq").isNull()),
            spark.createDataFrame(
                customers.expected_history(),
                "customer_id INT, name STRING, email STRING, country STRING, open BOOLEAN",
            ).withColumnRenamed("open", "(__end_seq IS NULL)"),
        )

        start, end = zone
        served = [o for o in live if not start <= o["ts"] < end] + corrected
        same_rows(
            hybrid.read_hybrid(spark, settings, names.offline).select(*ORDER_COLUMNS),
            spark.createDataFrame(order_tuples(served), ORDER_SCHEMA),
        )
        same_rows(
            spark.read.format("delta")
            .load(gold_path(settings, names.gold))
            .select("day", "customer_id", "revenue", "orders"),
            spark.createDataFrame(gold_model(served), GOLD_SCHEMA),
        )
        nothing_pending(spark, settings, names)

        print(
            f"\nkills {report.kills}, restarts after an exit {report.restarts}, "
            f"{', '.join(report.actions)}; orders produced {orders.produced} "
            f"({len(live)} orders, {deleted} deleted, {len(corrected)} backfilled), PostgreSQL "
            f"changes {customers.changes}; "
            f"Kafka offsets checked {checked}"
        )
        assert report.kills >= KILLS, report
        assert len(corrected) > 0, "the backfill window got no orders"
        assert deleted > 0, "no order ended deleted"


def stages(
    spark: SparkSession, settings: Settings, names: Names, jobs: list[Job]
) -> list[tuple[list[Job], Callable[[], bool]]]:
    """The pipeline's stages (ingest, refine, then offline and gold), each ready once the
    tables its jobs create exist."""

    def exist(*paths: str) -> Callable[[], bool]:
        return lambda: all(tables.exists(spark, path) for path in paths)

    path = settings.storage.path
    bronze = exist(path("bronze", names.orders), path("bronze", names.customers))
    silver = exist(*(path("silver", t) for t in (names.orders, names.customers, names.history)))
    # pipeline_jobs' order: two ingests, three refines, the move and the gold build
    return [
        (jobs[:2], bronze),
        (jobs[2:5], silver),
        (jobs[5:], exist(gold_path(settings, names.gold))),
    ]


def drain(
    spark: SparkSession, settings: Settings, names: Names, customers: CustomersWorkload
) -> None:
    """Everything produced through every layer: a last PostgreSQL change marks the end of
    Debezium's stream (it arrives after every earlier commit), then one available-now run of
    each job, in pipeline order."""
    with pg_connect(settings) as conn:
        marker = customers.insert(conn)

    def marker_in_silver() -> bool:
        ingest(spark, settings, IngestOptions(names.customers), "cdc")
        refine(spark, settings, RefineOptions(names.customers))
        rows = current(spark, settings, "silver", names.customers)
        return rows.where(F.col("customer_id") == marker).count() > 0

    wait_for("Debezium's last change in silver", marker_in_silver)
    ingest(spark, settings, IngestOptions(names.orders), "events")
    for table in (names.orders, names.customers, names.history):
        refine(spark, settings, RefineOptions(table))
    move_all(spark, settings, MoveOptions(names.offline))  # as the job: a crashed move too
    build_gold(spark, settings, GoldOptions(names.gold))


def nothing_pending(spark: SparkSession, settings: Settings, names: Names) -> None:
    """`lakehouse status`: no gap recorded, no silver lag or quarantine, gold caught up."""
    bronze = {r["source"]: r for r in bronze_summary(spark, settings).collect()}
    for source in (names.orders, names.customers):
        assert bronze[source]["gaps_recorded"] == 0, bronze[source]
    silver = {r["table"]: r for r in silver_summary(spark, settings).collect()}
    for table in (names.orders, names.customers, names.history):
        row = silver[f"silver.{table}"]
        assert (row["lag_commits"], row["quarantined_pending"]) == (0, 0), row
    gold = {r["table"]: r for r in gold_summary(spark, settings).collect()}
    assert gold[f"gold.{names.gold}"]["source_lag"] == 0, gold[f"gold.{names.gold}"]
