"""The demo's offline steps, with the jobs' own library calls: `move` (realtime_to_offline
moves the closed buckets of silver.orders by the clock: the January sample orders are long
closed, the two orders of today stay realtime) and `correct` (a backfill of the first January
window: cancelled orders carry no revenue), each showing the hybrid view silver.orders_hybrid,
the second also the boundary's history."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING

from lakehouse.core import current
from lakehouse.core.settings import Settings, project_root
from lakehouse.offline import boundary, hybrid, store
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.buckets import EPOCH, parse_instant
from lakehouse.offline.move import MoveOptions, describe, move_all

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLE = "orders_offline"
WINDOW = (parse_instant("2026-01-01T00:00Z"), parse_instant("2026-01-01T02:00Z"))  # 1st bucket


def move(spark: SparkSession, settings: Settings, first_id: int) -> None:
    """realtime_to_offline by the clock, with the hybrid view before and after."""
    spec = settings.offline_table(TABLE)
    _banner(f"hybrid view silver.{spec.view} before realtime_to_offline")
    _show_view(spark, settings, first_id)
    _banner(f"realtime_to_offline --table {TABLE} (closed buckets by the clock)")
    for moved in move_all(spark, settings, MoveOptions(TABLE)):
        print(describe(moved))
    _show_view(spark, settings, first_id)


def correct(spark: SparkSession, settings: Settings, first_id: int) -> None:
    """A backfill of the first sample bucket, its plan, the boundary's history, the view."""
    start, end = WINDOW
    _banner(
        f"backfill --table {TABLE} --from {start.isoformat()} --to {end.isoformat()}: "
        "cancelled orders carry no revenue"
    )
    path = _corrections(spark, settings)
    report = backfill(
        spark,
        settings,
        BackfillOptions(TABLE, path, start, end, reason="demo: cancelled orders re-priced to 0"),
    )
    print(report.render())
    print("\nboundary history (_system/time_boundary):")
    boundary.history(spark, settings, TABLE).orderBy("seq").select(
        "seq", "boundary", "previous", "job", "offline_version", "reason"
    ).show(truncate=False)
    print(f"hybrid view silver.{settings.offline_table(TABLE).view} after the backfill:")
    _show_view(spark, settings, first_id)


def _banner(text: str) -> None:
    print(f"\n=== {text} ===\n")


def _show_view(spark: SparkSession, settings: Settings, first_id: int) -> None:
    """This run's orders in the view, and how many rows each side serves."""
    from pyspark.sql import functions as F

    state = hybrid.state(spark, settings, TABLE)
    view = state.frame(spark)
    side = F.lit("realtime")
    if state.boundary is not None:
        side = F.when(F.timestamp_millis("ts") < F.lit(state.boundary), F.lit("offline")).otherwise(
            side
        )
    shown = view.withColumn("served_from", side)
    print(
        f"boundary {state.boundary.isoformat() if state.boundary else 'none (all realtime)'}; "
        f"offline version {state.offline_version}, realtime version {state.realtime_version}"
    )
    shown.groupBy("served_from").count().orderBy("served_from").show()
    shown.where(F.col("order_id") >= first_id).orderBy("ts").select(
        "order_id",
        "customer_id",
        "order_status",
        "amount",
        F.timestamp_millis("ts").alias("at"),
        "served_from",
    ).show(50, truncate=False)


def _corrections(spark: SparkSession, settings: Settings) -> str:
    """The window's current orders with cancelled ones at amount 0, as JSON lines (the way a
    corrected extract arrives: amounts as strings)."""
    spec = settings.offline_table(TABLE)
    realtime = current.current_rows(
        spark.read.format("delta").load(store.realtime_path(settings, spec))
    )
    start, end = ((w - EPOCH) // timedelta(milliseconds=1) for w in WINDOW)
    rows = realtime.where(f"ts >= {start} AND ts < {end}").collect()
    target = project_root() / ".lakehouse" / "demo" / "orders_corrections.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w") as out:
        for r in rows:
            amount = Decimal(0) if r["order_status"] == "cancelled" else r["amount"]
            record = {k: r[k] for k in ("order_id", "customer_id", "order_status", "ts")}
            out.write(json.dumps({**record, "amount": str(amount)}) + "\n")
    return str(target)
