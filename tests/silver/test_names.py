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
    allows `""`; evolve made it a column with no name), and the batch's other new fields still
    get the types their values have (`qty` a number, `paid` a boolean)."""
    first = {"id": 1, "unit price": 2.5, "new.field": "x", "meta": {"a b": 1}, "qty": 3}
    first |= {"paid": True}
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
    second = {"id": 2, "unit price": 3.5, "new.field": "y", "meta": {"a b": 2}, "": 9, "qty": 4}
    produce(settings, topic, [second])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [
            (1, '{"unit price":"2.5","meta":"{\\"a b\\":1}","":"0"}', "x", 3, True),
            (2, '{"unit price":"3.5","meta":"{\\"a b\\":2}","":"9"}', "y", 4, None),
        ],
        "id INT, _rescued_data STRING, `new.field` STRING, qty BIGINT, paid BOOLEAN",
    )
    columns = ("id", "_rescued_data", "`new.field`", "qty", "paid")
    actual = silver_table(spark, settings, name).select(*columns)
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)


def test_an_evolved_field_named_like_a_column_but_for_case_stays_rescued(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Spark and Delta tell column names apart without case: `ID` beside `id`, or `Note`
    beside `note`, cannot both be columns. Under `schema_drift: evolve` such fields stay in
    `_rescued_data` (both of two new ones: neither is the right one to keep), as do fields
    named like silver's own columns (`__deleted`, as Debezium's unwrap adds, `_lh_*`,
    `_rescued_data`, `_commit_version` of Delta's Change Data Feed) and structs whose
    flattened columns meet another's (`pair: {y}` beside `pair_y`; then `tag: {x}` beside the
    evolved `tag_x`), while `extra` and `tag_x` become columns, in one batch and the next;
    nothing fails and nothing is lost. (Each made the batch fail, and every batch after it.)"""
    first = {"id": 1, "ID": 5, "note": "a", "Note": "b", "extra": 1, "__deleted": "false"}
    more = {"_lh_error": "x", "_rescued_data": "y", "_commit_version": 3, "meta": {"a": 1, "A": 2}}
    flattened = {"tag_x": 7, "pair": {"y": 1}, "pair_y": 2}
    events: list[object] = [{**first, **more, **flattened}]
    source, topic, _, settings = events_pipeline(
        spark, kafka_up, events, mode="append", schema="id INT"
    )
    name, settings = with_silver(
        settings, source, mode="append", schema="id INT", schema_drift="evolve"
    )
    run_refine(spark, settings, name)
    produce(settings, topic, [{"id": 2, "Id": 6, "extra": 2, "EXTRA": 3, "tag": {"x": 8}}])
    run_ingest(spark, settings, source)
    run_refine(spark, settings, name)
    rescued = (
        '{"ID":"5","note":"a","Note":"b","__deleted":"false","_lh_error":"x","_rescued_data":"y",'
        '"_commit_version":"3","meta":"{\\"a\\":1,\\"A\\":2}","pair":"{\\"y\\":1}","pair_y":"2"}'
    )
    expected = spark.createDataFrame(
        [(1, rescued, 1, 7), (2, '{"Id":"6","EXTRA":"3","tag":"{\\"x\\":8}"}', 2, None)],
        "id INT, _rescued_data STRING, extra BIGINT, tag_x BIGINT",
    )
    actual = silver_table(spark, settings, name)
    seen = ("id", "note", "extra", "__deleted", "meta.a", "tag_x", "pair", "pair_y", "tag")
    assert [c for c in actual.columns if c.lower() in seen] == ["id", "extra", "tag_x"]
    columns = ("id", "_rescued_data", "extra", "tag_x")
    assert_df_equality(actual.select(*columns).orderBy("id"), expected, ignore_nullable=True)


