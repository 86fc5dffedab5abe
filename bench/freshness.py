"""Freshness of the whole pipeline running continuously (#22): per record, the time from its
Kafka append (or its PostgreSQL commit) to the moment it is visible in bronze, silver and gold.

    .venv/bin/lakehouse services start all
    .venv/bin/python bench/freshness.py --rates 25,100,400,1600 --seconds 60 --interval "2 seconds"

The sample pipeline (a copy over its own topic, PostgreSQL table and tables: the fault test's
configuration) runs as it does in production: every job its own `--trigger continuous`
process, the streams at `--interval`, the gold build every `--gold-interval`, the move every
minute. An orders producer steps through `--rates` (new orders per second, `--seconds` each,
the pipeline drained between steps); a PostgreSQL writer commits `--pg-rate` inserts per
second throughout. Then every job stops and the figures are read from the tables themselves:

- Kafka append: the record's Kafka timestamp (CreateTime, stamped by the producer on this
  machine as it sends); PostgreSQL commit: the writer's clock when COMMIT returned;
- visible in bronze / silver: the timestamp of the Delta commit that brought the row (its
  Change Data Feed's `_commit_timestamp`, the commit file's time);
- visible in gold: the first gold commit whose recorded source state (`until`, in its commit
  metadata) includes the silver version that brought the order.

Per step it prints p50/p95/p99 of Kafka -> silver and Kafka -> gold, the medians of each hop
(where the time goes) and whether the lag grew during the step (the median of its last third of
orders against its first third): the sustainable rate is the highest step whose lag did not
grow.
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' conf overlay and Debezium table fixtures

from benchlib import SHIPPED_SPARK  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from lakehouse.core import kafka, tables  # noqa: E402
from lakehouse.core.settings import Settings, load_settings  # noqa: E402
from lakehouse.core.spark import build_session  # noqa: E402
from lakehouse.devstack.chaos import Job, Supervisor  # noqa: E402
from lakehouse.devstack.pg import connect as pg_connect  # noqa: E402
from lakehouse.devstack.sample_pipeline import (  # noqa: E402
    CUSTOMER_DDL,
    Names,
    pipeline_conf,
    pipeline_jobs,
)
from lakehouse.devstack.workload import now_ms  # noqa: E402
from lakehouse.gold.build import gold_path  # noqa: E402
from tests.jobs.helpers import conf_overlay, overlay_env  # noqa: E402
from tests.silver.helpers import debezium_table  # noqa: E402


@dataclass
class Step:
    rate: float
    first_id: int
    last_id: int = 0
    began: float = 0.0
    ended: float = 0.0


class Orders:
    """New orders (ids counting up, event time = now) at a settable rate."""

    def __init__(self, settings: Settings, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer(
            kafka.client_config(settings.kafka, **{"linger.ms": 5, "acks": "all"})
        )
        self.next_id = 1

    def run(self, rate: float, seconds: float) -> None:
        interval, due, end = 1.0 / rate, time.monotonic(), time.monotonic() + seconds
        while time.monotonic() < end:
            order_id, self.next_id = self.next_id, self.next_id + 1
            value = {
                "order_id": order_id,
                "customer_id": order_id % 20,
                "order_status": "created",
                "amount": f"{order_id % 500}.25",
                "ts": now_ms(),
            }
            self.producer.produce(
                self.topic, key=str(order_id).encode(), value=json.dumps(value).encode()
            )
            self.producer.poll(0)
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))
        if self.producer.flush(120):
            raise RuntimeError("orders not delivered")


class Customers:
    """One PostgreSQL insert per transaction, `rate` a second; the commit time of each."""

    def __init__(self, settings: Settings, table: str, rate: float) -> None:
        self.settings, self.table, self.rate = settings, table, rate
        self.committed: dict[int, int] = {}  # customer_id -> epoch ms after COMMIT returned

    def run(self, stop: threading.Event) -> None:
        with pg_connect(self.settings) as conn:
            key = 0
            while not stop.is_set():
                key += 1
                conn.execute(
                    f"INSERT INTO public.{self.table} VALUES (%s, %s, %s, %s, now())",
                    (key, f"name {key}", f"c{key}@example.com", "NL"),
                )
                self.committed[key] = now_ms()
                stop.wait(1.0 / self.rate)


def wait(
    supervisor: Supervisor, what: str, done: Callable[[], bool], timeout_s: float = 600.0
) -> None:
    """Until `done()`; a job that ended meanwhile is started again (and its exit kept)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        supervisor.restart_exited()
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(3.0)


