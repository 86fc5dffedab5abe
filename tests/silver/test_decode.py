"""Decoding a field's JSON text into its declared type: every form real feeds and Debezium
send, checked against values written out by hand (base64 decimals against Python's own
two's-complement encoding)."""

from __future__ import annotations

import base64
import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType, _parse_datatype_string

from lakehouse.silver.decode import decode, resolve_encodings
from tests.silver.helpers import ISO_FORMS, MINUTE

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

Case = tuple[str | None, Any]


def b64(unscaled: int) -> str:
    """Debezium's precise decimal: the unscaled value's minimal big-endian two's complement."""
    size = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def check(spark: SparkSession, type_ddl: str, encoding: str, cases: list[Case]) -> None:
    kind: DataType = _parse_datatype_string(type_ddl)
    texts = spark.createDataFrame([(i, t) for i, (t, _) in enumerate(cases)], "i int, text string")
    decoded = decode(F.col("text"), kind, encoding)
    assert decoded is not None
    actual = texts.select("i", "text", decoded.alias("value"))
    expected = spark.createDataFrame(
        [(i, t, v) for i, (t, v) in enumerate(cases)], f"i int, text string, value {type_ddl}"
    )
    assert_df_equality(actual, expected, ignore_nullable=True, ignore_row_order=True)


def test_integers_arrive_as_numbers_or_strings_and_nothing_fractional_is_truncated(
    spark: SparkSession,
) -> None:
    check(
        spark,
        "bigint",
        "",
        [
            ("42", 42),
            (" -7 ", -7),
            ("42.0", 42),
            ("4.5", None),
            ("abc", None),
            ("99999999999999999999", None),
            ("1632463351000", 1632463351000),
            (None, None),
            # The digits as written when a double would have rounded them (`exact_digits`)
            ("1e2", 100),
            ("1.5E1", 15),
            ("1.55E1", None),
            ("4.50", None),
            ("1E40", None),
            ("100e2147483647", None),  # an exponent past an int: not an error mid-query
            ("3.0000000000000000001", None),
        ],
    )
    check(spark, "smallint", "", [("32767", 32767), ("32768", None)])


def test_text_decimals_fit_exactly_or_do_not_decode(spark: SparkSession) -> None:
    check(
        spark,
        "decimal(12,2)",
        "text",
        [
            ("13.29", Decimal("13.29")),
            ("13.290", Decimal("13.29")),
            ("13.299", None),  # never rounded
            ("-0.5", Decimal("-0.50")),
            (".5", Decimal("0.50")),
            ("1e2", Decimal("100.00")),
            ("1.234e1", Decimal("12.34")),
            ("1.2345e1", None),  # 12.345
            ("1.3290000000000000000001e1", None),  # a 22nd fraction digit is one too
            ("1.2E+4", Decimal("12000.00")),
            ("1200e-2", Decimal("12.00")),
            ("-0.000e5", Decimal("0.00")),
            ("0E-7", Decimal("0.00")),  # Java's BigDecimal zero at scale 7
            ("1e-2147483648", None),  # an exponent past an int: not an error mid-query
            ("1.5e-2147483647", None),
            ("100e2147483647", None),
            ("9999999999.99", Decimal("9999999999.99")),
            ("10000000000.00", None),  # 11 integer digits in DECIMAL(12,2)
            ("12,5", None),
            ("", None),
        ],
    )


