"""build_gold against real Delta tables: after any sequence of inserts, updates that move a
row to another group, deletes, duplicates and out-of-order events, cut into arbitrary runs,
gold equals a full recompute computed independently (in Python) from the events."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from pyspark.sql import SparkSession

from lakehouse.core import compaction, system, tables
from lakehouse.core.settings import Settings, SettingsError
from lakehouse.core.specs import ExpectationSettings, GoldTableSettings
from lakehouse.gold.build import GoldOptions, build_gold, gold_path
from lakehouse.gold.patch import Term, terms
from lakehouse.silver import refine
from lakehouse.silver.plan import SILVER_PROPERTIES
from lakehouse.silver.scd1 import scd1_schema
from lakehouse.status import gold_summary
from tests.gold.helpers import (
    GOLD,
    PATCHED,
    PATCHED_GOLD,
    Event,
    apply_events,
    assert_gold,
    gold_rows,
    model,
    patched_model,
    random_events,
    with_a_small_group,
    with_gold,
)
from tests.offline.helpers import (
    T0,
    offline_setup,
    realtime_path,
    row_schema,
)


@pytest.mark.parametrize(
    ("seed", "patched"), [(1, False), (2, False), (3, False), (4, True), (5, True), (6, True)]
)
def test_property_gold_equals_a_full_recompute_after_every_run(
    spark: SparkSession, settings: Settings, seed: int, patched: bool
) -> None:
    """Recomputed (max cannot be patched) or patched (sums and counts: NULL amounts, and sums
    that fall to zero or to no non-null value, included)."""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime, aggregates=PATCHED if patched else None)
    events = random_events(rng, 90, nulls=0.3 if patched else 0.0)
    delivered = events + rng.sample(events, 15)  # at-least-once: some arrive twice
    rng.shuffle(delivered)  # and out of order
    path = realtime_path(settings, offline)
    expected, how = (patched_model, " patched and ") if patched else (model, " recomputed and ")
    done: list[Event] = []
    start = 0
    while start < len(delivered):
        batch = delivered[start : start + rng.randint(1, 25)]
        start += len(batch)
        apply_events(spark, path, batch)
        done += batch
        if rng.random() < 0.6 or start >= len(delivered):  # runs cut anywhere
            result = build_gold(spark, settings, GoldOptions(name)).describe()
            assert_gold(spark, settings, name, expected(spark, done))
            assert any(part in result for part in (": up to date", "rebuilt run 1:", how)), result


def test_only_sums_and_counts_of_exact_values_with_a_count_of_rows_are_patched(
    spark: SparkSession,
) -> None:
    empty = spark.createDataFrame([], "amount decimal(12,2), qty int, price double, s string")
    rows = {"orders": "count(*)"}
    patchable = [
        ({"revenue": "sum(amount)"}, [Term("revenue", "sum", "amount")]),
        ({"units": " SUM( qty * 2 ) "}, [Term("units", "sum", "qty * 2")]),
        ({"n": "count(s)"}, [Term("n", "count", "s")]),
        ({"n": "count(concat(s, ')'))"}, [Term("n", "count", "concat(s, ')')")]),
    ]
    for aggregates, found in patchable:
        gold = GoldTableSettings(source="x", group_by={"g": "s"}, aggregates={**aggregates, **rows})
        assert terms(gold, empty) == [*found, Term("orders", "count", "*")], aggregates
    kept = [
        "sum(price)",  # a floating-point sum depends on its order
        "max(amount)",
        "count(DISTINCT s)",
        "sum(amount) + sum(qty)",
        "sum(amount) / count(*)",
        "count(*) FILTER (WHERE qty > 0)",
        "count(qty, s)",
        "sum(nothing)",
    ]
    for sql in kept:
        gold = GoldTableSettings(source="x", group_by={"g": "s"}, aggregates={"v": sql, **rows})
        assert terms(gold, empty) is None, sql
    no_rows = GoldTableSettings(source="x", group_by={"g": "s"}, aggregates={"n": "count(s)"})
    assert terms(no_rows, empty) is None  # nothing tells a group that lost its last row
    dropping = GoldTableSettings(
        source="x",
        group_by={"g": "s"},
        aggregates=rows,
        expectations=(ExpectationSettings("big", "drop", sql="orders > 1"),),
    )
    assert terms(dropping, empty) is None


def test_a_patched_sum_that_falls_to_zero_is_recomputed_to_tell_zero_from_null(
    spark: SparkSession, settings: Settings
) -> None:
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime, aggregates=PATCHED)
    path = realtime_path(settings, offline)
    first: list[Event] = [
        (1, 1, Decimal("10.00"), 0, "u", 1),  # customer 1: 10.00 and NULL
        (2, 1, None, 0, "u", 2),
        (3, 2, Decimal("7.00"), 0, "u", 3),  # customer 2: 7.00, -7.00 and 3.00
        (4, 2, Decimal("-7.00"), 0, "u", 4),
        (5, 2, Decimal("3.00"), 0, "u", 5),
        (6, 3, Decimal("5.00"), 0, "u", 6),  # customer 3: 5.00
    ]
    apply_events(spark, path, first)
    build_gold(spark, settings, GoldOptions(name))
    later: list[Event] = [
        (1, 1, None, 0, "u", 7),  # no non-null amount left: NULL
        (5, 0, Decimal(0), 0, "d", 8),  # 7.00 - 7.00: a true zero
        (6, 3, Decimal("0.00"), 0, "u", 9),  # a zero amount: zero, no recompute needed
    ]
    apply_events(spark, path, later)
    result = build_gold(spark, settings, GoldOptions(name)).describe()
    assert " 3 group row(s) patched and written or deleted" in result, result
    day = T0.date()
    expected = [
        (day, 1, None, 2, 0),
        (day, 2, Decimal("0.00"), 2, 2),
        (day, 3, Decimal("0.00"), 1, 1),
    ]
    assert_gold(spark, settings, name, spark.createDataFrame(expected, PATCHED_GOLD))


def test_a_run_recomputes_only_the_groups_a_change_touched(
    spark: SparkSession, settings: Settings
) -> None:
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime)
    path = realtime_path(settings, offline)
    first = [(1, 1, Decimal("10.00"), 0, "u", 1), (2, 2, Decimal("20.00"), 1, "u", 2)]
    apply_events(spark, path, first)
    build_gold(spark, settings, GoldOptions(name))
    # Order 1 moves to customer 3 and day 2; order 2 is deleted; nothing else changes.
    later = [(1, 3, Decimal("15.00"), 2, "u", 3), (2, 0, Decimal(0), 0, "d", 4)]
    apply_events(spark, path, later)
    result = build_gold(spark, settings, GoldOptions(name))
    assert result.groups == 3  # the old and new group of order 1, and order 2's
    assert " recomputed and written" in result.describe()  # max() cannot be patched
    assert_gold(spark, settings, name, model(spark, first + later))
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", tables.latest_version(spark, gold_path(settings, name)))
        .load(gold_path(settings, name))
    )
    assert sorted(r["_change_type"] for r in feed.collect()) == ["delete", "delete", "insert"]
    # Nothing new: nothing to do.
    assert build_gold(spark, settings, GoldOptions(name)).plan is None


def test_a_changed_definition_rebuilds_every_group_not_only_the_touched_ones(
    spark: SparkSession, settings: Settings
) -> None:
    """Recomputing only the touched groups after the YAML changed would leave the others at
    the old definition, silently (same column types: the MERGE takes them)."""
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime)
    path = realtime_path(settings, offline)
    first = [
        (1, 1, Decimal("10.00"), 0, "u", 1),
        (2, 1, Decimal("20.00"), 0, "u", 2),
        (3, 2, Decimal("5.00"), 1, "u", 3),
    ]
    apply_events(spark, path, first)
    build_gold(spark, settings, GoldOptions(name))
    spec = settings.gold[name]
    tenfold = replace(spec, aggregates={**spec.aggregates, "orders": "count(*) * 10"})
    settings = replace(settings, gold={**settings.gold, name: tenfold})
    apply_events(spark, path, [(3, 2, Decimal("6.00"), 1, "u", 4)])  # touches day 1 only
    result = build_gold(spark, settings, GoldOptions(name)).describe()
    day0, day1 = T0.date(), (T0 + timedelta(days=1)).date()
    expected = [
        (day0, 1, Decimal("30.00"), 20, Decimal("20.00")),
        (day1, 2, Decimal("6.00"), 10, Decimal("6.00")),
    ]
    assert_gold(spark, settings, name, spark.createDataFrame(expected, GOLD))
    assert result.startswith(f"gold.{name}: rebuilt run 1:"), result
    (refresh,) = system.read_log(spark, settings, system.GOLD_LOG, f"gold.{name}")
    assert (refresh["event"], refresh["reason"]) == (
        "full_refresh",
        "its definition in conf/*/gold.yml changed since the last build",
    )
    # The same definition again: incremental.
    apply_events(spark, path, [(2, 1, Decimal("21.00"), 0, "u", 5)])
    again = build_gold(spark, settings, GoldOptions(name)).describe()
    assert again.startswith(f"gold.{name}: incremental run 2:"), again


@pytest.mark.parametrize("aggregates", [None, PATCHED], ids=["recomputed", "patched"])
def test_a_source_table_rebuilt_under_gold_rebuilds_gold(
    spark: SparkSession, settings: Settings, aggregates: dict[str, str] | None
) -> None:
    """A silver full refresh starts the table's versions over: the same version numbers are
    other commits, so neither "up to date" nor its change feed can be trusted."""
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime, aggregates=aggregates)
    path = realtime_path(settings, offline)
    before: list[Event] = [(1, 1, Decimal("10.00"), 0, "u", 1), (2, 2, Decimal("20.00"), 1, "u", 2)]
    apply_events(spark, path, before)
    build_gold(spark, settings, GoldOptions(name))
    refine.full_refresh(spark, settings, realtime)  # then refine_silver starts it over
    assert not tables.exists(spark, path)
    tables.create_table(spark, path, scd1_schema(row_schema()), SILVER_PROPERTIES)
    after: list[Event] = [(3, 1, Decimal("5.00"), 2, "u", 1)]  # the same number of versions
    apply_events(spark, path, after)
    result = build_gold(spark, settings, GoldOptions(name)).describe()
    expected = patched_model if aggregates else model
    assert_gold(spark, settings, name, expected(spark, after))
    assert result.startswith(f"gold.{name}: rebuilt run 1:"), result
    (refresh,) = system.read_log(spark, settings, system.GOLD_LOG, f"gold.{name}")
    assert refresh["reason"] == (
        f"silver.{realtime} is not the table the last build read (rebuilt since)"
    )


def test_bad_aggregates_fail_before_anything_is_written(
    spark: SparkSession, settings: Settings
) -> None:
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime)
    spec = settings.gold[name]
    broken = replace(spec, aggregates={**spec.aggregates, "margin": "sum(profit)"})
    settings = replace(settings, gold={**settings.gold, name: broken})
    with pytest.raises(SettingsError, match=rf"'gold\.{name}\.aggregates\.margin' is not valid"):
        build_gold(spark, settings, GoldOptions(name))
    assert not tables.exists(spark, gold_path(settings, name))
    not_an_aggregate = replace(spec, aggregates={"status": "order_status"})
    settings = replace(settings, gold={**settings.gold, name: not_an_aggregate})
    with pytest.raises(SettingsError, match=r"aggregates\.status' is not valid"):
        build_gold(spark, settings, GoldOptions(name))


def test_expectations_on_gold_rows_warn_drop_and_count(
    spark: SparkSession, settings: Settings
) -> None:
    name, settings = with_a_small_group(spark, settings, "drop")
    build_gold(spark, settings, GoldOptions(name))
    assert [r["customer_id"] for r in gold_rows(spark, settings, name).collect()] == [1]
    metrics = spark.read.format("delta").load(system.path(settings, system.METRICS))
    counts = {
        r["rule"]: (r["passed"], r["failed"])
        for r in metrics.where(f"`table` = 'gold.{name}'").collect()
    }
    assert counts == {"small_groups": (1, 1), "big_spender": (1, 1)}


@pytest.mark.parametrize("patched", [False, True], ids=["recomputed", "patched"])
def test_compactions_of_the_source_and_of_gold_change_no_gold_row(
    spark: SparkSession, settings: Settings, patched: bool
) -> None:
    """Every second commit of the source and of gold compacts it (`storage.compact_every` 2):
    a compaction rewrites files, adds nothing to the change feed a run reads, and is not a
    build (the next run finds the last build behind it)."""
    rng = random.Random(11)  # noqa: S311 - reproducible test data
    offline, settings = offline_setup(spark, settings)
    settings = replace(settings, storage=replace(settings.storage, compact_every=2))
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(settings, realtime, aggregates=PATCHED if patched else None)
    events = random_events(rng, 60, nulls=0.3 if patched else 0.0)
    path = realtime_path(settings, offline)
    expected = patched_model if patched else model
    for start in range(0, len(events), 10):
        apply_events(spark, path, events[start : start + 10])
        compaction.compact_when_due(spark, path, 2)
        build_gold(spark, settings, GoldOptions(name))
        assert_gold(spark, settings, name, expected(spark, events[: start + 10]))
    for table in (path, gold_path(settings, name)):
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
        assert [r["operation"] for r in history].count("OPTIMIZE") >= 2, table
    up_to_date = f"gold.{name}: up to date"
    assert build_gold(spark, settings, GoldOptions(name)).describe() == up_to_date
    # A compaction alone is nothing to build: no run, no lag.
    apply_events(spark, path, [(99, 1, Decimal("1.00"), 0, "u", 999)])
    build_gold(spark, settings, GoldOptions(name))
    built = tables.latest_version(spark, gold_path(settings, name))
    compacted = compaction.compact_when_due(spark, path, 1)
    assert compacted is not None
    assert (tables.commit_info(spark, path, compacted) or {})["operation"] == "OPTIMIZE"
    (row,) = gold_summary(spark, settings).where(f"table = 'gold.{name}'").collect()
    assert row["source_lag"] == 0
    assert build_gold(spark, settings, GoldOptions(name)).describe() == up_to_date
    assert tables.latest_version(spark, gold_path(settings, name)) == built
    apply_events(spark, path, [(99, 2, Decimal("2.00"), 1, "u", 1000)])
    (row,) = gold_summary(spark, settings).where(f"table = 'gold.{name}'").collect()
    assert row["source_lag"] == 1
    build_gold(spark, settings, GoldOptions(name))
    final = [*events, (99, 1, Decimal("1.00"), 0, "u", 999), (99, 2, Decimal("2.00"), 1, "u", 1000)]
    assert_gold(spark, settings, name, expected(spark, final))