def stages(jobs: Sequence[Job]) -> list[list[Job]]:
    """The jobs in the order a scheduler starts them: ingest, then refine, then the rest."""
    ingest = [j for j in jobs if j.script.startswith("ingest")]
    refine = [j for j in jobs if j.script == "refine_silver"]
    return [ingest, refine, [j for j in jobs if j not in ingest and j not in refine]]


def creates(settings: Settings, job: Job) -> list[str]:
    """The tables `job` creates (the next stage waits for them)."""
    name = job.name.split(".", 1)[1]
    if job.script.startswith("ingest"):
        return [settings.storage.path("bronze", name)]
    if job.script == "refine_silver":
        return [settings.storage.path("silver", name)]
    return [gold_path(settings, name)] if job.script == "build_gold" else []


def exist(spark: SparkSession, paths: list[str]) -> Callable[[], bool]:
    return lambda: all(tables.exists(spark, p) for p in paths)


def feed(spark: SparkSession, path: str) -> DataFrame:
    """The table's whole Change Data Feed."""
    return tables.change_feed(spark, path, -1, tables.latest_version(spark, path))


def percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        v = values[0] if values else float("nan")
        return v, v, v
    q = statistics.quantiles(values, n=100, method="inclusive")
    return q[49], q[94], q[98]


def ms(at: datetime) -> float:
    return at.timestamp() * 1000.0


def gold_visibility(spark: SparkSession, path: str) -> tuple[list[int], list[float]]:
    """(realtime versions, commit times): the i-th gold commit (by version) included realtime
    versions up to the running maximum of its `until`."""
    from delta.tables import DeltaTable

    if not tables.exists(spark, path):
        return [], []  # --lean: no gold build
    history = (
        DeltaTable.forPath(spark, path).history().select("version", "timestamp", "userMetadata")
    )
    reached: list[int] = []
    times: list[float] = []
    top = -1
    for row in sorted(history.collect(), key=lambda r: r["version"]):
        meta = json.loads(row["userMetadata"] or "{}").get("build_gold")
        if not meta:
            continue
        until = meta["until"]
        top = max(top, int(until.get("realtime", until.get("silver", -1)) or -1))
        reached.append(top)
        times.append(ms(row["timestamp"]))
    return reached, times