def test_debezium_precise_decimals_decode_from_their_unscaled_bytes(spark: SparkSession) -> None:
    variable = json.dumps({"scale": 3, "value": b64(123450)})
    check(
        spark,
        "decimal(12,2)",
        "base64",
        [
            (b64(123450), Decimal("1234.50")),
            (b64(0), Decimal("0.00")),
            (b64(-1), Decimal("-0.01")),
            (b64(-256), Decimal("-2.56")),
            (b64(-129), Decimal("-1.29")),
            (b64(128), Decimal("1.28")),
            (b64(999999999999), Decimal("9999999999.99")),
            (b64(-999999999999), Decimal("-9999999999.99")),
            (variable, Decimal("123.45")),  # scale 3, 123.450: its last digit is a zero
            (json.dumps({"scale": 4, "value": b64(123451)}), None),  # 12.3451: not rounded
            ("not base64!", None),
            # Debezium sends padded base64: text Spark's decoder would also take (unpadded,
            # spaced) is a string-mode number, not these bytes ("99" would read as -0.09).
            ("99", None),
            ("AQ", None),
            ("A Q==", None),
            ("A===", None),  # at most two pad characters
            ("AQ==AQ==", None),  # padding only at the end
            (" AQ==", Decimal("0.01")),  # the field's text is trimmed
        ],
    )
    big = 12345678901234567890123456789012345678
    check(
        spark,
        "decimal(38,10)",
        "base64",
        [
            (b64(big), Decimal("1234567890123456789012345678.9012345678")),
            (b64(-big), Decimal("-1234567890123456789012345678.9012345678")),
        ],
    )


def test_precise_decimals_decode_exactly_across_the_64_bit_edge_and_up_to_38_digits(
    spark: SparkSession,
) -> None:
    def raw(data: bytes) -> str:
        return base64.b64encode(data).decode()

    check(
        spark,
        "decimal(38,0)",
        "base64",
        [
            (b64(2**63 - 1), Decimal(2**63 - 1)),  # 8 bytes, the largest signed long
            (b64(-(2**63)), Decimal(-(2**63))),
            (b64(2**63), Decimal(2**63)),  # 9 bytes from here
            (b64(-(2**63) - 1), Decimal(-(2**63) - 1)),
            (b64(2**64), Decimal(2**64)),
            (b64(-(2**64) - 5), Decimal(-(2**64) - 5)),
            (b64(10**38 - 1), Decimal(10**38 - 1)),  # 16 bytes, 38 nines
            (b64(-(10**38) + 1), Decimal(-(10**38) + 1)),
            (b64(10**38), None),  # 39 digits: never stored cut or rounded
            (b64(-(10**38)), None),
            (b64(2**130), None),  # 17 bytes
            (raw(b"\x00\x00\x01"), Decimal(1)),  # sign-extended, not minimal: still exact
            (raw(b"\xff\xff\xff"), Decimal(-1)),
            (raw(b"\x00" * 20 + b"\x07"), Decimal(7)),
            ("", None),
        ],
    )


def test_booleans_arrive_as_json_values_strings_digits_or_postgres_letters(
    spark: SparkSession,
) -> None:
    # The forms systems print: JSON, MySQL's TINYINT(1) (1/0), PostgreSQL's text output (t/f).
    # Nothing else is guessed at: a yes, a 2 or a 1.0 is not a boolean.
    check(
        spark,
        "boolean",
        "",
        [
            ("true", True),
            ("FALSE", False),
            (" True ", True),
            ("1", True),
            ("0", False),
            ("t", True),
            ("F", False),
            ("yes", None),
            ("no", None),
            ("2", None),
            ("-1", None),
            ("1.0", None),
            ("01", None),
            ("", None),
            (None, None),
        ],
    )


def test_doubles_arrive_as_json_values_or_strings(spark: SparkSession) -> None:
    check(
        spark,
        "double",
        "",
        [
            ("1.5", 1.5),
            ("-2", -2.0),
            ("2e3", 2000.0),
            ("x", None),
            ("Infinity", float("inf")),
            ("-Infinity", float("-inf")),
            ("inf", float("inf")),  # Python's str(float("inf"))
            ("\t1.5\n", 1.5),
            ("+Inf", float("inf")),
            # Java's own number syntax, which Spark's cast accepts: no JSON feed means it
            ("1.5d", None),
            ("2F", None),
            ("0x1p3", None),
            # Past the type's range: no value of it (a cast made them Infinity and 0.0)
            ("1e400", None),
            ("-1e400", None),
            ("1e-400", None),
            ("0.0e-400", 0.0),
            ("4.9e-324", 5e-324),
        ],
    )
    check(spark, "float", "", [("1.5", 1.5), ("3.4e39", None), ("1e-50", None), ("0", 0.0)])


