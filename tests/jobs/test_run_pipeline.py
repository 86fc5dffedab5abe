"""run_pipeline: several jobs of the pipeline in one driver, each step in a thread and a Spark
session of its own. The steps leave the rows their jobs leave alone; a continuous driver takes
new records into silver while both streams run and stops cleanly on SIGTERM; a failing step
stops the others and fails the run with its own error."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import streaming, tables
from lakehouse.core.current import current_rows
from lakehouse.core.errors import UsageError
from lakehouse.core.settings import Settings, SettingsError, load_settings
from lakehouse.core.specs import OfflineTableSettings
from lakehouse.offline import hybrid
from lakehouse.together import PipelineOptions, chosen_steps, run_pipeline
from tests.bronze.helpers import (
    bronze,
    job_env,
    new_source,
    newest_version,
    reaped,
    short_lived,
    start_job,
)
from tests.gold.helpers import GOLD, assert_gold, with_gold
from tests.offline.helpers import ORDER_COLUMNS, T0, offline_rows
from tests.offline.helpers import order as offline_order
from tests.silver.helpers import ORDER_SCHEMA, assert_current, current, produce, with_silver
from tests.silver.test_crash import conf_dir

SILVER = ORDER_SCHEMA + ", _rescued_data string"
APPEND: dict[str, Any] = {"mode": "append", "schema": ORDER_SCHEMA}
KILLS = 2
# The offline layer's orders (an exact amount, `ts` in epoch ms), as a producer sends them.
DECIMAL_ORDERS = ORDER_COLUMNS.removesuffix(", _rescued_data STRING")
KEYS = ("order_id", "customer_id", "order_status", "amount", "ts")
Order = dict[str, Any]


def orders(start: int, count: int) -> list[Order]:
    """Orders `start`.. of 40 keys, each a new version of its key (`ts` = its number)."""
    return [
        {
            "order_id": i % 40 + 1,
            "customer_id": i % 7,
            "order_status": f"s{i}",
            "amount": i + 0.5,
            "ts": i,
        }
        for i in range(start, start + count)
    ]


def model(produced: list[Order]) -> list[tuple[Any, ...]]:
    """Silver's current rows: the newest version (greatest `ts`) of each key."""
    newest: dict[int, Order] = {}
    for order in produced:
        key = order["order_id"]
        if key not in newest or order["ts"] > newest[key]["ts"]:
            newest[key] = order
    return [
        (o["order_id"], o["customer_id"], o["order_status"], o["amount"], o["ts"], None)
        for o in newest.values()
    ]


def test_steps_are_named_as_the_plan_names_them_and_an_unknown_one_fails_naming_the_steps(
    settings: Settings,
) -> None:
    steps = chosen_steps(settings, ("refine_silver.orders", "ingest_events.orders"))
    assert [s.task_id for s in steps] == ["ingest_events.orders", "refine_silver.orders"]
    with pytest.raises(UsageError, match=r"--only refine_silver\.nope: not a step .*"):
        chosen_steps(settings, ("refine_silver.nope",))


