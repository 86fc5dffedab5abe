"""Gold as operators meet it: `lakehouse validate` passes and fails as declared, `lakehouse
status` lists each gold table with its last build and source lag."""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.core.specs import ExpectationSettings
from lakehouse.gold.build import GoldOptions, build_gold
from lakehouse.quality.validate import validate
from lakehouse.status import gold_summary
from tests.gold.helpers import apply_events, with_gold
from tests.offline.helpers import offline_setup, realtime_path


def test_validate_passes_and_fails_as_declared_and_status_shows_the_lag(
    spark: SparkSession, settings: Settings
) -> None:
    offline, settings = offline_setup(spark, settings)
    realtime = settings.offline_table(offline).realtime
    name, settings = with_gold(
        settings,
        realtime,
        expectations=(ExpectationSettings("small_revenue", "warn", sql="revenue < 100"),),
        table_expectations=(
            ExpectationSettings(
                "one_row_per_group",
                expect="expect_compound_columns_to_be_unique",
                kwargs={"column_list": ["day", "customer_id"]},
            ),
            ExpectationSettings(
                "has_rows", expect="expect_table_row_count_to_be_between", kwargs={"min_value": 1}
            ),
        ),
    )
    path = realtime_path(settings, offline)
    apply_events(spark, path, [(1, 1, Decimal("10.00"), 0, "u", 1)])
    build_gold(spark, settings, GoldOptions(name))

    report = validate(spark, settings, name)  # a bare name finds the gold table
    assert (report.table, report.success, report.rows) == (f"gold.{name}", True, 1)

    apply_events(spark, path, [(2, 1, Decimal("500.00"), 0, "u", 2)])
    (row,) = gold_summary(spark, settings).where(f"table = 'gold.{name}'").collect()
    assert (row["groups"], row["source_lag"]) == (1, 1)  # one source commit not built yet
    build_gold(spark, settings, GoldOptions(name))
    report = validate(spark, settings, f"gold.{name}")
    assert not report.success
    assert [(o.name, o.unexpected_count) for o in report.failed] == [("small_revenue", 1)]
    (row,) = gold_summary(spark, settings).where(f"table = 'gold.{name}'").collect()
    assert (row["groups"], row["source_lag"], row["last_run_rows_changed"]) == (1, 0, 1)
