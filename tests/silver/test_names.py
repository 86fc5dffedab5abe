"""Column names as real feeds and tables write them: a dot (`order.id`, which Spark reads as a
field of a struct unless quoted), a dash. Every column silver names in its work (a key,
`sequence_by`, an exploded array, a TOAST column, a tombstone's key) is a column of that name,
never a path into another. A name Delta cannot give a column (a space, a comma, ...) fails at
start naming the setting, and under `schema_drift: evolve` stays rescued. (chispa's
`ignore_row_order` sorts by unquoted names, so the tests order the rows themselves.)"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from lakehouse.core import kafka, tables
from lakehouse.core.settings import Settings, SettingsError
from tests.bronze.helpers import new_source, run_ingest
from tests.silver.helpers import (
    change,
    current,
    events_pipeline,
    produce,
    quarantine,
    rule,
    run_refine,
    silver_table,
    with_silver,
)

PLACEHOLDER = "__debezium_unavailable_value"


def test_an_upsert_keyed_ordered_and_exploded_by_dotted_names_keeps_the_newest_per_key(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Keyed by `order.id` and the position in `line.items`, ordered by `event.ts`: the third
    event is older than the second for position 0 and the only one left for position 1; the
    fifth has no `order.id`, which a rule on that column quarantines."""
    schema = "`order.id` INT, `event.ts` TIMESTAMP, `unit-price` DOUBLE, `line.items` ARRAY<STRING>"
    events: list[object] = [
        {"order.id": 1, "event.ts": "2024-01-01T00:00:00Z", "unit-price": 1.5, "line.items": ["a"]},
        {"order.id": 1, "event.ts": "2024-01-01T00:00:02Z", "unit-price": 2.5, "line.items": ["c"]},
        {
            "order.id": 1,
            "event.ts": "2024-01-01T00:00:01Z",
            "unit-price": 9.5,
            "line.items": ["x", "y"],
        },
        {"order.id": 2, "event.ts": "2024-01-01T00:00:00Z", "unit-price": 3.0, "line.items": []},
        {"event.ts": "2024-01-01T00:00:00Z", "unit-price": 4.0, "line.items": ["z"]},
    ]
    # Great Expectations rules name a column the same way (a dash was refused, a dot read as
    # a struct's field); the range rule passes with 4 of its 6 rows in range
    # (`mostly` 0.6; 9.5 is out, twice).
    rules = (
        rule(
            "has_id", "quarantine", expect="expect_column_values_to_not_be_null", column="order.id"
        ),
        rule(
            "price_range",
            "fail",
            expect="expect_column_values_to_be_between",
            column="unit-price",
            min_value=0,
            max_value=5,
            mostly=0.6,
        ),
    )
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        mode="upsert",
        schema=schema,
        keys=("order.id", "line.items_pos"),
        sequence_by="event.ts",
        explode=("line.items",),
        expectations=rules,
    )
    run_refine(spark, settings, name)

    expected = spark.createDataFrame(
        [
            (1, datetime(2024, 1, 1, 0, 0, 1), 9.5, 1, "y"),
            (1, datetime(2024, 1, 1, 0, 0, 2), 2.5, 0, "c"),
            (2, datetime(2024, 1, 1, 0, 0, 0), 3.0, None, None),
        ],
        "`order.id` INT, `event.ts` TIMESTAMP, `unit-price` DOUBLE, `line.items_pos` INT, "
        "`line.items` STRING",
    )
    columns = [f"`{c}`" for c in expected.columns]
    actual = current(spark, settings, name).select(*columns).orderBy(*columns)
    assert_df_equality(actual, expected, ignore_nullable=True)
    refused = quarantine(spark, settings, name).select("offset", "failed_rules")
    assert [tuple(r) for r in refused.collect()] == [(4, ["has_id"])]