def test_declared_names_equal_but_for_case_or_named_like_silvers_own_fail_at_start(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """`ID` beside `id`, a column named like silver's own (`__deleted`, the tombstone flag of
    an upsert table; `_rescued_data`; a `_lh_*` column of the batch; `_change_type`, which a
    read of the table's Change Data Feed adds), or columns that meet once structs are
    flattened or arrays exploded (`customer: {id}` beside `customer_id`, `items` exploded
    beside `items_pos`) fail before anything is written, naming the table's schema and the
    names."""
    source, _, _, settings = events_pipeline(
        spark, kafka_up, [{"id": 1}], mode="append", schema="id INT"
    )
    for schema, named, explode in [
        ("id INT, ID INT", "'id', 'ID'", ()),
        ("id INT, meta STRUCT<a: INT, A: INT>", "'meta.a', 'meta.A'", ()),
        ("id INT, __deleted STRING", "'__deleted'", ()),
        ("id INT, _rescued_data STRING", "'_rescued_data'", ()),
        ("id INT, _LH_error STRING", "'_LH_error'", ()),
        ("id INT, _Change_Type STRING", "'_Change_Type'", ()),
        ("id INT, customer STRUCT<id: INT>, customer_id INT", "'customer_id'", ()),
        ("id INT, _change STRUCT<type: STRING>", "'_change_type'", ()),
        ("id INT, items ARRAY<STRING>, ITEMS_pos INT", "'items_pos', 'ITEMS_pos'", ("items",)),
    ]:
        name, declared = with_silver(
            settings,
            source,
            mode="upsert",
            keys=("id",),
            sequence_by="id",
            schema=schema,
            explode=explode,
        )
        with pytest.raises(SettingsError, match=rf"silver\.{name}\.schema: {named} "):
            run_refine(spark, declared, name)
        assert not tables.exists(spark, declared.storage.path("silver", name))


# Names real records carry (MongoDB's `_id`, Cosmos DB's `_ts` and `_etag`) and names silver's
# working columns had while it refined a batch (a change's `_op`/`_seq`/`_arrival`, a window's
# `_rank`, the failed rules, an SCD2 history's `_up`/`_start`/`_s`/...): all of them columns.
WORKING = "_op STRING, _seq STRING, _arrival STRING, _rank INT, _failed_expectations STRING"
HISTORY = "_up STRING, _start STRING, _delete STRING, _snap STRING, _s STRING, _e STRING"
# The aliases silver's MERGE statements give the target, the changes and the keys.
ALIASES = "t STRING, s STRING, k STRING"


def test_record_fields_named_like_silvers_working_columns_are_kept_as_sent(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """An upsert table keyed by `_id` and ordered by `_ts` (a Cosmos DB feed) whose records
    carry `_op: "d"`, `_seq`, `_rank`, ...: the newest event per key wins by `_ts` alone, a
    rule on `_rank` quarantines its event, every value lands in its column; an append table
    of the same records keeps all that pass. (`_seq`/`_ts` were dropped without a word, `_op`
    failed the batch.)"""
    schema = f"_id STRING, _ts BIGINT, _etag STRING, {WORKING}"
    rows = [
        ("a", 1, "e1", "d", "s1", "x1", 1, "f1"),
        ("a", 3, "e3", "d", "s3", "x3", 3, "f3"),
        ("a", 2, "e2", "c", "s2", "x2", 2, "f2"),
        ("b", 2, "e4", "d", "s4", "x4", -1, "f4"),
        ("b", 1, "e5", "u", "s5", "x5", 5, "f5"),
    ]
    names = [c.split()[0] for c in schema.split(", ")]
    events: list[object] = [dict(zip(names, row, strict=True)) for row in rows]
    rules = (rule("ranked", "quarantine", "_rank >= 0"),)
    source, _, upsert, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        mode="upsert",
        schema=schema,
        keys=("_id",),
        sequence_by="_ts",
        expectations=rules,
    )
    append, settings = with_silver(
        settings, source, mode="append", schema=schema, expectations=rules
    )
    run_refine(spark, settings, upsert)
    run_refine(spark, settings, append)

    expected = spark.createDataFrame([rows[1], rows[4]], schema)
    actual = current(spark, settings, upsert).select(*names).orderBy("_id")
    assert_df_equality(actual, expected, ignore_nullable=True)
    kept = spark.createDataFrame([rows[0], rows[2], rows[1], rows[4]], schema)
    appended = silver_table(spark, settings, append).select(*names).orderBy("_id", "_etag")
    assert_df_equality(appended, kept.orderBy("_id", "_etag"), ignore_nullable=True)
    for name in (upsert, append):
        refused = quarantine(spark, settings, name).select("offset", "failed_rules")
        assert [tuple(r) for r in refused.collect()] == [(3, ["ranked"])]


def test_cdc_columns_named_like_silvers_working_columns_are_kept_as_sent(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """A PostgreSQL table may name a column `_op`, `_seq`, `_start`, ..., or `t`, `s` and `k`
    (the MERGE's aliases): SCD1 and SCD2 tables of it keep each column's values through
    creates, an update and a delete."""
    source, topic, settings = new_source(kafka_up, kind="cdc")
    schema = f"id INT, _ts STRING, {WORKING}, {HISTORY}, {ALIASES}"
    names = [c.split()[0] for c in schema.split(", ")]
    scd1, settings = with_silver(settings, source, mode="scd1", schema=schema, keys=("id",))
    scd2, settings = with_silver(settings, source, mode="scd2", schema=schema, keys=("id",))

    def row(key: int, tag: str) -> tuple[object, ...]:
        # `_rank` a number, `_op` a delete's letter, every other column its name and the tag
        return tuple(
            key if n == "id" else 7 if n == "_rank" else "d" if n == "_op" else f"{n}{tag}"
            for n in names
        )

    def after(values: tuple[object, ...]) -> dict[str, object]:
        return dict(zip(names, values, strict=True))

    def send(records: list[tuple[int, bytes]]) -> None:
        keyed = [(json.dumps({"id": k}).encode(), v, 0) for k, v in records]
        kafka.produce(settings.kafka, topic, keyed)
        run_ingest(spark, settings, source, kind="cdc")
        run_refine(spark, settings, scd1)
        run_refine(spark, settings, scd2)

    one, two, one_again = row(1, "a"), row(2, "a"), row(1, "b")
    send([(1, change("c", 100, after=after(one))), (2, change("c", 110, after=after(two)))])
    send(
        [
            (1, change("u", 120, before=after(one), after=after(one_again))),
            (2, change("d", 130, before=after(two))),
        ]
    )

    expected = spark.createDataFrame([one_again], schema)
    assert_df_equality(
        current(spark, settings, scd1).select(*names), expected, ignore_nullable=True
    )
    history = f"{schema}, __start_seq BIGINT, __end_seq BIGINT"
    versions = spark.createDataFrame(
        [(*one, 100, 120), (*one_again, 120, None), (*two, 110, 130)], history
    )
    columns = [*names, "__start_seq", "__end_seq"]
    actual = silver_table(spark, settings, scd2).select(*columns).orderBy("id", "__start_seq")
    assert_df_equality(actual, versions, ignore_nullable=True)
