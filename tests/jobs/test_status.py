"""`lakehouse status` as a user runs it, on a lake where one source and its silver table hold
data and every shipped table holds none: the whole output, line for line. Times and process
ids vary from run to run and are compared as shapes; column widths follow them, so table
cells are compared stripped."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from pyspark.sql import SparkSession

from lakehouse.core import kafka
from lakehouse.core.settings import Settings, load_settings
from lakehouse.silver.refine import RefineOptions, refine
from tests.bronze.helpers import run_ingest
from tests.jobs.helpers import conf_overlay, overlay_env, run_cli
from tests.silver.helpers import ORDER_SCHEMA

TIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?")
PID = re.compile(r"pid \d+")
DATA = re.compile(r"data \S+\)")  # where PostgreSQL keeps its cluster (CI: outside the clone)


def normalized(text: str) -> list[str]:
    """Times as <time>, pids as <pid>, PostgreSQL's data directory as <dir>, table rows as
    stripped cells; rules dropped."""
    lines = []
    for line in text.splitlines():
        line = DATA.sub("data <dir>)", PID.sub("pid <pid>", TIME.sub("<time>", line)))
        if line.startswith("+"):
            continue
        if line.startswith("|"):
            line = "|".join(cell.strip() for cell in line.split("|"))
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

    done = run_cli(
        ["status"], {**overlay_env(settings, conf), "LAKEHOUSE__STORAGE__ROOT": str(lake)}
    )

    assert done.returncode == 0, done.stderr[-3000:]
    # Bronze: 4 records over 2 partitions, 1 not JSON, protected. Silver: orders 1 and 3 live;
    # the last (only) batch read 4, -3.0 failed amount_not_negative, "not json" parsable, both
    # quarantined. The shipped tables exist in the configuration only.
    assert (
        normalized(done.stdout.rstrip()) == EXPECTED.format(source=source, table=table).splitlines()
    )


EXPECTED = """\
kafka      running (pid <pid>, 127.0.0.1:19092)
postgres   running (pid <pid>, 127.0.0.1:15432, data <dir>)
connect    running (pid <pid>, http://127.0.0.1:18083)
spark      stopped

bronze (per source):
|source|table|rows|bad_rows|topic_partitions|last_ingest_time|protected|gaps_recorded|
|customers|bronze.customers|0|0|0|NULL|NULL|0|
|lineitem|bronze.lineitem|0|0|0|NULL|NULL|0|
|orders|bronze.orders|0|0|0|NULL|NULL|0|
|{source}|bronze.{source}|4|1|2|<time>|true|0|

silver (per table; expectations of the last batch):
|table|mode|live_rows|last_batch|last_batch_at|last_batch_rows|last_batch_failed|quarantined_pending|
|silver.customers|scd1|NULL|NULL|NULL|NULL|NULL|0|
|silver.customers_history|scd2|NULL|NULL|NULL|NULL|NULL|0|
|silver.orders|upsert|NULL|NULL|NULL|NULL|NULL|0|
|silver.{table}|append|2|0|<time>|4|amount_not_negative=1, parsable=1|2|

offline (per table; late changes to backfilled buckets are not applied):
|table|hybrid_view|boundary|buckets|rows|last_move_at|late_buckets_moved_again|late_changes_not_applied|backfills|
|offline.orders_offline|silver.orders_hybrid|NULL|0|0|NULL|0|0|0|

gold (per table; lag = source commits not yet built):
|table|source|groups|last_build_at|last_run_rows_changed|source_state|source_lag|
|gold.daily_revenue|orders_hybrid|NULL|NULL|NULL|NULL|NULL|
"""