def test_a_cdc_table_keyed_by_a_dotted_name_resolves_toast_and_tombstones_by_that_column(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """`row.id` keys a CDC table whose `long.text` Debezium leaves out when unchanged (its
    placeholder), and whose deletes arrive as a tombstone alone (the flattening SMT's default):
    both resolved from silver's row, written by an earlier batch."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    schema = "`row.id` INT, `long.text` STRING, `n-1` INT"
    name, settings = with_silver(settings, source, mode="scd1", schema=schema, keys=("row.id",))

    def send(records: list[tuple[int, bytes | None]]) -> None:
        keyed = [(json.dumps({"row.id": k}).encode(), v, 0) for k, v in records]
        kafka.produce(settings.kafka, topic, keyed)
        run_ingest(spark, settings, source, kind="cdc")
        run_refine(spark, settings, name)

    send(
        [
            (1, change("c", 100, after={"row.id": 1, "long.text": "hello", "n-1": 1})),
            (2, change("c", 110, after={"row.id": 2, "long.text": "bye", "n-1": 1})),
        ]
    )
    send(
        [
            (1, change("u", 120, after={"row.id": 1, "long.text": PLACEHOLDER, "n-1": 2})),
            (1, change("u", 130, after={"row.id": 1, "long.text": PLACEHOLDER, "n-1": 3})),
            (2, None),
        ]
    )

    expected = spark.createDataFrame([(1, "hello", 3)], schema)
    actual = current(spark, settings, name).select("`row.id`", "`long.text`", "`n-1`")
    assert_df_equality(actual, expected, ignore_nullable=True)


def test_a_name_no_column_can_have_fails_at_start_and_an_evolved_one_stays_rescued(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Declared, `unit price` (or a field of a struct in an array named so, or a name with a
    backtick) fails before anything is written, naming the table's schema; arriving under
    `schema_drift: evolve`, such a field, at any depth, stays in `_rescued_data` while
    `new.field` becomes a column, in one batch and the next. So does an empty name (JSON
    allows `""`; evolve made it a column with no name)."""
    first = {"id": 1, "unit price": 2.5, "new.field": "x", "meta": {"a b": 1}}
    events: list[object] = [{**first, "": 0}]
    source, topic, _, settings = events_pipeline(
        spark, kafka_up, events, mode="append", schema="id INT"
    )
    for schema, named in [
        ("id INT, `unit price` DOUBLE", "'unit price'"),
        ("id INT, items ARRAY<STRUCT<`a=b`: INT>>", "'items.a=b'"),
        ("id INT, `tick``s` INT", "'tick`s'"),
    ]:
        name, declared = with_silver(settings, source, mode="append", schema=schema)
        with pytest.raises(SettingsError, match=rf"silver\.{name}\.schema: {named} cannot"):
            run_refine(spark, declared, name)
        assert not tables.exists(spark, declared.storage.path("silver", name))

    name, settings = with_silver(
        settings, source, mode="append", schema="id INT", schema_drift="evolve"
    )
    run_refine(spark, settings, name)
    second = {"id": 2, "unit price": 3.5, "new.field": "y", "meta": {"a b": 2}, "": 9}
    produce(settings, topic, [second])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [
            (1, '{"unit price":"2.5","meta":"{\\"a b\\":1}","":"0"}', "x"),
            (2, '{"unit price":"3.5","meta":"{\\"a b\\":2}","":"9"}', "y"),
        ],
        "id INT, _rescued_data STRING, `new.field` STRING",
    )
    actual = silver_table(spark, settings, name).select("id", "_rescued_data", "`new.field`")
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)


def test_an_evolved_field_named_like_a_column_but_for_case_stays_rescued(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Spark and Delta tell column names apart without case: `ID` beside `id`, or `Note`
    beside `note`, cannot both be columns. Under `schema_drift: evolve` such fields stay in
    `_rescued_data` (both of two new ones: neither is the right one to keep), as do fields
    named like silver's own columns (`__deleted`, as Debezium's unwrap adds, `_lh_*`,
    `_rescued_data`), while `extra` becomes a column, in one batch and the next; nothing
    fails and nothing is lost. (Each made the batch fail, and so every batch after it.)"""
    first = {"id": 1, "ID": 5, "note": "a", "Note": "b", "extra": 1, "__deleted": "false"}
    more = {"_lh_error": "x", "_rescued_data": "y", "meta": {"a": 1, "A": 2}}
    events: list[object] = [{**first, **more}]
    source, topic, _, settings = events_pipeline(
        spark, kafka_up, events, mode="append", schema="id INT"
    )
    name, settings = with_silver(
        settings, source, mode="append", schema="id INT", schema_drift="evolve"
    )
    run_refine(spark, settings, name)
    produce(settings, topic, [{"id": 2, "Id": 6, "extra": 2, "EXTRA": 3}])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [
            (
                1,
                '{"ID":"5","note":"a","Note":"b","__deleted":"false",'
                '"_lh_error":"x","_rescued_data":"y","meta":"{\\"a\\":1,\\"A\\":2}"}',
                1,
            ),
            (2, '{"Id":"6","EXTRA":"3"}', 2),
        ],
        "id INT, _rescued_data STRING, extra BIGINT",
    )
    actual = silver_table(spark, settings, name)
    assert [
        c for c in actual.columns if c.lower() in ("id", "note", "extra", "__deleted", "meta.a")
    ] == [
        "id",
        "extra",
    ]
    assert_df_equality(
        actual.select("id", "_rescued_data", "extra").orderBy("id"), expected, ignore_nullable=True
    )


def test_declared_names_equal_but_for_case_or_named_like_silvers_own_fail_at_start(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """`ID` beside `id`, or a column named like silver's own (`__deleted`, the tombstone flag
    of an upsert table; `_rescued_data`; a `_lh_*` column of the batch), fails before anything
    is written, naming the table's schema and the names."""
    source, _, _, settings = events_pipeline(
        spark, kafka_up, [{"id": 1}], mode="append", schema="id INT"
    )
    for schema, named in [
        ("id INT, ID INT", "'id', 'ID'"),
        ("id INT, meta STRUCT<a: INT, A: INT>", "'meta.a', 'meta.A'"),
        ("id INT, __deleted STRING", "'__deleted'"),
        ("id INT, _rescued_data STRING", "'_rescued_data'"),
        ("id INT, _LH_error STRING", "'_LH_error'"),
    ]:
        name, declared = with_silver(
            settings, source, mode="upsert", keys=("id",), sequence_by="id", schema=schema
        )
        with pytest.raises(SettingsError, match=rf"silver\.{name}\.schema: {named} "):
            run_refine(spark, declared, name)
        assert not tables.exists(spark, declared.storage.path("silver", name))
