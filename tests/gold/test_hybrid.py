"""Gold over a hybrid view: moves to offline change nothing, a backfill changes exactly the gold
groups of its window, and a late change to a moved bucket reaches gold once, when it moves."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core import tables
from lakehouse.core.settings import Settings
from lakehouse.gold.build import GoldOptions, build_gold, gold_path
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from tests.gold.helpers import GOLD, PATCHED, PATCHED_GOLD, assert_gold, with_gold
from tests.offline.helpers import T0, Order, offline_setup, order, upsert

H = timedelta(hours=1)
DAY = timedelta(days=1)


def expected(spark: SparkSession, orders: list[Order], patched: bool = False) -> DataFrame:
    """Gold's rows in Python: revenue, orders and the biggest amount, or (`patched`: the
    aggregates of PATCHED) the count of amounts (none is null here) in its place."""
    groups: dict[tuple[object, int], list[Decimal]] = {}
    for o in orders:
        at = T0 + timedelta(milliseconds=o[4] - order(0, T0)[4])
        groups.setdefault((at.date(), o[1]), []).append(o[3])
    if patched:
        counted = [(d, c, sum(a), len(a), len(a)) for (d, c), a in groups.items()]
        return spark.createDataFrame(counted, PATCHED_GOLD)
    rows = [(d, c, sum(a), len(a), max(a)) for (d, c), a in groups.items()]
    return spark.createDataFrame(rows, GOLD)


def changed_days(spark: SparkSession, path: str, version: int) -> set[object]:
    """The days of the gold rows one commit changed (its change feed)."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .option("endingVersion", version)
        .load(path)
    )
    return {r["day"] for r in feed.collect()}


@pytest.mark.parametrize("patched", [False, True], ids=["recomputed", "patched"])
def test_moves_backfills_and_late_changes_reach_gold_exactly(
    spark: SparkSession, settings: Settings, tmp_path: Path, patched: bool
) -> None:
    """Patched or recomputed: a run whose boundary moved is always recomputed."""
    offline, settings = offline_setup(spark, settings)
    view = settings.offline_table(offline).view
    name, settings = with_gold(settings, view, aggregates=PATCHED if patched else None)
    how = " patched and " if patched else " recomputed and "
    path = gold_path(settings, name)
    orders = [order(i, T0 + i * 5 * H, customer=i % 2) for i in range(12)]  # days 0..2
    upsert(spark, settings, offline, orders)
    build_gold(spark, settings, GoldOptions(name))
    assert_gold(spark, settings, name, expected(spark, orders, patched))

    # Moving the closed buckets changes what serves the rows, not the rows: no gold change.
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 2 * DAY + timedelta(minutes=1)))
    build_gold(spark, settings, GoldOptions(name))
    assert changed_days(spark, path, tables.latest_version(spark, path)) == set()
    assert_gold(spark, settings, name, expected(spark, orders, patched))

    # A backfill of day 1 changes exactly day 1's groups.
    fixed = [
        (o[0], o[1], o[2], o[3] + Decimal(1), o[4])
        for o in orders
        if T0 + DAY <= T0 + timedelta(milliseconds=o[4] - order(0, T0)[4]) < T0 + 2 * DAY
    ]
    source = tmp_path / "fix.jsonl"
    source.write_text(
        "".join(
            json.dumps(
                {
                    "order_id": o[0],
                    "customer_id": o[1],
                    "order_status": o[2],
                    "amount": str(o[3]),
                    "ts": o[4],
                }
            )
            + "\n"
            for o in fixed
        )
    )
    backfill(
        spark,
        settings,
        BackfillOptions(offline, str(source), T0 + DAY, T0 + 2 * DAY, now=T0 + 3 * DAY),
    )
    assert how in build_gold(spark, settings, GoldOptions(name)).describe()  # boundary kept
    assert changed_days(spark, path, tables.latest_version(spark, path)) == {(T0 + DAY).date()}
    by_id = {o[0]: o for o in fixed}
    corrected = [by_id.get(o[0], o) for o in orders]
    assert_gold(spark, settings, name, expected(spark, corrected, patched))

    # A late change to a moved bucket of day 0: the view (and gold) follow when it moves.
    late = order(0, T0, "99.00", customer=0)
    upsert(spark, settings, offline, [late])
    assert how in build_gold(spark, settings, GoldOptions(name)).describe()
    assert_gold(spark, settings, name, expected(spark, corrected, patched))  # not moved yet
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 3 * DAY))
    assert " recomputed and " in build_gold(spark, settings, GoldOptions(name)).describe()
    assert changed_days(spark, path, tables.latest_version(spark, path)) == {T0.date()}
    assert_gold(spark, settings, name, expected(spark, [late, *corrected[1:]], patched))
