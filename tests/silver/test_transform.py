"""Silver's pure transforms on bronze rows built in memory: no Kafka, no table."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.specs import SilverTableSettings
from lakehouse.silver.transform import event_records, parse_schema, silver_columns
from tests.silver.helpers import bronze_rows

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`


def refined(spark: SparkSession, values: list[object], table: SilverTableSettings) -> DataFrame:
    records = event_records(bronze_rows(spark, values), table, parse_schema(table.schema))
    return records.select(*[f"`{c}`" for c in silver_columns(records)])


def test_nested_structs_flatten_and_arrays_explode_keeping_empty_records(
    spark: SparkSession,
) -> None:
    events: list[object] = [
        {
            "order_id": 1,
            "customer": {"id": 7, "address": {"city": "Oslo"}},
            "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}],
        },
        {"order_id": 2, "customer": {"id": 8, "address": None}, "items": []},
    ]
    table = SilverTableSettings(
        source="src",
        mode="append",
        schema="order_id BIGINT, customer STRUCT<id: BIGINT, address: STRUCT<city: STRING>>, "
        "items ARRAY<STRUCT<sku: STRING, qty: INT>>",
        explode=("items",),
    )
    expected = spark.createDataFrame(
        [
            (1, 7, "Oslo", 0, "a", 2, None),
            (1, 7, "Oslo", 1, "b", 1, None),
            (2, 8, None, None, None, None, None),
        ],
        "order_id bigint, customer_id bigint, customer_address_city string, items_pos int, "
        "items_sku string, items_qty int, _rescued_data string",
    )
    assert_df_equality(
        refined(spark, events, table), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_unknown_and_mistyped_fields_are_rescued_never_dropped(spark: SparkSession) -> None:
    table = SilverTableSettings(source="src", mode="append", schema="id BIGINT, amount DOUBLE")
    events: list[object] = [
        {"id": 1, "amount": 2.5},
        {"id": 2, "amount": "lots", "note": "x"},
    ]
    expected = spark.createDataFrame(
        [(1, 2.5, None), (2, None, '{"amount":"lots","note":"x"}')],
        "id bigint, amount double, _rescued_data string",
    )
    assert_df_equality(
        refined(spark, events, table), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_a_record_with_a_lone_surrogate_escape_is_not_parsable_and_says_which(
    spark: SparkSession,
) -> None:
    """A `\\ud800` with no low surrogate after it (or a low one with no high one before it)
    is no character: Spark's JSON reader took it and stored `?` in its place. Such a record
    fails `parsable` (quarantine, raw text kept) naming the escape; a pair (an emoji), and an
    escaped backslash followed by `ud800`, are text, and a low half after such text is lone."""
    table = SilverTableSettings(source="src", mode="append", schema="v BIGINT, w STRING")
    values: list[object] = [
        b'{"v": 1, "w": "\\ud800"}',
        b'{"v": 2, "w": "\\ud83d\\ude00"}',
        b'{"v": 3, "w": "\\\\ud800"}',
        b'{"v": 4, "w": "\\uDC00x"}',
        b'{"v": 5, "w": "a\\ud83d"}',
        b'{"v": 6, "x": "\\ud800\\ud800\\udc00"}',  # an unknown field: rescued as `?` too
        b'{"v": 7, "w": "\\u00e9\\\\\\udbff"}',  # an escaped backslash, then a lone one
        b'{"v": 8, "w": "\\u00e9\\\\"}',
        # An escaped backslash and text that looks like a high half: the low one is lone.
        b'{"v": 9, "w": "\\\\ud800\\udc00"}',
    ]
    records = event_records(bronze_rows(spark, values), table, parse_schema(table.schema))
    lone = "invalid_unicode: lone surrogate "
    expected = spark.createDataFrame(
        [
            (0, None, lone + "\\ud800"),
            (1, "\U0001f600", None),
            (2, "\\ud800", None),
            (3, None, lone + "\\uDC00"),
            (4, None, lone + "\\ud83d"),
            (5, None, lone + "\\ud800"),
            (6, None, lone + "\\udbff"),
            (7, "\u00e9\\", None),
            (8, None, lone + "\\udc00"),
        ],
        "offset bigint, w string, _lh_error string",
    )
    assert_df_equality(
        records.selectExpr(
            "_lh_offset AS offset", "CASE WHEN _lh_error IS NULL THEN w END AS w", "_lh_error"
        ),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )


def test_a_record_that_names_a_field_twice_is_not_parsable_and_says_which(
    spark: SparkSession,
) -> None:
    """JSON leaves a repeated name to the reader: keeping either of two values would be a
    guess, so the record fails `parsable` (quarantine) naming the field. The same value twice
    is kept; nested objects are not checked."""
    table = SilverTableSettings(
        source="src", mode="append", schema="v BIGINT, w STRING, b BINARY, n STRUCT<x: INT>"
    )
    values: list[object] = [
        b'{"v": 1, "v": 2}',
        b'{"v": null, "v": 1}',
        b'{"v": "x", "v": 2, "w": "a", "w": "a", "b": "AQ==", "b": "Ag=="}',
        b'{"b": "AQ==", "b": "Ag==", "v": 3}',
        b'{"v": 4, "n": {"x": 1}}',
        b'{"V": 5, "v": 6}',  # names differ by case: the other case is an unknown field
        b'{"v": 7, "v": 7, "w": "a", "w": "b"}',
    ]
    records = event_records(bronze_rows(spark, values), table, parse_schema(table.schema))
    expected = spark.createDataFrame(
        [
            (0, "duplicate_key: v"),
            (1, "duplicate_key: v"),
            (2, "duplicate_key: v, b"),  # w holds the same value twice
            (3, "duplicate_key: b"),
            (4, None),
            (5, None),
            (6, "duplicate_key: w"),
        ],
        "offset bigint, _lh_error string",
    )
    assert_df_equality(
        records.selectExpr("_lh_offset AS offset", "_lh_error"),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )
