"""Values as real feeds send them, through real Kafka, bronze and refine_silver: numbers as
JSON strings, timestamps as ISO-8601 strings, epoch seconds and epoch milliseconds. Every value
that holds a valid literal of its column's type is stored exactly; one that does not is rescued
(never rounded, truncated or read in the wrong unit) and counted per column in the metrics."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from lakehouse.core.settings import Settings
from tests.silver.helpers import current, events_pipeline, metrics, run_refine

SCHEMA = (
    "id BIGINT, qty INT, amount DECIMAL(12,2), price DOUBLE, paid BOOLEAN, day DATE, "
    "at_iso TIMESTAMP, at_s TIMESTAMP, at_ms TIMESTAMP, name STRING"
)
AT = datetime(2021, 9, 24, 6, 2, 31)
AT_MS = datetime(2021, 9, 24, 6, 2, 31, 250000)
WELL_TYPED = {
    "qty": 3,
    "amount": 13.29,
    "price": 1.5,
    "paid": True,
    "day": "2024-01-05",
    "at_iso": "2021-09-24T06:02:31Z",
    "at_s": 1632463351,
    "at_ms": 1632463351250,
}
AS_STRINGS = {
    "qty": "3",
    "amount": "13.290",
    "price": "1.5",
    "paid": "TRUE",
    "day": "2024-01-05",
    "at_iso": "2021-09-24T08:02:31+02:00",
    "at_s": "1632463351",
    "at_ms": "1632463351250",
}
MISTYPED = {
    "qty": "3.5",
    "amount": "13.299",
    "price": "n/a",
    "paid": "yes",
    "day": "05/01/2024",
    "at_iso": 1632463351,
    "at_s": "soon",
    "at_ms": "1632463351250",
}


def test_numbers_as_strings_and_every_timestamp_encoding_decode_exactly_or_are_rescued(
    spark: SparkSession, kafka_up: Settings
) -> None:
    events: list[object] = [
        {"id": 1, **WELL_TYPED, "name": "typed"},
        {"id": "2", **AS_STRINGS, "name": "strings"},
        {"id": 3, **MISTYPED, "name": 7},
        {"id": 4, **WELL_TYPED, "paid": 0, "name": "a digit"},  # MySQL's TINYINT(1)
    ]
    _, _, name, settings = events_pipeline(
        spark,
        kafka_up,
        events,
        mode="upsert",
        schema=SCHEMA,
        keys=("id",),
        sequence_by="at_ms",
        encodings={"at_s": "epoch_s", "at_ms": "epoch_ms"},
    )
    result = run_refine(spark, settings, name)
    assert (result.rows_written, result.rows_quarantined) == (4, 0)

    good: tuple[Any, ...] = (3, Decimal("13.29"), 1.5, True, date(2024, 1, 5), AT, AT, AT_MS)
    nothing = (None,) * 7
    expected = spark.createDataFrame(
        [
            (1, *good, "typed", None),
            (2, *good, "strings", None),
            (3, *nothing, AT_MS, "7", "rescued"),
            (4, 3, Decimal("13.29"), 1.5, False, date(2024, 1, 5), AT, AT, AT_MS, "a digit", None),
        ],
        f"{SCHEMA}, _rescued_data STRING",
    )
    actual = current(spark, settings, name)
    rescued = {r["id"]: r["_rescued_data"] for r in actual.collect()}
    assert json.loads(rescued[3]) == {k: str(v) for k, v in MISTYPED.items() if k != "at_ms"}, (
        "the rescued values are the text as sent"
    )
    assert_df_equality(
        actual.selectExpr("*", "CASE WHEN _rescued_data IS NOT NULL THEN 'rescued' END AS r")
        .drop("_rescued_data")
        .withColumnRenamed("r", "_rescued_data"),
        expected,
        ignore_row_order=True,
        ignore_nullable=True,
    )
    counted = {
        (r["rule"], r["action"], r["passed"], r["failed"])
        for r in metrics(spark, settings, name).where("rule LIKE 'decode:%'").collect()
    }
    assert counted == {
        (f"decode:{c}", "rescue", 3, 1)
        for c in ("qty", "amount", "price", "paid", "day", "at_iso", "at_s")
    }


def test_json_numbers_keep_every_digit_a_double_would_lose(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Spark's JSON functions read 12345678901234567.89 through a double (…568E16): stored,
    it would be off by 0.11. Epoch seconds with microseconds likewise lose the last digit."""
    schema = "id BIGINT, big DECIMAL(20,2), at_s TIMESTAMP"
    events: list[object] = [
        b'{"id": 1, "big": 12345678901234567.89, "at_s": 1632463351.123457}',
        b'{"id": 2, "big": 123456789012345678901.5, "at_s": 1632463351}',  # 21 digits: rescued
        # In exponent form the VARIANT, too, keeps only a double: the digits as written count.
        b'{"id": 3, "big": 1.234567890123456789E16, "at_s": 1632463351}',
        b'{"id": 4, "big": 1.2E+4, "at_s": 1632463351}',
        b'{"id": 5, "big": 1.0000000000000000001E8, "at_s": 1632463351}',  # 100000000.00…1
        # A nested `big` is told apart by its value; one written otherwise for the same
        # double cannot be: which digits were meant is unknown, so the value is rescued.
        b'{"id": 6, "big": 1.5E1, "nested": {"big": 2.5E1}, "at_s": 1632463351}',
        b'{"id": 7, "big": 1E8, "nested": {"big": 1.0000000000000000001E8}, "at_s": 1632463351}',
    ]
    _, _, name, settings = events_pipeline(
        spark, kafka_up, events, mode="append", schema=schema, encodings={"at_s": "epoch_s"}
    )
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [
            (1, Decimal("12345678901234567.89"), datetime(2021, 9, 24, 6, 2, 31, 123457), None),
            (2, None, AT, '{"big":"123456789012345678901.5"}'),
            (3, Decimal("12345678901234567.89"), AT, None),
            (4, Decimal("12000.00"), AT, None),
            (5, None, AT, '{"big":"1.0000000000000000001E8"}'),
            (6, Decimal("15.00"), AT, '{"nested":"{\\"big\\":25.0}"}'),
            (7, None, AT, '{"big":"1.0E8","nested":"{\\"big\\":1.0E8}"}'),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(
        current(spark, settings, name), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_a_json_number_a_double_would_round_is_never_stored_or_rescued_rounded(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Spark's JSON map prints every number with a fraction or an exponent through a double:
    3.0000000000000000001 read as 3.0 was stored in an INT column as 3, a STRING column held
    `1.2345678901234568E16` for 12345678901234567.89, and a rescued field lost its digits."""
    schema = "id BIGINT, qty INT, name STRING"
    events: list[object] = [
        b'{"id": 1, "qty": 3.0000000000000000001, "name": 12345678901234567.89, "x": 0.1E-7}',
        b'{"id": 2, "qty": 1.2E1, "name": 1e2, "x": 12345678901234567.89}',
        # 41 digits: the VARIANT, too, holds it only as the double 1.0
        b'{"id": 3, "qty": 1.0000000000000000000000000000000000000001, "name": "n"}',
        b'{"id": 4, "qty": 5.0, "name": "five", "x": {"y": 1}}',
        b'{"id": 6, "qty": 6.00, "name": 1.50}',
        # A key is found as written, whatever characters it has
        b'{"id": 7, "qty": 7, "name": "1.50", "a.b(c)\\\\E": 12345678901234567.89}',
        b'{"id": 5, "qty": 1.5e0, "name": -0.0, "x": 7}',
    ]
    actual = appended(spark, kafka_up, schema, events)
    expected = spark.createDataFrame(
        [
            (1, None, "12345678901234567.89", '{"qty":"3.0000000000000000001","x":"0.1E-7"}'),
            (2, 12, "1e2", '{"x":"12345678901234567.89"}'),
            (3, None, "n", '{"qty":"1.0000000000000000000000000000000000000001"}'),
            (4, 5, "five", '{"x":"{\\"y\\":1}"}'),
            (5, None, "-0.0", '{"qty":"1.5e0","x":"7"}'),
            (6, 6, "1.50", None),
            (7, 7, "1.50", '{"a.b(c)\\\\E":"12345678901234567.89"}'),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_numbers_past_a_doubles_range_odd_keys_and_unparsable_variants_are_never_rounded(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """The edges of finding a number's digits: a key with a quote, a key a Python producer
    writes escaped (`caf\\u00e9`), an exponent-form number a DECIMAL(38,20) holds exactly,
    one past a double's range, duplicate keys (the VARIANT parse fails) and a name with both
    quotes (no VARIANT path reads it): the digits are then found in the record's text."""
    schema = (
        "id BIGINT, `it's` BIGINT, d DECIMAL(38,20), s STRING, `café` STRING, r DOUBLE, "
        "`o'k\"` BIGINT"
    )
    events: list[object] = [
        b'{"id": 1, "it\'s": 12000000000.0000000001, "d": 1.2345678901234567891e3, '
        b'"s": 1e400, "caf\\u00e9": 1.50, "r": 1e-400}',
        b'{"id": 2, "it\'s": 7, "d": 1, "s": "x", "q": -1e400, "r": -0.0}',
        b'{"id": 3, "it\'s": 3.0000000000000000001, "it\'s": 3.0000000000000000001}',
        b'{"id": 4, "d": 12345678901234567.89, "s": 2.50, "s": 2.50, "o\'k\\"": 1.2E1}',
        b'{"id": 5, "r": -1E+400}',
    ]
    actual = appended(spark, kafka_up, schema, events)
    three = "3.0000000000000000001"
    expected = spark.createDataFrame(
        [
            (
                1,
                None,
                Decimal("1234.5678901234567891"),
                "1e400",
                "1.5",
                None,  # below a double's range: the map printed 0.0
                None,
                '{"it\'s":"12000000000.0000000001","r":"1e-400"}',
            ),
            (2, 7, Decimal(1), "x", None, -0.0, None, '{"q":"-1e400"}'),
            # The record is whole in bronze; the rescued copy has both, as the map has them
            (3, None, None, None, None, None, None, f'{{"it\'s":"{three}","it\'s":"{three}"}}'),
            (4, None, Decimal("12345678901234567.89"), "2.50", None, None, 12, None),
            # Past a double's range: not the map's "Infinity", the number as written
            (5, None, None, None, None, None, None, '{"r":"-1E+400"}'),
        ],
        f"{schema}, _rescued_data STRING",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def appended(
    spark: SparkSession, settings: Settings, schema: str, events: list[object]
) -> DataFrame:
    """`events` through Kafka, bronze and an append refine into a table of `schema`: silver."""
    _, _, name, settings = events_pipeline(spark, settings, events, mode="append", schema=schema)
    run_refine(spark, settings, name)
    return current(spark, settings, name)


def test_nested_values_decode_as_top_level_ones_exactly_or_the_column_is_rescued(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Spark's JSON reading rounds a nested decimal (13.299 into DECIMAL(12,2) was 13.30),
    makes a nested integer given 3.5, a timestamp given garbage or an overflowing element
    NULL, and a double past its range Infinity, each without a trace. A nested value now
    decodes leaf by leaf as a top-level one does; if any leaf does not, the column is NULL
    and the record's field is rescued."""
    schema = (
        "id INT, n STRUCT<price: DECIMAL(12,2), qty: INT, at: TIMESTAMP, label: STRING>, "
        "items ARRAY<STRUCT<price: DECIMAL(12,2), qty: SMALLINT>>, m MAP<STRING, DOUBLE>, "
        # No VARIANT path reads a name with both quotes: it keeps Spark's reading.
        "`o'k\"` ARRAY<INT>"
    )
    good_n = '"n": {"price": 13.29, "qty": "2", "at": "2024-01-05T10:00:00+01:00", "label": "a"}'
    events = [
        f'{{"id": 1, {good_n}, "items": [{{"price": "1.50", "qty": 1}}], '
        '"m": {"a": "Infinity"}, "o\'k\\"": [1]}',
        '{"id": 2, "n": {"price": 13.299}}',
        '{"id": 3, "items": [{"price": 1.5, "qty": 1}, {"price": 1.5, "qty": 3.5}]}',
        '{"id": 4, "items": [{"qty": 40000}]}',
        '{"id": 5, "n": {"at": "2024-01-01 garbage"}}',
        '{"id": 6, "m": {"a": 1.5, "b": -1e400}}',
        '{"id": 7, "n": {"price": 1e1}}',  # exponent form: its digits cannot be told
        '{"id": 8, "n": null, "items": [null, {"price": null}], "m": {}}',
        '{"id": 9, "n": {"label": 7, "extra": 1}, "items": {"price": 1}, "m": [1]}',
        '{"id": 10, "n": {"label": 1e2}}',  # a string: not the VARIANT's 100.0
        # An undeclared field, at any depth: the value is kept and the field rescued whole.
        '{"id": 11, "items": [{"price": "2.00", "qty": 2}, {"qty": 1, "note": {"x": "y"}}]}',
        # Both: not stored, so rescued and counted as not decoded only.
        '{"id": 12, "n": {"price": 13.299, "extra": 1}}',
    ]
    _, _, name, settings = events_pipeline(
        spark, kafka_up, [e.encode() for e in events], mode="append", schema=schema
    )
    run_refine(spark, settings, name)
    actual = current(spark, settings, name)

    def rescued(field: str, text: str) -> str:
        return json.dumps({field: text}, separators=(",", ":"))

    nulls = (None, None, None, None)
    rows = [
        (
            1,
            Decimal("13.29"),
            2,
            datetime(2024, 1, 5, 9, 0),
            "a",
            [(Decimal("1.50"), 1)],
            {"a": float("inf")},
            None,
        ),
        (2, *nulls, None, None, rescued("n", '{"price":13.299}')),
        (
            3,
            *nulls,
            None,
            None,
            rescued("items", '[{"price":1.5,"qty":1},{"price":1.5,"qty":3.5}]'),
        ),
        (4, *nulls, None, None, rescued("items", '[{"qty":40000}]')),
        (5, *nulls, None, None, rescued("n", '{"at":"2024-01-01 garbage"}')),
        (6, *nulls, None, None, rescued("m", '{"a":1.5,"b":"-Infinity"}')),
        (7, *nulls, None, None, rescued("n", '{"price":10.0}')),
        (8, *nulls, [None, (None, None)], {}, None),
        (
            9,
            None,
            None,
            None,
            "7",
            None,
            None,
            '{"n":"{\\"label\\":7,\\"extra\\":1}","items":"{\\"price\\":1}","m":"[1]"}',
        ),
        (10, *nulls, None, None, rescued("n", '{"label":100.0}')),
        (
            11,
            *nulls,
            [(Decimal("2.00"), 2), (None, 1)],
            None,
            rescued("items", '[{"price":"2.00","qty":2},{"qty":1,"note":{"x":"y"}}]'),
        ),
        (12, *nulls, None, None, rescued("n", '{"price":13.299,"extra":1}')),
    ]
    expected = spark.createDataFrame(
        [(*r[:-1], [1] if r[0] == 1 else None, r[-1]) for r in rows],
        "id INT, n_price DECIMAL(12,2), n_qty INT, n_at TIMESTAMP, n_label STRING, "
        "items ARRAY<STRUCT<price: DECIMAL(12,2), qty: SMALLINT>>, m MAP<STRING, DOUBLE>, "
        "`o'k\"` ARRAY<INT>, _rescued_data STRING",
    )
    # A MAP column cannot be sorted by chispa: both in id order.
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)
    # Per column: the values that did not decode (rescued, the column NULL), and apart from
    # them the values kept whole whose undeclared field was rescued (rows 9 and 11).
    counted = sorted(
        (r["batch_id"], r["rule"], r["action"], r["passed"], r["failed"])
        for r in metrics(spark, settings, name).where("rule LIKE '%:%'").collect()
    )
    assert counted == [
        (0, "decode:items", "rescue", 9, 3),  # rows 3, 4 and 9
        (0, "decode:m", "rescue", 10, 2),  # rows 6 and 9
        (0, "decode:n", "rescue", 7, 5),  # rows 2, 5, 7, 10 and 12
        (0, "undeclared:items", "rescue", 11, 1),
        (0, "undeclared:n", "rescue", 11, 1),
    ]


def test_an_undeclared_field_in_a_struct_in_a_struct_a_maps_values_or_under_a_dotted_name_is_kept(
    spark: SparkSession, kafka_up: Settings
) -> None:
    """Wherever a struct sits (in a struct, as a map's values) and whatever its names hold
    (dots), a field it does not declare leaves the value stored, is rescued whole and is
    counted per column."""
    schema = (
        "id INT, s STRUCT<inner: STRUCT<a: INT>>, mm MAP<STRING, STRUCT<a: INT>>, "
        "`d.o.t` STRUCT<`x.y`: INT>"
    )
    events: list[object] = [
        b'{"id":1,"s":{"inner":{"a":1,"z":2}},"mm":{"k":{"a":1}},"d.o.t":{"x.y":1}}',
        b'{"id":2,"s":{"inner":{"a":2}},"mm":{"k":{"a":2,"b":3}},"d.o.t":{"x.y":2,"x":1}}',
        b'{"id":3,"s":{"inner":{"a":3}},"mm":{"k":{"a":3}},"d.o.t":{"x.y":3}}',
    ]
    _, _, name, settings = events_pipeline(spark, kafka_up, events, mode="append", schema=schema)
    run_refine(spark, settings, name)
    expected = spark.createDataFrame(
        [
            (1, 1, {"k": (1,)}, 1, '{"s":"{\\"inner\\":{\\"a\\":1,\\"z\\":2}}"}'),
            (
                2,
                2,
                {"k": (2,)},
                2,
                '{"mm":"{\\"k\\":{\\"a\\":2,\\"b\\":3}}","d.o.t":"{\\"x.y\\":2,\\"x\\":1}"}',
            ),
            (3, 3, {"k": (3,)}, 3, None),
        ],
        "id INT, s_inner_a INT, mm MAP<STRING, STRUCT<a: INT>>, `d.o.t_x.y` INT, "
        "_rescued_data STRING",
    )
    actual = current(spark, settings, name)
    assert_df_equality(actual.orderBy("id"), expected, ignore_nullable=True)
    counted = sorted(
        (r["batch_id"], r["rule"], r["action"], r["passed"], r["failed"])
        for r in metrics(spark, settings, name).where("rule LIKE '%:%'").collect()
    )
    assert counted == [
        (0, "undeclared:d.o.t", "rescue", 2, 1),
        (0, "undeclared:mm", "rescue", 2, 1),
        (0, "undeclared:s", "rescue", 2, 1),
    ]