def test_times_of_day_are_counts_since_midnight_or_iso_clock_times_within_a_day(
    spark: SparkSession,
) -> None:
    """PostgreSQL's TIME runs from 00:00:00 to 24:00:00; a clock text past it (`25:00:00`,
    `12:60:00`) is no time of day and does not decode."""
    check(
        spark,
        "string",
        "time_us",
        [
            ("43200000000", "12:00:00"),
            ("86400000000", "24:00:00"),
            ("86400000001", None),
            ("-1", None),
            ("1.5", None),
            ("12:30:00", "12:30:00"),
            ("23:59:59.999999", "23:59:59.999999"),
            ("24:00:00", "24:00:00"),
            ("00:00:00.5", "00:00:00.5"),
            ("25:00:00", None),
            ("24:00:01", None),
            ("24:00:00.000001", None),
            ("12:60:00", None),
            ("12:00:60", None),
            ("99:99:99", None),
        ],
    )
    check(spark, "string", "time_ms", [("1500", "00:00:01.500000"), ("86400001", None)])
    check(spark, "string", "time_ns", [("1000", "00:00:00.000001"), ("1001", None)])


def test_dates_are_iso_or_epoch_days_as_declared(spark: SparkSession) -> None:
    check(
        spark,
        "date",
        "iso",
        [
            ("2024-01-05", date(2024, 1, 5)),
            ("19727", None),
            ("2024-01-05 garbage", None),  # Spark's own cast would take it as 2024-01-05
            ("2024-01-05T23:30:00-05:00", date(2024, 1, 5)),  # the date as written
            ("2024-01-05 23:30:00", date(2024, 1, 5)),
            # The forms of `test_timestamps_read_every_iso_form_real_feeds_send`
            ("2024-01-05t23:30z", date(2024, 1, 5)),
            ("2024-01-05T23:30-05:00[America/New_York]", date(2024, 1, 5)),
            ("2024-01-05T23:30:00,5", date(2024, 1, 5)),
            ("2024-01-05T23:30:00[Nowhere/City]", None),
            ("2024-01-05T23:30,5Z", None),
            ("+10000-01-01", None),  # Spark's cast takes the years 0000 and 10000
            ("0000-12-31", None),
            ("9999-12-31", date(9999, 12, 31)),
        ],
    )
    check(
        spark,
        "date",
        "epoch_days",
        [("19727", date(2024, 1, 5)), ("-1", date(1969, 12, 31)), ("2024-01-05", date(2024, 1, 5))],
    )


def test_timestamps_decode_in_the_declared_epoch_unit_or_from_iso(spark: SparkSession) -> None:
    at = datetime(2021, 9, 24, 6, 2, 31)
    at_us = datetime(2021, 9, 24, 6, 2, 31, 123456)
    iso = [
        ("2021-09-24T06:02:31Z", at),
        ("2021-09-24T08:02:31+02:00", at),
        ("2021-09-24 06:02:31", at),
        ("2021-09-24T06:02:31.123456Z", at_us),
    ]
    check(spark, "timestamp", "iso", [*iso, ("1632463351", None), ("soon", None)])
    check(
        spark,
        "timestamp",
        "epoch_s",
        [
            ("1632463351", at),
            ("1632463351.123456", at_us),
            ("2021-09-24T06:02:31Z", at),
            # Below a microsecond: floored, as every other unit is, never rounded up
            ("1632463351.1234569", at_us),
            ("1632463351.12345600000000000000000001", at_us),
            ("-0.0000001", datetime(1969, 12, 31, 23, 59, 59, 999999)),
            ("-1.5", datetime(1969, 12, 31, 23, 59, 58, 500000)),
            ("-99999999999999.9999999", None),  # past DECIMAL(20,6) once floored: no error
        ],
    )
    check(spark, "timestamp", "epoch_ms", [("1632463351000", at), ("1632463351000.5", None)])
    check(spark, "timestamp", "epoch_us", [("1632463351123456", at_us), *iso])
    check(spark, "timestamp", "epoch_ns", [("1632463351123456789", at_us)])
    check(spark, "timestamp_ntz", "epoch_us", [("1632463351123456", at_us)])


