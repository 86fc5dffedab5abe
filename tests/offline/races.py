"""What the race tests of the offline layer share: a realtime table with orders, a backfill
of the window [02:00, 04:00) (and a second one of its gap), the rows expected afterwards, and
the checks of the offline table and the hybrid view."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.settings import Settings
from lakehouse.offline import hybrid, store
from lakehouse.offline.backfill import BackfillOptions, backfill
from tests.offline.helpers import T0, Order, frame, offline_rows, order
from tests.offline.test_backfill import write_jsonl

H = timedelta(hours=1)
NOW = T0 + 8 * H + timedelta(minutes=1)  # [00:00, 08:00) closed
WINDOW = (T0 + 2 * H, T0 + 4 * H)
FIXED = [order(1, T0 + 2.5 * H, "12.34"), order(10, T0 + 3 * H, "5.00")]

Orders = list[Order]
COLUMNS = ["order_id", "customer_id", "order_status", "amount", "ts", "_rescued_data"]


def backfill_when_the_move_writes(
    monkeypatch: pytest.MonkeyPatch, run_backfill: Callable[[], Any]
) -> list[str]:
    """Make the move's first offline write wait for a whole backfill; returns the app ids of
    every offline write, in order."""
    real = store.replace_where
    writes: list[str] = []

    def interleaved(
        rows: DataFrame, path: str, where: str, app_id: str, version: int, *more: Any
    ) -> None:
        if app_id.startswith("realtime_to_offline") and not writes:
            writes.append("backfill, forced in")
            run_backfill()
        writes.append(app_id)
        real(rows, path, where, app_id, version, *more)

    monkeypatch.setattr(store, "replace_where", interleaved)
    return writes


def epoch_ms(at: datetime) -> int:
    return int((at - datetime(1970, 1, 1)).total_seconds() * 1000)


def expected(orders: Orders) -> Orders:
    """The realtime rows, with the window's replaced by the backfill's."""
    start, end = (epoch_ms(w) for w in WINDOW)
    return [o for o in orders if not start <= o[4] < end] + FIXED


def check_offline(spark: SparkSession, settings: Settings, offline: str, rows: Orders) -> None:
    assert_df_equality(
        offline_rows(spark, settings, offline).select(*COLUMNS),
        frame(spark, rows),
        ignore_row_order=True,
    )


def check(spark: SparkSession, settings: Settings, offline: str, rows: Orders) -> None:
    """The offline table and the whole hybrid view hold `rows`."""
    check_offline(spark, settings, offline, rows)
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        frame(spark, rows),
        ignore_row_order=True,
    )


def start_backfill(
    spark: SparkSession, settings: Settings, offline: str, tmp_path: Path
) -> Callable[[], Any]:
    path = write_jsonl(tmp_path / "fix.jsonl", FIXED)
    options = BackfillOptions(offline, path, *WINDOW, now=NOW, reason="race")
    return lambda: backfill(spark, settings, options)


# A second backfill, of the first one's gap [00:00, 02:00): order 0 corrected, order 20 added.
SECOND = [order(0, T0 + 0.75 * H, "55.00"), order(20, T0 + 1.5 * H, "1.00")]


def second_backfill(offline: str, tmp_path: Path, reason: str = "") -> BackfillOptions:
    path = write_jsonl(tmp_path / "second.jsonl", SECOND)
    return BackfillOptions(offline, path, T0, T0 + 2 * H, now=NOW, reason=reason)


class Killed(Exception):
    pass


def kill(*_: Any) -> None:
    raise Killed