def analyse(
    spark: SparkSession, settings: Settings, names: Names, steps: list[Step], pg: Customers
) -> None:
    path = settings.storage.path
    bronze = feed(spark, path("bronze", names.orders)).select(
        F.col("key").cast("string").cast("long").alias("order_id"),
        F.col("kafka_timestamp").alias("kafka"),
        F.col("_commit_timestamp").alias("bronze"),
    )
    silver = (
        feed(spark, path("silver", names.orders))
        .where("_change_type = 'insert'")
        .groupBy("order_id")
        .agg(F.min("_commit_timestamp").alias("silver"), F.min("_commit_version").alias("v"))
    )
    rows = bronze.join(silver, "order_id").collect()
    reached, gold_times = gold_visibility(spark, gold_path(settings, names.gold))
    by_id: dict[int, tuple[float, float, float, float | None]] = {}
    for r in rows:
        i = bisect.bisect_left(reached, int(r["v"]))
        gold = gold_times[i] if i < len(gold_times) else None
        by_id[int(r["order_id"])] = (ms(r["kafka"]), ms(r["bronze"]), ms(r["silver"]), gold)
    print(
        "\n| orders/s | orders | achieved/s | Kafka->silver p50 | p95 | p99 | Kafka->gold p50 | "
        "p95 | p99 | Kafka->bronze p50 | bronze->silver p50 | silver->gold p50 | lag grew |\n"
        + "|---" * 13
        + "|"
    )
    for step in steps:
        ids = [i for i in range(step.first_id, step.last_id + 1) if i in by_id]
        if not ids:
            print(f"{step.rate:6.0f}  no orders reached silver")
            continue
        got = [by_id[i] for i in ids]
        to_silver = [(s - k) / 1000 for k, _b, s, _g in got]
        to_gold = [(g - k) / 1000 for k, _b, _s, g in got if g is not None]
        hops = (
            statistics.median((b - k) / 1000 for k, b, _s, _g in got),
            statistics.median((s - b) / 1000 for _k, b, s, _g in got),
            statistics.median((g - s) / 1000 for _k, _b, s, g in got if g is not None)
            if to_gold
            else float("nan"),
        )
        third = max(1, len(to_silver) // 3)
        grew = statistics.median(to_silver[-third:]) > 2 * statistics.median(to_silver[:third]) + 2
        s50, s95, s99 = percentiles(to_silver)
        g50, g95, g99 = percentiles(to_gold) if to_gold else (float("nan"),) * 3
        achieved = len(ids) / max(step.ended - step.began, 1e-9)
        figures = [s50, s95, s99, g50, g95, g99, *hops]
        print(
            f"| {step.rate:.0f} | {len(ids)} | {achieved:.1f} | "
            + " | ".join(f"{x:.2f}" for x in figures)
            + f" | {'YES' if grew else 'no'} |"
        )
    if not tables.exists(spark, path("silver", names.customers)):
        return  # --orders-only
    cdc_bronze = feed(spark, path("bronze", names.customers)).select(
        F.get_json_object(F.col("key").cast("string"), "$.customer_id").cast("int").alias("id"),
        F.col("kafka_timestamp").alias("kafka"),
        F.col("_commit_timestamp").alias("bronze"),
    )
    cdc_silver = (
        feed(spark, path("silver", names.customers))
        .where("_change_type = 'insert'")
        .groupBy(F.col("customer_id").alias("id"))
        .agg(F.min("_commit_timestamp").alias("silver"))
    )
    changes = cdc_bronze.groupBy("id").agg(
        F.min("kafka").alias("kafka"), F.min("bronze").alias("bronze")
    )
    got_pg = [
        (pg.committed[r["id"]], ms(r["kafka"]), ms(r["bronze"]), ms(r["silver"]))
        for r in changes.join(cdc_silver, "id").collect()
        if r["id"] in pg.committed
    ]
    total = [(s - c) / 1000 for c, _k, _b, s in got_pg]
    p50, p95, p99 = percentiles(total)
    print(
        f"\nPostgreSQL commit -> silver ({len(got_pg)} inserts): p50 {p50:.2f} s, p95 {p95:.2f}, "
        f"p99 {p99:.2f}; hops p50: commit->Kafka (Debezium) "
        f"{statistics.median((k - c) / 1000 for c, k, _b, _s in got_pg):.2f}, Kafka->bronze "
        f"{statistics.median((b - k) / 1000 for _c, k, b, _s in got_pg):.2f}, bronze->silver "
        f"{statistics.median((s - b) / 1000 for _c, _k, b, s in got_pg):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="25,100,400,1600", help="orders per second, per step")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each step")
    parser.add_argument("--pg-rate", type=float, default=5.0, help="PostgreSQL inserts a second")
    parser.add_argument("--interval", default="2 seconds", help="the streams' trigger interval")
    parser.add_argument(
        "--ingest-interval", help="the ingest streams' trigger interval (default: --interval)"
    )
    parser.add_argument("--gold-interval", default="5s", help="build_gold's interval")
    parser.add_argument("--move-interval", default="1m", help="realtime_to_offline's interval")
    parser.add_argument(
        "--lean",
        action="store_true",
        help="only the measured paths to silver: no SCD2 history, move or gold build",
    )
    parser.add_argument(
        "--orders-only", action="store_true", help="only ingest_events and refine_silver of orders"
    )
    parser.add_argument(
        "--one-driver",
        action="store_true",
        help="the chosen jobs as steps of one run_pipeline driver instead of a process each",
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]

    base = load_settings("test", overrides={"spark.conf": SHIPPED_SPARK})
    work = Path(tempfile.mkdtemp(prefix="freshness-"))
    spark = build_session(base, "bench-freshness")
    with debezium_table(base, [CUSTOMER_DDL]) as table:
        names = Names(uuid.uuid4().hex[:8])
        topic = f"fresh-{names.tag}"
        kafka.ensure_topic(base.kafka, topic, partitions=2)
        ingest_every = args.ingest_interval or args.interval
        conf_dict = pipeline_conf(names, topic, table.topic, ingest_every, args.gold_interval)
        # The jobs read the overlay: the shipped Spark settings go in it.
        conf = conf_overlay(work, {**conf_dict, "spark": {"conf": SHIPPED_SPARK}})
        settings = load_settings("test", conf, {"storage.root": str(work / "lake")})
        jobs = pipeline_jobs(names, work / "logs", args.interval, args.move_interval)
        chosen = [jobs[0], jobs[2]] if args.orders_only else jobs[:4] if args.lean else jobs
        starts = [
            (stage, exist(spark, [p for j in stage for p in creates(settings, j)]))
            for stage in stages(chosen)
        ]
        if args.one_driver:
            only = [flag for job in chosen for flag in ("--only", job.name)]
            together = (*only, "--trigger-interval", args.interval)
            chosen = [Job("run_pipeline", "run_pipeline", together, work / "logs" / "run.log")]
            created = [p for stage, _ready in starts for j in stage for p in creates(settings, j)]
            starts = [(chosen, exist(spark, created))]
        supervisor = Supervisor(
            chosen,
            overlay_env(settings, conf),
            "test",
        )
        orders = Orders(settings, topic)
        customers = Customers(settings, table.table, args.pg_rate)
        stop = threading.Event()
        writer = threading.Thread(target=customers.run, args=(stop,), daemon=True)
        path = settings.storage.path
        silver_orders = path("silver", names.orders)
        try:
            orders.run(5.0, 2.0)  # the first orders: the jobs' tables come from them
            writer.start()
            supervisor.start_stages(starts, timeout_s=600)
            print(f"pipeline started in {supervisor.elapsed():.0f} s", flush=True)
            steps: list[Step] = []
            for rate in rates:
                step = Step(rate, orders.next_id, began=time.monotonic())
                orders.run(rate, args.seconds)
                step.last_id, step.ended = orders.next_id - 1, time.monotonic()
                steps.append(step)
                last = step.last_id

                def arrived(last: int = last) -> bool:
                    top = spark.read.format("delta").load(silver_orders).agg(F.max("order_id"))
                    return (top.collect()[0][0] or 0) >= last

                wait(supervisor, f"step {rate}/s drained", arrived, timeout_s=900)
                print(
                    f"step {rate:.0f}/s: {step.last_id - step.first_id + 1} orders, drained "
                    f"{time.monotonic() - step.ended:.0f} s after",
                    flush=True,
                )
            time.sleep(15)  # the last PostgreSQL changes
            gold = gold_path(settings, names.gold)
            if tables.exists(spark, gold):  # gold has caught up with silver: every order in it
                top = tables.latest_version(spark, silver_orders)
                wait(
                    supervisor,
                    "gold caught up",
                    lambda: max(gold_visibility(spark, gold)[0], default=-1) >= top,
                    timeout_s=900,
                )
        finally:
            stop.set()
            supervisor.kill_all()
        analyse(spark, settings, names, steps, customers)
        exits = [f"{j.name}: {e}" for j in supervisor.jobs for e in j.exits]
        print(f"\njob exits other than the final stop: {exits or 'none'}; logs in {work / 'logs'}")
    spark.stop()
    shutil.rmtree(work / "lake", ignore_errors=True)  # the logs stay; the tables would pile up


if __name__ == "__main__":
    main()
