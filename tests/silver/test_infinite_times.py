"""PostgreSQL's `infinity` and `-infinity` dates and timestamps, as Debezium 3.7 sends them in
each time precision mode (the texts below were read off its records: a word, the extreme
long, pgjdbc's infinity milliseconds, its date's day counts): clamped to Spark's latest and
earliest values when a table asks for it (`infinite_times: clamp`), else not decoded (and so
quarantined). A count next to a sentinel is no infinity and still does not decode."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, _parse_datatype_string

from lakehouse.core.specs import SilverTableSettings
from lakehouse.silver.decode import decode
from lakehouse.silver.transform import parse_schema

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

Case = tuple[str, Any, Any]  # (text, clamped, not clamped)

# As text (the session's zone is UTC): PySpark cannot collect 0001-01-01 00:00 of a TIMESTAMP
# (Python's `fromtimestamp` fails at year 1).
LATEST, EARLIEST = "9999-12-31 23:59:59.999999", "0001-01-01 00:00:00"
AT = "2024-01-05 10:00:00"
TIMESTAMPS: list[Case] = [
    ("infinity", LATEST, None),  # timestamptz (ZonedTimestamp)
    ("-infinity", EARLIEST, None),
    ("Infinity", LATEST, None),
    ("9223372036854775807", LATEST, None),  # timestamp(6), MicroTimestamp
    ("-9223372036854775808", EARLIEST, None),
    ("9223372036825200000", LATEST, None),  # timestamp(0-3) or connect mode, Timestamp
    ("-9223372036832400000", EARLIEST, None),
    # A `timestamptz[]`'s -infinity: pgjdbc's milliseconds printed without their era.
    ("+292269055-12-02T23:00:00.000000Z", EARLIEST, None),
    ("+292269055-12-02T23:00:00Z", EARLIEST, None),
    ("+292269055-12-02T23:00:01Z", None, None),
    ("9223372036854775806", None, None),  # next to a sentinel: no infinity
    ("9223372036825200001", None, None),
    ("infinityx", None, None),
    ("2024-01-05T10:00:00Z", AT, AT),
]


def decoded(
    spark: SparkSession, type_ddl: str, encoding: str, cases: list[Case], clamp: bool
) -> None:
    kind: DataType = _parse_datatype_string(type_ddl)
    texts = spark.createDataFrame([(i, c[0]) for i, c in enumerate(cases)], "i int, text string")
    value = decode(F.col("text"), kind, encoding, clamp_infinite=clamp)
    assert value is not None
    as_text = type_ddl.startswith("timestamp")
    expected = spark.createDataFrame(
        [(i, c[0], c[1] if clamp else c[2]) for i, c in enumerate(cases)],
        f"i int, text string, value {'string' if as_text else type_ddl}",
    )
    value = value.cast("string") if as_text else value
    assert_df_equality(
        texts.select("i", "text", value.alias("value")),
        expected,
        ignore_nullable=True,
        ignore_row_order=True,
    )


@pytest.mark.parametrize("clamp", [True, False], ids=["clamp", "quarantine"])
@pytest.mark.parametrize("encoding", ["epoch_us", "epoch_ms", "iso"])
@pytest.mark.parametrize("type_ddl", ["timestamp", "timestamp_ntz"])
def test_infinite_timestamps_are_clamped_only_when_asked_in_every_encoding(
    spark: SparkSession, type_ddl: str, encoding: str, clamp: bool
) -> None:
    decoded(spark, type_ddl, encoding, TIMESTAMPS, clamp)


@pytest.mark.parametrize("clamp", [True, False], ids=["clamp", "quarantine"])
@pytest.mark.parametrize("encoding", ["epoch_days", "iso"])
def test_infinite_dates_are_clamped_only_when_asked(
    spark: SparkSession, encoding: str, clamp: bool
) -> None:
    day = (date(2024, 1, 5), date(2024, 1, 5))
    cases: list[Case] = [
        ("infinity", date(9999, 12, 31), None),
        ("-infinity", date(1, 1, 1), None),
        ("2146033979", date(9999, 12, 31), None),  # Debezium's day counts for a `date`
        ("-2147472691", date(1, 1, 1), None),
        ("-622191234", date(9999, 12, 31), None),  # a `date[]`'s, a snapshot's `date`
        ("-625821272", date(1, 1, 1), None),
        ("2146033978", None, None),
        ("2932896", *((date(9999, 12, 31),) * 2 if encoding == "epoch_days" else (None, None))),
        ("2024-01-05", *day),
    ]
    decoded(spark, "date", encoding, cases, clamp)


def test_an_unknown_infinite_times_policy_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="'infinite_times' must be one of quarantine, clamp"):
        SilverTableSettings(
            source="s", mode="scd1", schema="id INT", keys=("id",), infinite_times="max"
        )


def test_a_schema_evolved_by_a_batch_still_clamps(spark: SparkSession) -> None:
    schema = parse_schema("id INT, at TIMESTAMP", clamp_infinite=True)
    evolved = schema.evolved("id INT, at TIMESTAMP", "extra STRING")
    assert (evolved.names, evolved.clamp_infinite) == (["id", "at", "extra"], True)