def test_timestamps_read_every_iso_form_real_feeds_send(spark: SparkSession) -> None:
    check(spark, "timestamp", "iso", list(ISO_FORMS))
    check(spark, "timestamp", "epoch_ms", [("2021-09-24t06:02z", MINUTE)])
    check(spark, "timestamp_ntz", "iso", [("2021-09-24T08:02+02:00[Europe/Paris]", MINUTE)])


def test_epoch_counts_out_of_range_for_their_unit_do_not_decode_instead_of_failing(
    spark: SparkSession,
) -> None:
    # Nanoseconds declared as milliseconds overflowed Spark's conversion, an error for the
    # whole batch on every retry; microseconds as milliseconds land in the year ~51,700.
    # Both are no instant Spark supports (0001-9999): they do not decode (-> quarantine).
    last_ms = datetime(9999, 12, 31, 23, 59, 59, 999000)
    check(
        spark,
        "timestamp",
        "epoch_ms",
        [("1632463351123456789", None), ("1632463351123456", None), ("253402300799999", last_ms)],
    )
    check(
        spark,
        "timestamp",
        "epoch_s",
        [("1632463351123456", None), ("9223372036854", None), ("253402300800", None)],
    )
    check(spark, "timestamp", "epoch_us", [("9223372036854775807", None)])
    max_ns = datetime(2262, 4, 11, 23, 47, 16, 854775)
    check(spark, "timestamp", "epoch_ns", [("9223372036854775807", max_ns)])
    check(
        spark,
        "date",
        "epoch_days",
        [("1632463351", None), ("2932896", date(9999, 12, 31)), ("2932897", None)],
    )


def test_an_encoding_that_does_not_fit_the_column_type_is_refused_by_name(
    spark: SparkSession,
) -> None:
    struct = _parse_datatype_string("id bigint, at timestamp, amount decimal(10,2), d date")
    assert isinstance(struct, StructType)
    assert resolve_encodings(struct, {"at": "epoch_ms"}, "events") == {
        "at": "epoch_ms",
        "amount": "text",
        "d": "iso",
    }
    assert resolve_encodings(struct, {}, "cdc") == {
        "at": "epoch_us",
        "amount": "base64",
        "d": "epoch_days",
    }
    assert resolve_encodings(struct, {}, "cdc", "string", "connect")["at"] == "epoch_ms"
    with pytest.raises(ValueError, match="'amount' is decimal\\(10,2\\): use one of text, base64"):
        resolve_encodings(struct, {"amount": "epoch_ms"}, "events")
    with pytest.raises(ValueError, match="'id' is bigint: its values take no encoding"):
        resolve_encodings(struct, {"id": "iso"}, "events")
    with pytest.raises(ValueError, match="'nope' is not a top-level column"):
        resolve_encodings(struct, {"nope": "iso"}, "events")
    # A nested column declares an encoding for the leaves whose kind takes it.
    nested = _parse_datatype_string("ts array<timestamp>, n struct<d: date, i: int>, v array<int>")
    assert isinstance(nested, StructType)
    declared = {"ts": "epoch_ms", "n": "epoch_days"}
    assert resolve_encodings(nested, declared, "cdc") == declared
    with pytest.raises(ValueError, match="'n' is struct<d:date,i:int>: use one of iso, epoch_d"):
        resolve_encodings(nested, {"n": "epoch_ms"}, "events")
    with pytest.raises(ValueError, match="'v' is array<int>: its values take no encoding"):
        resolve_encodings(nested, {"v": "iso"}, "events")
