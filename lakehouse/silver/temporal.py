"""Decoding dates, timestamps and times of day from a field's text (`lakehouse.silver.decode`
says which encodings a column may declare): ISO text through `lakehouse.core.instants`, counts
since the epoch or since midnight in the encoding's unit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakehouse.core import instants
from lakehouse.silver.precise import INTEGER, PLAIN_NUMBER, let

if TYPE_CHECKING:
    from pyspark.sql import Column

# Epoch seconds: the sign and digits down to the microsecond, and the digits below it.
_TO_MICROS = r"^([+-]?\d*\.?\d{0,6})(\d*)$"


def date(t: Column, encoding: str) -> Column:
    """An ISO date (or a whole ISO timestamp's date as written); with `epoch_days` also an
    integer count of days."""
    from pyspark.sql import functions as F

    # Spark's date cast takes `yyyy-mm-dd` followed by a space or `T` and anything at all
    # ("2024-01-05 garbage"): only a date, or a whole ISO timestamp (its date as written).
    whole_iso = t.rlike(instants.ISO_DATE + "$") | instants.iso_timestamp(t).isNotNull()
    # The cast refuses the date of a loose form (`2024-01-05t10:00z`): its date as written.
    written = F.regexp_extract(t, instants.ISO_LOOSE, 1).try_cast("date")
    day = F.coalesce(t.try_cast("date"), written)
    iso = F.when(t.rlike(instants.ISO_DATE) & whole_iso, instants.supported_date(day))
    if encoding == "epoch_days":
        days = F.when(t.rlike(INTEGER), t.try_cast("int"))
        return F.coalesce(iso, instants.epoch_date(days))
    return iso


def timestamp(t: Column, encoding: str) -> Column:
    """An ISO-8601 string, or an integer in the encoding's epoch unit. The session time zone
    is UTC (`lakehouse.core.spark`), so a TIMESTAMP_NTZ from an epoch is its UTC wall time."""
    from pyspark.sql import functions as F

    iso = instants.iso_timestamp(t)
    if encoding == "iso":
        return iso
    if encoding == "epoch_s":
        return F.coalesce(iso, instants.epoch_timestamp(_epoch_seconds(t), "s"))
    whole = F.when(t.rlike(INTEGER), t.try_cast("long"))
    epoch = {
        "epoch_ms": instants.epoch_timestamp(whole, "ms"),
        "epoch_us": instants.epoch_timestamp(whole, "us"),
        "epoch_ns": instants.epoch_timestamp(F.floor(whole.cast("decimal(20,0)") / 1000), "us"),
    }[encoding]
    return F.coalesce(iso, epoch)


# PostgreSQL's `infinity` and `-infinity` as Debezium 3.7 sends them, in any time precision
# mode (probed through the real connector, its JVM in UTC): the word (ZonedTimestamp, a
# `timestamptz`), the extreme long (MicroTimestamp), pgjdbc's DATE_POSITIVE/NEGATIVE_INFINITY
# milliseconds (Timestamp: a `timestamp(0-3)`, or any under `connect`), for a `date` its own day
# counts in the stream; a `date[]`'s, and a `date`'s in the snapshot, overflowed day counts;
# a `timestamptz[]`'s `-infinity` as the year 292269055 (pgjdbc's `-infinity` milliseconds
# printed without their era: `_LOST_ERA`).
# None is a real value in any unit: each lies far past what PostgreSQL can store.
_INFINITE = {
    "timestamp": (
        ("infinity", "+infinity", "9223372036854775807", "9223372036825200000"),
        ("-infinity", "-9223372036854775808", "-9223372036832400000"),
    ),
    "date": (
        ("infinity", "+infinity", "2146033979", "-622191234"),
        ("-infinity", "-2147472691", "-625821272"),
    ),
}
_LOST_ERA = r"^\+292269055-12-02t23:00:00(\.0{1,9})?z$"
# Where they are clamped to: Spark's latest and earliest values (its own JDBC reader's choice
# for PostgreSQL's infinities), read in the session's zone, UTC.
_EXTREMES = {
    "timestamp": ("9999-12-31 23:59:59.999999", "0001-01-01 00:00:00"),
    "date": ("9999-12-31", "0001-01-01"),
}


def infinite(t: Column, kind: str) -> Column:
    """A `kind` (date or timestamp) text that is PostgreSQL's `infinity` -> Spark's latest
    value, `-infinity` -> its earliest; null for any other text."""
    from pyspark.sql import functions as F

    later, earlier = _INFINITE[kind]
    latest, earliest = (F.lit(v).cast(kind) for v in _EXTREMES[kind])
    word = F.lower(t)
    lost_era = word.rlike(_LOST_ERA) if kind == "timestamp" else F.lit(False)
    return F.when(word.isin(*later), latest).when(word.isin(*earlier) | lost_era, earliest)


# 1582-10-15T00:00:00Z, where the Julian calendar gave way to the Gregorian in Java's.
GREGORIAN_START_MICROS = -12_219_292_800_000_000
_DAY = 86_400_000_000


def gregorian_micros(micros: Column) -> Column:
    """A count of microseconds since 1970-01-01 in Java's calendar (Julian before 1582-10-15)
    -> the count of the same date and time in the proleptic Gregorian calendar PostgreSQL and
    Spark use (the same count from 1582-10-15 on). Debezium sends a `timestamp[]`'s elements
    through java.sql.Timestamp (probed: 1582-10-04 12:00 arrives ten days late, 0100-03-01 a
    day early, 0044-03-15 two days early)."""
    from pyspark.sql import functions as F

    # From Julian 0001-01-01 (two days before Gregorian's): earlier counts pass unchanged, to
    # be refused by the range check as every year before 1 is.
    julian = micros.between(instants.MIN_MICROS - 2 * _DAY, GREGORIAN_START_MICROS - 1)
    # Null outside: no overflow (an error under ANSI) on an extreme count, however Spark
    # orders the evaluation.
    inside = F.when(julian, micros)
    time = F.pmod(inside, F.lit(_DAY))
    # Exact: a multiple of a day is a double exactly at these sizes.
    day = ((inside - time) / F.lit(_DAY)).cast("long")
    # The Julian year the day falls in, counted from March 1 (so a Julian February 29 ends
    # it; Richards' algorithm), then how many days the Gregorian calendar ran ahead of the
    # Julian in it: a day for each century year that is no multiple of 400, less two.
    year = F.floor((4 * (day + (2_440_588 + 32_082)) + 3) / F.lit(1461)) - 4800
    ahead = F.floor(year / F.lit(100)) - F.floor(year / F.lit(400)) - 2
    return F.when(julian, (day - ahead) * _DAY + time).otherwise(micros)


def _epoch_seconds(t: Column) -> Column:
    """Epoch seconds as written -> a DECIMAL(20,6) floored to the microsecond, as every other
    unit is (a cast rounds half up: `.1234569` became a microsecond later than written)."""
    from pyspark.sql import functions as F

    micros, below = F.regexp_extract(t, _TO_MICROS, 1), F.regexp_extract(t, _TO_MICROS, 2)
    # Cut toward zero; a negative count with something cut is one microsecond earlier.
    earlier = t.startswith("-") & below.rlike("[1-9]")
    one = F.lit("0.000001").cast("decimal(20,6)")
    seconds = F.when(earlier, F.try_subtract(micros.try_cast("decimal(20,6)"), one)).otherwise(
        micros.try_cast("decimal(20,6)")
    )
    return F.when(t.rlike(PLAIN_NUMBER), seconds.try_cast("decimal(20,6)"))


def time_of_day(t: Column, encoding: str) -> Column:
    """A count since midnight in the encoding's unit -> `HH:MM:SS`, with `.ffffff` when the
    time has a fraction (Python's `time.isoformat()`), or a clock text as sent; null outside
    [00:00, 24:00] (`25:00:00` too) or when a nanosecond count has a part below a microsecond
    (PostgreSQL keeps microseconds)."""
    from pyspark.sql import functions as F

    whole = F.when(t.rlike(INTEGER), t.try_cast("long"))
    micros = {
        "time_ms": F.try_multiply(whole, F.lit(1000)),
        "time_us": whole,
        "time_ns": F.when(whole % 1000 == 0, F.floor(whole / 1000)),
    }[encoding].cast("long")
    iso = F.when(t.rlike(_CLOCK), t)
    return F.coalesce(iso, let(micros, _clock))


# A clock time within PostgreSQL's [00:00:00, 24:00:00], to the microsecond.
_CLOCK = r"^(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?|24:00:00(\.0{1,6})?)$"


def _clock(micros: Column) -> Column:
    """Microseconds since midnight -> `HH:MM:SS[.ffffff]`, null outside [00:00, 24:00]."""
    from pyspark.sql import functions as F

    seconds, fraction = F.floor(micros / 1_000_000).cast("long"), micros % 1_000_000
    text = F.concat(
        F.format_string(
            "%02d:%02d:%02d", F.floor(seconds / 3600), F.floor(seconds / 60) % 60, seconds % 60
        ),
        F.when(
            fraction != 0, F.concat(F.lit("."), F.lpad(fraction.cast("string"), 6, "0"))
        ).otherwise(F.lit("")),
    )
    return F.when(micros.between(0, 86_400_000_000), text)
