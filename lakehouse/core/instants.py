"""Epoch counts as timestamps and dates, defined once for silver's decoding, CDC source times
and the offline layer's event times; and ISO-8601 texts as timestamps, for both too.

Spark's own conversions (`timestamp_millis`, `timestamp_seconds`) throw on a count whose
microseconds overflow a long, whatever the ANSI setting: one such value (nanoseconds sent where
milliseconds were declared) failed its whole batch, again on every retry. Here such a count, and
any count outside the years 0001-9999 that Spark supports (microseconds sent as milliseconds
land around the year 51,000), reads as null: silver quarantines the record as mistyped, the
offline layer counts the row's time as unreadable. Never an error mid-query, never a far-future
instant stored as if it were data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.core.columns import sql_string

if TYPE_CHECKING:
    from pyspark.sql import Column

# 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999 UTC, in microseconds and in days.
MIN_MICROS, MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999
MIN_DAYS, MAX_DAYS = -719_162, 2_932_896
MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}
ISO_DATE = r"^[+-]?\d{4,}-\d{1,2}-\d{1,2}"
# ISO-8601 forms Spark's cast refuses and real feeds send: RFC 3339's lowercase `t` and `z`,
# Java's `toString` (no seconds when they are zero, a bracketed region after the offset), a
# comma before the fraction. Groups: date, hours and minutes, seconds, fraction, offset or
# `Z`, region. A fraction of a minute (`10:30,5`) is not taken for seconds.
ISO_LOOSE = (
    r"^([+-]?\d{4,}-\d{1,2}-\d{1,2})[Tt ](\d{1,2}:\d{2})(?:(:\d{2})(?:[.,](\d+))?)?"
    r"\s*([Zz]|[+-]\d{2}(?::?\d{2})?)?(?:\[([A-Za-z][A-Za-z0-9_/+-]*)\])?$"
)

# A zone written as a short abbreviation (`10:00:00 BST`, `[PST]`, `CET`): Spark reads it with
# Java's SHORT_IDS or as a tz database region, so BST is Asia/Dhaka (not British Summer Time),
# PST in July is -07:00 and CET in summer +02:00. Which instant the writer meant cannot be
# told, so such a text does not decode (UTC, GMT and UT name one offset and are read), unless
# an offset comes first (`+01:00[CET]`, Java's ZonedDateTime): the offset decides.
ABBREVIATED_ZONE = r"(?<=[\d\s\[])(?!(?i:UTC|GMT|UT)\]?\s*$)[A-Za-z]{2,4}\]?\s*$"
OFFSET_FIRST = r"(?:[Zz]|[+-]\d{2}(?::?\d{2})?)\[[A-Za-z]{2,4}\]\s*$"


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


def iso_timestamp(t: Column) -> Column:
    """An ISO-8601 timestamp: as Spark's cast reads it (with a zone or an offset, else UTC; a
    fraction past microseconds cut), else in one of the `ISO_LOOSE` forms, read in the form
    the cast takes (only for the texts the cast refused). An offset decides the instant, as
    for Java's `ZonedDateTime.parse`; a bracketed region must be one Spark knows; a zone
    abbreviation (`ABBREVIATED_ZONE`) is refused."""
    from pyspark.sql import functions as F

    def part(group: int) -> Column:
        return F.regexp_extract(t, ISO_LOOSE, group)

    seconds = F.when(part(3) == "", F.lit(":00")).otherwise(part(3))
    fraction = F.when(part(4) == "", F.lit("")).otherwise(F.concat(F.lit("."), part(4)))
    local = F.concat(part(1), F.lit("T"), part(2), seconds, fraction)
    region = part(6)
    known = (region == "") | F.concat(local, region).try_cast("timestamp").isNotNull()
    zone = F.when(part(5) == "", region).otherwise(F.upper(part(5)))
    loose = F.when(t.rlike(ISO_LOOSE) & known, F.concat(local, zone).try_cast("timestamp"))
    readable = t.rlike(ISO_DATE) & (~t.rlike(ABBREVIATED_ZONE) | t.rlike(OFFSET_FIRST))
    at = F.when(readable, F.coalesce(t.try_cast("timestamp"), loose))
    # Spark's cast takes the years 0000 and 10000 (`9999-12-31T23:59-01:00`), which Python and
    # most readers cannot hold: such a text does not decode, as an epoch count out of range.
    # Checked on the count and rebuilt from it: `when(range(at), at)` parsed every text twice
    # (4.63 s against 2.42 s per 2M texts, bench/iso_timestamps.py; the count is computed once).
    micros = F.unix_micros(at)
    return F.timestamp_micros(F.when(micros.between(MIN_MICROS, MAX_MICROS), micros))


def supported_date(date: Column) -> Column:
    """`date`, or null outside the years 0001-9999 (Spark's cast takes `+10000-01-01`)."""
    from pyspark.sql import functions as F

    return F.when(F.unix_date(date).between(MIN_DAYS, MAX_DAYS), date)


def iso_timestamp_sql(text: str) -> str:
    """`iso_timestamp` as SQL text, for the offline layer's `iso8601` event times (the hybrid
    view is SQL): the same forms, read the same way (`test_buckets` checks it on the forms
    `test_decode` checks)."""

    def part(group: int) -> str:
        return f"regexp_extract({text}, {sql_string(ISO_LOOSE)}, {group})"

    seconds = f"CASE WHEN {part(3)} = '' THEN ':00' ELSE {part(3)} END"
    fraction = f"CASE WHEN {part(4)} = '' THEN '' ELSE concat('.', {part(4)}) END"
    local = f"concat({part(1)}, 'T', {part(2)}, {seconds}, {fraction})"
    region = part(6)
    known = f"({region} = '' OR try_cast(concat({local}, {region}) AS TIMESTAMP) IS NOT NULL)"
    zone = f"CASE WHEN {part(5)} = '' THEN {region} ELSE upper({part(5)}) END"
    loose = (
        f"CASE WHEN {text} RLIKE {sql_string(ISO_LOOSE)} AND {known} "
        f"THEN try_cast(concat({local}, {zone}) AS TIMESTAMP) END"
    )
    strict = f"try_cast({text} AS TIMESTAMP)"
    readable = (
        f"{text} RLIKE {sql_string(ISO_DATE)} AND (NOT {text} RLIKE {sql_string(ABBREVIATED_ZONE)}"
        f" OR {text} RLIKE {sql_string(OFFSET_FIRST)})"
    )
    at = f"CASE WHEN {readable} THEN coalesce({strict}, {loose}) END"
    micros = f"unix_micros({at})"
    return (
        f"timestamp_micros(CASE WHEN {micros} BETWEEN {MIN_MICROS} AND {MAX_MICROS} "
        f"THEN {micros} END)"
    )