def test_a_transaction_id_set_in_one_session_is_not_recorded_by_another_sessions_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What one driver relies on (Delta's txnAppId/txnVersion are read from the committing
    session's SQL settings): a step's MERGE under its transaction records that id, and a
    MERGE of another step's session in another thread, meanwhile, records none."""
    from delta.tables import DeltaTable

    path = str(tmp_path / "t")
    spark.range(3).write.format("delta").save(path)

    def merge(session: SparkSession, first: int) -> None:
        rows = session.range(first, first + 2).alias("s")
        target = DeltaTable.forPath(session, path).alias("t")
        target.merge(rows, "t.id = s.id").whenNotMatchedInsertAll().execute()

    def own_transaction() -> None:
        session = spark.newSession()
        with tables.transaction(session, "step-a", 5):
            merge(session, 10)

    def no_transaction() -> None:
        merge(spark.newSession(), 20)

    held = threading.Event()
    released = threading.Event()

    def while_another_holds_one() -> None:
        held.wait()
        no_transaction()
        released.set()

    first = threading.Thread(target=own_transaction)
    first.start()
    first.join()
    second = threading.Thread(target=while_another_holds_one)
    second.start()
    with tables.transaction(spark.newSession(), "step-b", 7):
        held.set()
        released.wait(120)
    second.join()
    log = sorted((tmp_path / "t" / "_delta_log").glob("*.json"))
    txns = [
        (int(f.stem), a["txn"]["appId"], a["txn"]["version"])
        for f in log
        for a in map(json.loads, f.read_text().splitlines())
        if "txn" in a
    ]
    assert txns == [(1, "step-a", 5)]
    assert len(log) == 3  # both MERGEs committed


@pytest.mark.services
def test_an_available_now_run_ingests_then_refines_in_stage_order(
    spark: SparkSession, kafka_up: Settings
) -> None:
    source, topic, settings = new_source(kafka_up)
    name, settings = with_silver(
        settings, source, schema=ORDER_SCHEMA, keys=("order_id",), sequence_by="ts"
    )
    produced = orders(0, 120)
    produce(settings, topic, produced)
    steps = (f"refine_silver.{name}", f"ingest_events.{source}")
    result = run_pipeline(spark, settings, PipelineOptions("test", only=steps))
    assert [task_id for task_id, _ in result.results] == [steps[1], steps[0]]
    assert_current(spark, settings, name, model(produced), SILVER)


@pytest.mark.services
def test_an_available_now_run_of_every_stage_builds_gold_and_moves_closed_buckets_offline(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Ingest, refine, gold over the hybrid view and the move, as steps of one run: silver
    holds the newest version of each order, gold equals a model of it computed in Python, and
    every bucket (all closed: January 2026) is offline, the hybrid view serving the same rows."""
    source, topic, settings = new_source(kafka_up)
    name, settings = with_silver(
        settings, source, schema=DECIMAL_ORDERS, keys=("order_id",), sequence_by="ts"
    )
    offline = f"off_{name}"
    spec = OfflineTableSettings(realtime=name, time_column="ts", bucket="2h", buffer="1m")
    settings = replace(settings, offline={**settings.offline, offline: spec})
    gold, settings = with_gold(settings, settings.offline_table(offline).view)
    # 40 orders of 25 keys, 3 customers, 4 days, two hours apart; a key's later version may
    # change its customer, amount and day.
    sent = [
        offline_order(i % 25 + 1, T0 + timedelta(hours=2 * i), f"{i * 1.25:.2f}", i % 3 + 1)
        for i in range(40)
    ]
    produce(
        settings, topic, [dict(zip(KEYS, o, strict=True)) | {"amount": float(o[3])} for o in sent]
    )
    steps = [
        f"ingest_events.{source}",
        f"refine_silver.{name}",
        f"build_gold.{gold}",
        f"realtime_to_offline.{offline}",
    ]
    result = run_pipeline(spark, settings, PipelineOptions("test", only=tuple(steps)))
    assert [task_id for task_id, _ in result.results] == steps
    newest: dict[int, tuple[int, int, str, Decimal, int]] = {}
    for o in sent:
        if o[0] not in newest or o[4] > newest[o[0]][4]:
            newest[o[0]] = o
    expected = spark.createDataFrame([(*o, None) for o in newest.values()], ORDER_COLUMNS)
    for rows in (
        offline_rows(spark, settings, offline),
        hybrid.read_hybrid(spark, settings, offline),
    ):
        assert_df_equality(
            current_rows(rows).select(*expected.columns),
            expected,
            ignore_row_order=True,
            ignore_nullable=True,
        )
    by_group: dict[tuple[date, int], list[Decimal]] = defaultdict(list)
    for _key, customer, _status, amount, ts in newest.values():
        day = datetime.fromtimestamp(ts / 1000, UTC).date()
        by_group[(day, customer)].append(amount)
    gold_model = [(d, c, sum(a), len(a), max(a)) for (d, c), a in by_group.items()]
    assert_gold(spark, settings, gold, spark.createDataFrame(gold_model, GOLD))


@pytest.mark.services
@pytest.mark.parametrize("trigger", ["available-now", "continuous"])
def test_a_failing_step_stops_the_others_and_fails_the_run_with_its_error(
    spark: SparkSession, kafka_up: Settings, trigger: str
) -> None:
    """A refine declared against its source's kind fails as refine_silver does alone, once its
    bronze table exists; the ingest beside it (a stream that runs until stopped, when
    continuous) stops, and the run raises the refine's error (so its exit code)."""
    source, topic, settings = new_source(kafka_up)
    name, settings = with_silver(
        settings, source, mode="scd1", schema=ORDER_SCHEMA, keys=("order_id",)
    )
    produce(settings, topic, orders(0, 5))
    steps = (f"ingest_events.{source}", f"refine_silver.{name}")
    # A stop that fails to reach the ingest must fail the test, not hang it: after 120 s the
    # watchdog stops the streams as SIGTERM would, and says so.
    fired: list[bool] = []

    def fire() -> None:
        fired.append(True)
        streaming._stop.set()

    watchdog = threading.Timer(120, fire)
    watchdog.start()
    try:
        with pytest.raises(SettingsError, match=rf"silver\.{name}\.mode 'scd1' needs a CDC"):
            run_pipeline(spark, settings, PipelineOptions("test", trigger, only=steps))
    finally:
        watchdog.cancel()
    assert not fired, "the ingest ran on after the refine failed, until the watchdog"
    assert tables.exists(spark, settings.storage.path("bronze", source))  # the ingest ran


@pytest.mark.services
def test_a_step_stopped_while_it_waits_for_its_input_is_reported_as_not_started(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A continuous refine whose bronze table never comes (no ingest runs) waits; a stop then
    ends the run, which says the step did not start rather than that it is done."""
    source, _topic, settings = new_source(kafka_up)
    name, settings = with_silver(settings, source, mode="append", schema=ORDER_SCHEMA)

    def stop_once_running() -> None:
        deadline = time.monotonic() + 60
        while streaming._depth == 0 and time.monotonic() < deadline:
            time.sleep(0.1)  # the run clears the stop event as it starts: set it after that
        time.sleep(1)
        streaming._stop.set()

    stopper = threading.Thread(target=stop_once_running, daemon=True)
    stopper.start()
    options = PipelineOptions("test", "continuous", only=(f"refine_silver.{name}",))
    result = run_pipeline(spark, settings, options)
    stopper.join()
    assert result.summary() == f"refine_silver.{name}: not started"
    assert not tables.exists(spark, settings.storage.path("silver", name))


@pytest.mark.services
def test_a_continuous_driver_killed_and_restarted_takes_each_record_once_and_stops_on_sigterm(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    """Ingest and refine of one source in one driver process, started before its bronze table
    exists (the refine waits for it), SIGKILLed at a random moment after each run committed to
    silver while records keep coming, and restarted from the steps' checkpoints; the last run
    takes the rest and SIGTERM ends it with exit 0. Silver appends (a batch committed twice
    would show as duplicate rows): every offset is in bronze once, every order in silver once."""
    source, topic, settings = new_source(kafka_up)
    name = f"s{uuid.uuid4().hex[:10]}"
    conf = conf_dir(tmp_path, source, topic, (name,), table=APPEND)
    env = {**job_env(settings, source, topic), "LAKEHOUSE_CONF_DIR": str(conf)}
    settings = load_settings(
        "test", conf_dir=conf, overrides={"storage.root": env["LAKEHOUSE__STORAGE__ROOT"]}
    )
    path = settings.storage.path("silver", name)
    sent = orders(0, 60)
    produce(settings, topic, sent)
    log = tmp_path / "run.log"
    steps = ["--only", f"ingest_events.{source}", "--only", f"refine_silver.{name}"]
    args = ["--trigger", "continuous", *steps, "--trigger-interval", "1 second"]
    rng = random.Random(11)  # noqa: S311 - test timing, not security
    for _kill in range(KILLS):
        job = start_job("run_pipeline", args, short_lived(env), log)
        with reaped(job):
            wait_for_commit(spark, path, after=newest_version(spark, path), job=job, log=log)
            more = orders(len(sent), 40)  # in flight when the kill comes
            produce(settings, topic, more)
            sent += more
            time.sleep(rng.uniform(0.2, 3.0))
            assert job.poll() is None, f"run_pipeline exited by itself: {log}"
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    more = orders(len(sent), 30)
    produce(settings, topic, more)
    sent += more
    job = start_job("run_pipeline", args, env, log)
    with reaped(job):
        wait_for_silver(spark, settings, name, appended(sent), job, log)
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
    offsets = bronze(spark, settings, source).select("partition", "offset")
    assert (offsets.count(), offsets.distinct().count()) == (len(sent), len(sent))
    assert_current(spark, settings, name, appended(sent), SILVER)


def appended(sent: list[Order]) -> list[tuple[Any, ...]]:
    """An appending silver table's rows: each order once."""
    return [
        (o["order_id"], o["customer_id"], o["order_status"], o["amount"], o["ts"], None)
        for o in sent
    ]


def wait_for_commit(
    spark: SparkSession, path: str, after: int, job: subprocess.Popen[bytes], log: Path
) -> None:
    """Until the Delta table at `path` has a version newer than `after`."""
    deadline = time.monotonic() + 300
    while newest_version(spark, path) <= after:
        assert job.poll() is None, f"run_pipeline exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no commit to {path} after version {after}: {log}"
        time.sleep(0.3)


def wait_for_silver(
    spark: SparkSession,
    settings: Settings,
    name: str,
    expected: list[tuple[Any, ...]],
    job: subprocess.Popen[bytes],
    log: Path,
    timeout_s: float = 300,
) -> None:
    """Until silver's current rows are `expected` (read again only after a new commit)."""
    path = settings.storage.path("silver", name)
    deadline = time.monotonic() + timeout_s
    seen, rows = -2, 0
    want = sorted(expected)
    while True:
        if (version := newest_version(spark, path)) != seen:
            seen = version
            got = (
                sorted(tuple(r) for r in current(spark, settings, name).collect())
                if version >= 0
                else []
            )
            rows = len(got)
            if got == want:
                return
        assert job.poll() is None, f"run_pipeline exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"silver has {rows} of {len(want)} rows: {log}"
        time.sleep(0.5)
