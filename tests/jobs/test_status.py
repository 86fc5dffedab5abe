"""`lakehouse status` as a user runs it, on a lake where one source and its silver table hold
data, behind Kafka and behind bronze, and every shipped table holds none: the whole output,
line for line, and the same numbers in `--json`. Times and process ids vary from run to run
and are compared as shapes; column widths follow them, so table cells are compared stripped.
The shipped sources' topics exist or not depending on what ran before, so their Kafka rows are
left out."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from lakehouse import cli
from lakehouse.cli import tables as cli_tables
from lakehouse.core import kafka
from lakehouse.core.errors import EXIT_OK
from lakehouse.core.settings import Settings, load_settings
from lakehouse.silver.refine import RefineOptions, refine
from tests.bronze.helpers import run_ingest
from tests.jobs.helpers import conf_overlay, overlay_env, run_cli
from tests.silver.helpers import ORDER_SCHEMA

TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?")
PID = re.compile(r"pid \d+")
DATA = re.compile(r"data \S+\)")  # where PostgreSQL keeps its cluster (CI: outside the clone)


SHIPPED = ("customers", "lineitem", "orders")
LAG_SECONDS = 7  # the cell of silver's lag_seconds in a stripped row (after the leading "")


def normalized(text: str, table: str) -> list[str]:
    """Times as <time>, pids as <pid>, PostgreSQL's data directory as <dir>, table rows as
    stripped cells, the shipped sources' Kafka rows dropped, the lag in seconds of `table` as
    <s> (a whole number); rules dropped."""
    lines, section = [], ""
    for line in text.splitlines():
        line = DATA.sub("data <dir>)", PID.sub("pid <pid>", TIME.sub("<time>", line)))
        if line and not line.startswith(("+", "|")):
            section = line.split(" ")[0]
        if line.startswith("+"):
            continue
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.split("|")]
            if section == "kafka" and cells[1] in SHIPPED:
                continue
            if cells[1] == f"silver.{table}":
                assert cells[LAG_SECONDS].isdigit(), line
                cells[LAG_SECONDS] = "<s>"
            line = "|".join(cells)
        lines.append(line.rstrip())
    return lines


def test_status_shows_every_layer_and_what_each_table_holds(
    spark: SparkSession, kafka_up: Settings, tmp_path: Path
) -> None:
    source = f"st{uuid.uuid4().hex[:8]}"
    topic, table = f"{source}-topic", f"{source}_orders"
    kafka.ensure_topic(kafka_up.kafka, topic, partitions=2)
    declared = {
        "source": source,
        "mode": "append",
        "schema": ORDER_SCHEMA,
        "expectations": [
            {"name": "amount_not_negative", "sql": "amount >= 0", "action": "quarantine"}
        ],
    }
    conf = conf_overlay(
        tmp_path,
        {"sources": {source: {"kind": "events", "topics": [topic]}}, "silver": {table: declared}},
    )
    lake = tmp_path / "lake"
    settings = load_settings("test", conf, {"storage.root": str(lake)})
    events = [
        b'{"order_id": 1, "customer_id": 7, "order_status": "paid", "amount": 5.0, "ts": 1}',
        b'{"order_id": 2, "customer_id": 7, "order_status": "paid", "amount": -3.0, "ts": 2}',
        b'{"order_id": 3, "customer_id": 8, "order_status": "open", "amount": 2.5, "ts": 3}',
        b"not json",
    ]
    kafka.produce(settings.kafka, topic, [(None, v, i % 2) for i, v in enumerate(events)])
    run_ingest(spark, settings, source)
    refine(spark, settings, RefineOptions(table))
    # One more ingest that silver has not refined, then three records bronze has not read.
    more = [(None, ORDER_4, 0), (None, ORDER_5, 1)]
    kafka.produce(settings.kafka, topic, more)
    before_ingest = time.time()
    run_ingest(spark, settings, source)
    kafka.produce(settings.kafka, topic, [(None, ORDER_4, p) for p in (0, 1, 0)])
    env = {**overlay_env(settings, conf), "LAKEHOUSE__STORAGE__ROOT": str(lake)}

    done = run_cli(["status"], env)
    as_json = run_cli(["--verbose", "status", "--json"], env)
    asked = time.time()

    assert done.returncode == 0, done.stderr[-3000:]
    # Kafka: partition 0 holds 2 + 1 + 2 records, bronze read 3 of them; partition 1 holds
    # 2 + 1 + 1, bronze read 3. Bronze: 6 records, 1 not JSON, protected. Silver: orders 1 and
    # 3 live; bronze is at version 2 (create, two appends), silver read through version 1, one
    # commit with rows behind; the last batch read 4, -3.0 failed amount_not_negative, "not
    # json" parsable, both quarantined. The shipped tables exist in the configuration only.
    expected = EXPECTED.format(source=source, table=table, topic=topic)
    assert normalized(done.stdout.rstrip(), table) == expected.splitlines()

    assert as_json.returncode == 0, as_json.stderr[-3000:]
    # Quiet by default; Spark's INFO lines on request, on stderr (stdout stays the document).
    assert " INFO SparkContext: " not in done.stderr
    assert " INFO SparkContext: " in as_json.stderr
    document = json.loads(as_json.stdout)
    assert set(document) == {"services", "kafka", "bronze", "silver", "offline", "gold"}
    assert [r for r in document["kafka"] if r["source"] == source] == [
        {
            "source": source,
            "topic": topic,
            "partition": p,
            "end_offset": e,
            "next_offset": n,
            "lag": e - n,
        }
        for p, e, n in ((0, 5, 3), (1, 4, 3))
    ]
    (row,) = [r for r in document["silver"] if r["table"] == f"silver.{table}"]
    lag_seconds = row.pop("lag_seconds")
    assert 0 <= lag_seconds <= asked - before_ingest + 1
    assert row == {
        "table": f"silver.{table}",
        "mode": "append",
        "live_rows": 2,
        "bronze_version": 2,
        "processed_version": 1,
        "lag_commits": 1,
        "last_batch": 0,
        "last_batch_at": row["last_batch_at"],
        "last_batch_rows": 4,
        "last_batch_failed": "amount_not_negative=1, parsable=1",
        "quarantined_pending": 2,
    }
    assert TIME.fullmatch(row["last_batch_at"].replace("T", " "))
    assert document["services"]["spark"] == "stopped"


ORDER_4 = b'{"order_id": 4, "customer_id": 9, "order_status": "paid", "amount": 1.0, "ts": 4}'
ORDER_5 = b'{"order_id": 5, "customer_id": 9, "order_status": "paid", "amount": 2.0, "ts": 5}'


EXPECTED = """\
kafka      running (pid <pid>, 127.0.0.1:19092)
postgres   running (pid <pid>, 127.0.0.1:15432, data <dir>)
connect    running (pid <pid>, http://127.0.0.1:18083)
spark      stopped
hdfs       stopped

kafka (per source partition; lag = records not yet in bronze):
|source|topic|partition|end_offset|next_offset|lag|
|{source}|{topic}|0|5|3|2|
|{source}|{topic}|1|4|3|1|

bronze (per source):
|source|table|rows|bad_rows|topic_partitions|last_ingest_time|protected|gaps_recorded|
|customers|bronze.customers|0|0|0|NULL|NULL|0|
|lineitem|bronze.lineitem|0|0|0|NULL|NULL|0|
|orders|bronze.orders|0|0|0|NULL|NULL|0|
|{source}|bronze.{source}|6|1|2|<time>|true|0|

silver (per table; lag = bronze commits not refined, age of the oldest; last batch's rules):
|table|mode|live_rows|bronze_version|processed_version|lag_commits|lag_seconds|last_batch|last_batch_at|last_batch_rows|last_batch_failed|quarantined_pending|
|silver.customers|scd1|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|0|
|silver.customers_history|scd2|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|0|
|silver.orders|upsert|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL|0|
|silver.{table}|append|2|2|1|1|<s>|0|<time>|4|amount_not_negative=1, parsable=1|2|

offline (per table; late changes to backfilled buckets are not applied):
|table|hybrid_view|boundary|buckets|rows|last_move_at|closed_buckets_waiting|late_changes_pending|late_buckets_moved_again|late_changes_not_applied|backfills|
|offline.orders_offline|silver.orders_hybrid|NULL|0|0|NULL|NULL|NULL|0|0|0|

gold (per table; lag = source commits not yet built):
|table|source|groups|last_build_at|last_run_rows_changed|source_state|source_lag|
|gold.daily_revenue|orders_hybrid|NULL|NULL|NULL|NULL|NULL|
"""


def test_a_broker_that_cannot_be_reached_replaces_only_the_kafka_section(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spark: SparkSession,
    settings: Settings,
    tmp_path: Path,
) -> None:
    settings = replace(
        settings,
        kafka=replace(settings.kafka, bootstrap_servers="127.0.0.1:9"),
        storage=replace(settings.storage, root=str(tmp_path / "lake")),
    )

    def shared_session(_s: Settings, _name: str, body: Callable[[SparkSession], object]) -> None:
        body(spark)  # the CLI's own session lifecycle would stop the test's

    monkeypatch.setattr(cli, "load_settings", lambda env: settings)
    monkeypatch.setattr(cli_tables, "with_session", shared_session)

    assert cli.main(["--env", "test", "status", "--json"]) == EXIT_OK

    printed = capsys.readouterr()
    assert "rdkafka" not in printed.err  # the Kafka client's retries, one per 50 ms
    document = json.loads(printed.out)
    assert document["kafka"].startswith("Kafka at 127.0.0.1:9 cannot be reached within 15 s (")
    assert "\n" not in document["kafka"]
    # The tables are still shown: each declared one, empty.
    assert [(r["table"], r["live_rows"]) for r in document["silver"]] == [
        ("silver.customers", None),
        ("silver.customers_history", None),
        ("silver.orders", None),
    ]
    assert [r["table"] for r in document["bronze"]] == [
        "bronze.customers",
        "bronze.lineitem",
        "bronze.orders",
    ]
