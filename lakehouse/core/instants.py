"""Epoch counts as timestamps and dates, defined once for silver's decoding, CDC source times
and the offline layer's event times.

Spark's own conversions (`timestamp_millis`, `timestamp_seconds`) throw on a count whose
microseconds overflow a long, whatever the ANSI setting: one such value (nanoseconds sent where
milliseconds were declared) failed its whole batch, again on every retry. Here such a count, and
any count outside the years 0001-9999 that Spark supports (microseconds sent as milliseconds
land around the year 51,000), reads as null: silver quarantines the record as mistyped, the
offline layer counts the row's time as unreadable. Never an error mid-query, never a far-future
instant stored as if it were data."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

# 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999 UTC, in microseconds and in days.
MIN_MICROS, MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999
MIN_DAYS, MAX_DAYS = -719_162, 2_932_896
MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}


def epoch_timestamp(count: Column, unit: str) -> Column:
    """A count of `unit` ("s", "ms", "us"; integral, or a decimal of seconds with at most six
    fraction digits) since 1970-01-01 UTC as a timestamp; null outside the supported years."""
    from pyspark.sql import functions as F

    micros = F.try_multiply(count, F.lit(MICROS_PER[unit])).try_cast("long")
    return F.when(micros.between(MIN_MICROS, MAX_MICROS), F.timestamp_micros(micros))


def epoch_timestamp_sql(count_sql: str, unit: str) -> str:
    """`epoch_timestamp` as SQL text, for the filters the hybrid view and the move share."""
    micros = f"try_cast(try_multiply({count_sql}, {MICROS_PER[unit]}) AS BIGINT)"
    return (
        f"CASE WHEN {micros} BETWEEN {MIN_MICROS} AND {MAX_MICROS} "
        f"THEN timestamp_micros({micros}) END"
    )


def epoch_date(days: Column) -> Column:
    """A count of days since 1970-01-01 as a date; null outside the supported years."""
    from pyspark.sql import functions as F

    return F.when(days.between(MIN_DAYS, MAX_DAYS), F.date_from_unix_date(days))
