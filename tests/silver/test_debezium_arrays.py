"""Debezium's array elements of dates and timestamps, decoded as PostgreSQL stored them.

Debezium 3.7 sends a `timestamp[]`'s elements through java.sql.Timestamp, whose calendar is
Julian before 1582-10-15: 1582-10-04 12:00 arrives as the count of 1582-10-14 12:00 (ten days
late), 0044-03-15 as that of 0044-03-13. A CDC source's nested timestamp counts are read in that
calendar; its top-level ones, an ISO text (a `timestamptz[]`'s) and an events source's counts
are not. And with `infinite_times: clamp`, the infinities an array sends (its own counts and
texts) are clamped as a top-level value's are. The counts below were read off the real
connector's records (adaptive and connect modes)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, _parse_datatype_string

from lakehouse.silver import decode, nested

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

DAY_US = 86_400_000_000


def decoded_arrays(
    spark: SparkSession,
    values: list[str],
    type_ddl: str,
    leaves: dict[str, str],
) -> DataFrame:
    """Each JSON array in `values`, decoded as a nested column of `type_ddl` (its elements
    as text: PySpark cannot collect a TIMESTAMP at 0001-01-01 00:00)."""
    kind: DataType = _parse_datatype_string(type_ddl)
    texts = spark.createDataFrame(list(enumerate(values)), "i int, json string")
    pair = nested.pair(F.try_parse_json("json"), kind, leaves)
    return texts.select("i", nested.value_of(pair).cast("array<string>").alias("value"))


def expect(spark: SparkSession, rows: list[list[str | None] | None]) -> DataFrame:
    return spark.createDataFrame(list(enumerate(rows)), "i int, value array<string>")


def cdc(time_mode: str = "adaptive", clamp: bool = False) -> dict[str, str]:
    return decode.leaf_encodings(decode.kind_encodings("cdc", time_mode=time_mode), "", clamp)


def same(actual: DataFrame, expected: DataFrame) -> None:
    assert_df_equality(actual, expected, ignore_nullable=True, ignore_row_order=True)


def test_timestamp_array_counts_before_1582_read_in_javas_calendar(spark: SparkSession) -> None:
    # (what Debezium sent for the element, PostgreSQL's value): probed.
    cases = [
        ("-12219336000000000", "1582-10-04 12:00:00"),
        ("-60772420800000000", "0044-03-15 12:00:00"),
        ("-14825808000000000", "1500-03-01 00:00:00"),
        ("-14825980800000000", "1500-02-28 00:00:00"),
        ("-62135769600000000", "0001-01-01 00:00:00"),
        ("-62135596800000000", "0001-01-03 00:00:00"),
        ("-59006424599750000", "0100-03-01 06:30:00.25"),
        ("-12219292800000000", "1582-10-15 00:00:00"),  # from here on, the same count
        ("-12218428800000001", "1582-10-24 23:59:59.999999"),
        ("1704448800000000", "2024-01-05 10:00:00"),
    ]
    values = [f"[{count}]" for count, _ in cases]
    # 0044-03-15 12:00 BC: refused, as every year before 1.
    values += ["[-63517953600000000]", '["1582-10-04T12:00:00Z", null]']
    expected: list[list[str | None] | None] = [[at] for _, at in cases]
    expected += [None, ["1582-10-04 12:00:00", None]]  # an ISO text is read as written
    same(decoded_arrays(spark, values, "array<timestamp>", cdc()), expect(spark, expected))
    same(
        decoded_arrays(spark, values[:2], "array<timestamp_ntz>", cdc()),
        expect(spark, expected[:2]),
    )


def test_milliseconds_of_connect_mode_too_but_not_an_events_sources_counts(
    spark: SparkSession,
) -> None:
    ms = ["[-12219336000000]", "[-60772420800000]"]
    same(
        decoded_arrays(spark, ms, "array<timestamp>", cdc("connect")),
        expect(spark, [["1582-10-04 12:00:00"], ["0044-03-15 12:00:00"]]),
    )
    events = decode.leaf_encodings(decode.kind_encodings("events"), "epoch_us")
    same(
        decoded_arrays(spark, ["[-12219336000000000]"], "array<timestamp>", events),
        expect(spark, [["1582-10-14 12:00:00"]]),
    )


def test_a_cdc_sources_top_level_count_is_proleptic_already(spark: SparkSession) -> None:
    value = decode.decode(
        F.lit("-12220200000000000"), _parse_datatype_string("timestamp"), "epoch_us"
    )
    assert value is not None
    assert spark.range(1).select(value.cast("string")).collect()[0][0] == "1582-10-04 12:00:00"


def julian_count(at: datetime) -> int:
    """The model: the count Java's calendar gives `at`'s date and time read as a Julian date
    (the Julian day number by the textbook formula, not the code's algorithm)."""
    y, m, d = at.year, at.month, at.day
    # The formula divides truncating toward zero (`(m - 9) / 7` is 0 for August).
    jdn = 367 * y - (7 * (y + 5001 + int((m - 9) / 7))) // 4 + (275 * m) // 9 + d + 1_729_777
    time = at - datetime(y, m, d)
    return (jdn - 2_440_588) * DAY_US + time // timedelta(microseconds=1)


def test_property_every_date_before_1582_comes_back_as_postgresql_stored_it(
    spark: SparkSession,
) -> None:
    rng = random.Random(1582)  # noqa: S311 - reproducible test data
    first, last = datetime(1, 1, 1), datetime(1582, 10, 4, 23, 59, 59, 999_999)
    span = (last - first) // timedelta(microseconds=1)
    ats = [first, last] + [first + timedelta(microseconds=rng.randrange(span)) for _ in range(300)]
    values = [f"[{julian_count(at)}]" for at in ats]
    expected: list[list[str | None] | None] = [
        [str(at).rstrip("0") if at.microsecond else str(at)] for at in ats
    ]
    same(decoded_arrays(spark, values, "array<timestamp>", cdc()), expect(spark, expected))


@pytest.mark.parametrize("clamp", [True, False], ids=["clamp", "quarantine"])
def test_an_arrays_infinities_are_clamped_only_when_asked(spark: SparkSession, clamp: bool) -> None:
    latest, earliest = "9999-12-31 23:59:59.999999", "0001-01-01 00:00:00"
    # The arrays Debezium sent (probed: a `timestamp[]`, a `timestamptz[]`), clamped.
    stamps = [
        "[9223372036854775807, -9223372036854775808]",
        '["infinity", "+292269055-12-02T23:00:00.000000Z", "2024-01-05T10:00:00Z"]',
    ]
    clamped: list[list[str | None] | None] = [
        [latest, earliest],
        [latest, earliest, "2024-01-05 10:00:00"],
    ]
    same(
        decoded_arrays(spark, stamps, "array<timestamp>", cdc(clamp=clamp)),
        expect(spark, clamped if clamp else [None, None]),
    )
    days = decoded_arrays(
        spark, ["[-622191234, -625821272, 19727]"], "array<date>", cdc(clamp=clamp)
    )
    same(days, expect(spark, [["9999-12-31", "0001-01-01", "2024-01-05"] if clamp else None]))
    ms = decoded_arrays(spark, ["[9223372036825200000]"], "array<timestamp>", cdc("connect", clamp))
    same(ms, expect(spark, [[latest] if clamp else None]))


def test_a_two_dimensional_text_arrays_java_object_names_do_not_decode(
    spark: SparkSession,
) -> None:
    """Debezium 3.7 sends `ARRAY[['a','b'],['c','d']]` in a `text[]` or `text[][]` column as
    `["[Ljava.lang.String;@4f0a4b4b", "[Ljava.lang.String;@5972b745"]` (probed): the values
    are gone, so the change is refused rather than stored as those names. The same text from
    an events feed, and ordinary text, are values."""
    names = '["[Ljava.lang.String;@4f0a4b4b", "[Ljava.lang.String;@5972b745"]'
    values = [names, '["[[I@1b6d3586"]', '["a", "[Ljava", "@4f0a4b4b", null]']
    events = decode.leaf_encodings(decode.kind_encodings("events"), "")
    same(
        decoded_arrays(spark, values, "array<string>", cdc()),
        expect(spark, [None, None, ["a", "[Ljava", "@4f0a4b4b", None]]),
    )
    same(
        decoded_arrays(spark, values, "array<string>", events),
        expect(
            spark,
            [
                ["[Ljava.lang.String;@4f0a4b4b", "[Ljava.lang.String;@5972b745"],
                ["[[I@1b6d3586"],
                ["a", "[Ljava", "@4f0a4b4b", None],
            ],
        ),
    )
