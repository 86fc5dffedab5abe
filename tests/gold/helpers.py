"""Gold tables over an offline setup's realtime table (tests.offline.helpers), the events
applied to it, and an independent model (in Python) of what gold must hold."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.settings import Settings
from lakehouse.core.specs import ExpectationSettings, GoldTableSettings
from lakehouse.gold.build import gold_path
from lakehouse.silver.scd1 import apply_scd1
from tests.offline.helpers import CHANGES, T0, ms, offline_setup, realtime_path

GOLD = "day date, customer_id bigint, revenue decimal(22,2), orders bigint, biggest decimal(12,2)"
# Aggregates a run patches (sums and counts of exact types, with count(*)).
PATCHED = {"revenue": "sum(amount)", "orders": "count(*)", "priced": "count(amount)"}
PATCHED_GOLD = "day date, customer_id bigint, revenue decimal(22,2), orders bigint, priced bigint"
# key, customer, amount, day (0..3), op (u | d), seq
Event = tuple[int, int, Decimal | None, int, str, int]


def with_gold(
    settings: Settings, source: str, aggregates: dict[str, str] | None = None, **extra: Any
) -> tuple[str, Settings]:
    name = f"g_{source}"
    spec = GoldTableSettings(
        source=source,
        group_by={"day": "to_date(timestamp_millis(ts))", "customer_id": "customer_id"},
        aggregates=aggregates
        or {"revenue": "sum(amount)", "orders": "count(*)", "biggest": "max(amount)"},
        **extra,
    )
    return name, replace(settings, gold={**settings.gold, name: spec})


def with_a_small_group(
    spark: SparkSession, settings: Settings, action: str
) -> tuple[str, Settings]:
    """Gold over an offline setup's realtime table with two rules, `small_groups` (orders < 2,
    with `action`) and `big_spender` (revenue < 100, warn), and three orders applied: customer
    1's group passes `small_groups` and fails `big_spender`, customer 2's the other way round."""
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    rules = (
        ExpectationSettings("small_groups", action, sql="orders < 2"),
        ExpectationSettings("big_spender", "warn", sql="revenue < 100"),
    )
    name, settings = with_gold(settings, realtime, expectations=rules)
    events = [
        (1, 1, Decimal("150.00"), 0, "u", 1),
        (2, 2, Decimal("5.00"), 0, "u", 2),
        (3, 2, Decimal("6.00"), 0, "u", 3),  # customer 2 on day 0: 2 orders
    ]
    apply_events(spark, realtime_path(settings, offline), events)
    return name, settings


def apply_events(spark: SparkSession, path: str, events: Sequence[Event]) -> None:
    rows = [
        (key, customer, "paid", amount, ms(T0 + timedelta(days=day, hours=key % 24)), None, op, seq)
        for key, customer, amount, day, op, seq in events
    ]
    apply_scd1(spark, path, spark.createDataFrame(rows, CHANGES), ["order_id"])


def amounts(delivered: Sequence[Event]) -> dict[tuple[date, int], list[Decimal | None]]:
    """Per group, the amounts of its orders: per key the delivered event with the highest
    position (a delete removes the key), in Python."""
    latest: dict[int, Event] = {}
    for event in delivered:
        if event[0] not in latest or event[5] > latest[event[0]][5]:
            latest[event[0]] = event
    groups: dict[tuple[date, int], list[Decimal | None]] = defaultdict(list)
    for key, customer, amount, day, op, _seq in latest.values():
        if op == "u":
            groups[((T0 + timedelta(days=day, hours=key % 24)).date(), customer)].append(amount)
    return groups


def model(spark: SparkSession, delivered: Sequence[Event]) -> DataFrame:
    """What gold must hold (amounts are never null here)."""
    rows = [(d, c, sum(a), len(a), max(a)) for (d, c), a in amounts(delivered).items()]  # type: ignore[arg-type,type-var]
    return spark.createDataFrame(rows, GOLD)


def patched_model(spark: SparkSession, delivered: Sequence[Event]) -> DataFrame:
    """What a gold table of PATCHED must hold: SQL's sum is NULL over no non-null value."""
    rows = []
    for (d, c), values in amounts(delivered).items():
        known = [a for a in values if a is not None]
        rows.append((d, c, sum(known) if known else None, len(values), len(known)))
    return spark.createDataFrame(rows, PATCHED_GOLD)


def gold_rows(spark: SparkSession, settings: Settings, name: str) -> DataFrame:
    return spark.read.format("delta").load(gold_path(settings, name))


def assert_gold(spark: SparkSession, settings: Settings, name: str, expected: DataFrame) -> None:
    assert_df_equality(
        gold_rows(spark, settings, name),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_column_order=True,
    )


def random_events(rng: random.Random, count: int, nulls: float = 0.0) -> list[Event]:
    """Upserts and deletes of 15 keys over 3 customers and 4 days; with `nulls`, that share
    of the amounts is NULL and some are zero or negative."""
    events: list[Event] = []
    for seq in range(1, count + 1):
        key = rng.randint(1, 15)
        if rng.random() < 0.2:
            events.append((key, 0, Decimal(0), 0, "d", seq))
            continue
        amount: Decimal | None = Decimal(rng.randint(1, 50_000)) / 100
        if nulls and rng.random() < nulls:
            amount = None
        elif nulls:
            amount = rng.choice([amount, Decimal("0.00"), Decimal(rng.randint(-3, 3))])
        events.append((key, rng.randint(1, 3), amount, rng.randint(0, 3), "u", seq))
    return events


class Crashed(Exception):
    """A run stopped at a fault point (in this process: what it left on disk is the subject)."""


def crash_at(point: str) -> Any:
    """A stand-in for `faults.point` that stops the run at `point`."""

    def crash(at: str) -> None:
        if at == point:
            raise Crashed(at)

    return crash
