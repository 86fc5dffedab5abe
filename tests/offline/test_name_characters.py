"""Nested names that SQL gives a meaning (HTTP headers' `content-type`, `x:y`) in the
offline layer: the hybrid view and a backfill's input read them as ordinary names.
(Silver's side: `tests/silver/test_name_characters.py`.)"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core.settings import Settings
from lakehouse.offline import hybrid
from lakehouse.offline.backfill import BackfillOptions, backfill
from lakehouse.offline.move import MoveOptions, realtime_to_offline
from lakehouse.silver.changes import OP, SEQ
from lakehouse.silver.scd1 import apply_scd1
from tests.offline.helpers import (
    ORDER_COLUMNS,
    T0,
    ms,
    offline_setup,
    order,
    realtime_path,
    upsert,
)

H = timedelta(hours=1)
META = "STRUCT<`content-type`: STRING, `x:y`: STRING>"


def test_a_nested_column_the_realtime_table_gained_after_a_move_reads_as_null_from_offline(
    spark: SparkSession, settings: Settings
) -> None:
    """The view reads a column the offline table does not have yet as a typed null: the type
    was printed with its nested names unquoted, which no SQL parser reads back, so the view
    failed (ParseException) until the next move."""
    offline, settings = offline_setup(spark, settings)
    upsert(spark, settings, offline, [order(1, T0 + 0.5 * H)])
    realtime_to_offline(spark, settings, MoveOptions(offline, T0 + 2 * H + timedelta(minutes=5)))
    path = realtime_path(settings, offline)
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (meta {META})")
    changes = spark.createDataFrame(
        [(*order(2, T0 + 2.5 * H), None, ("text/csv", "z"), "u", 10**9)],
        f"{ORDER_COLUMNS}, meta {META}, {OP} STRING, {SEQ} BIGINT",
    )
    apply_scd1(spark, path, changes, ["order_id"])
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        spark.createDataFrame(
            [
                (*order(1, T0 + 0.5 * H), None, None),
                (*order(2, T0 + 2.5 * H), None, ("text/csv", "z")),
            ],
            f"{ORDER_COLUMNS}, meta {META}",
        ),
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_a_backfilled_struct_read_by_spark_json_keeps_its_nested_names(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    """A struct with a field named with both quote characters has no VARIANT path, so it is
    read from its JSON text by Spark's JSON reader, given the type: printed with
    `content-type` unquoted, the backfill failed on a ParseException before reading a row."""
    doc = 'STRUCT<`content-type`: STRING, `"it\'s"`: STRING>'
    columns = f"order_id BIGINT, doc {doc}, ts BIGINT, _rescued_data STRING"
    offline, settings = offline_setup(spark, settings, columns=columns)
    at = ms(T0 + 0.5 * H)
    record = {"order_id": 1, "doc": {"content-type": "text/csv", '"it\'s"': "x"}, "ts": at}
    path = tmp_path / "fix.jsonl"
    path.write_text(json.dumps(record) + "\n")
    now = T0 + 8 * H
    backfill(spark, settings, BackfillOptions(offline, str(path), T0, T0 + 2 * H, now=now))
    assert_df_equality(
        hybrid.read_hybrid(spark, settings, offline),
        spark.createDataFrame([(1, ("text/csv", "x"), at, None)], columns),
        ignore_nullable=True,
    )
