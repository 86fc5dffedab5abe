"""Time buckets of offline tables: pure arithmetic, in UTC, on half-open intervals.

A bucket of period P is `[start, start + P)` with `start` a multiple of P since the epoch; P
divides a day, so buckets align to UTC midnight and no bucket straddles two days (there is no
daylight saving in UTC). A bucket is *closed* once its end plus the table's buffer is at or
before now: nothing is expected to arrive for it any more, so it may move offline. The time
boundary is always a bucket edge, which makes "time < boundary" the same as "bucket start <
boundary".

Instants are naive `datetime`s in UTC (the Spark session's time zone is UTC, so Spark returns
and accepts them as such).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from lakehouse.core import instants
from lakehouse.core.errors import UsageError
from lakehouse.core.specs import TIME_FORMATS

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import DataType

EPOCH = datetime(1970, 1, 1, tzinfo=UTC).replace(tzinfo=None)  # naive UTC, as Spark hands them


def floor(instant: datetime, bucket: int) -> datetime:
    """The start of the bucket holding `instant`."""
    seconds = _seconds(instant)
    return EPOCH + timedelta(seconds=seconds - seconds % bucket)


def is_edge(instant: datetime, bucket: int) -> bool:
    return _seconds(instant) % bucket == 0 and instant.microsecond == 0


def closed_until(now: datetime, bucket: int, buffer: int) -> datetime:
    """The end of the newest closed bucket: every bucket ending at or before it is closed."""
    return floor(now - timedelta(seconds=buffer), bucket)


def closes_at(end: datetime, buffer: int) -> datetime:
    """When a bucket (or window) ending at `end` is closed."""
    return end + timedelta(seconds=buffer)


def starts(first: datetime, end: datetime, bucket: int) -> list[datetime]:
    """The starts of the buckets in `[first, end)` (both edges)."""
    step = timedelta(seconds=bucket)
    result, at = [], first
    while at < end:
        result.append(at)
        at += step
    return result


def parse_instant(text: str) -> datetime:
    """An instant from a flag: epoch milliseconds (all digits) or ISO-8601 (`2026-01-01`,
    `2026-01-01T04:00`, `...Z`, `...+01:00`; no zone means UTC). Naive UTC."""
    value = text.strip()
    if re.fullmatch(r"-?\d{9,}", value):
        return EPOCH + timedelta(milliseconds=int(value))
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{text!r} is not an instant: use ISO-8601 (2026-01-01T04:00:00Z) or epoch milliseconds"
        ) from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def instant_argument(text: str) -> datetime:
    """`parse_instant` for argparse: a bad value is a usage error naming the flag."""
    import argparse

    try:
        return parse_instant(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _seconds(instant: datetime) -> int:
    return (instant - EPOCH) // timedelta(seconds=1)


# --- Spark expressions (as SQL text, so the hybrid view's SQL and its DataFrame agree) --------


def event_time_sql(column: str, time_format: str) -> str:
    """The instant a row's time column holds, as a timestamp; null when the value cannot be
    read (never an error mid-query: the jobs count such rows and stop with a clear message).
    Numbers may arrive as strings ("1767225600000"), as real feeds send them."""
    raw = f"`{column}`"
    if time_format == "epoch_ms":
        return instants.epoch_timestamp_sql(f"try_cast({raw} AS BIGINT)", "ms")
    if time_format == "epoch_s":
        return instants.epoch_timestamp_sql(f"try_cast({raw} AS BIGINT)", "s")
    if time_format == "iso8601":
        return instants.iso_timestamp_sql(f"trim(CAST({raw} AS STRING))")
    if time_format == "timestamp":
        return f"try_cast({raw} AS TIMESTAMP)"
    raise ValueError(f"time_format {time_format!r}: use one of {', '.join(TIME_FORMATS)}")


def event_time(column: str, time_format: str) -> Column:
    from pyspark.sql import functions as F

    return F.expr(event_time_sql(column, time_format))


def bucket_start(time: Column, bucket: int) -> Column:
    """The start of the bucket holding `time` (a timestamp column)."""
    from pyspark.sql import functions as F

    micros = F.unix_micros(time)
    return F.timestamp_micros(micros - F.pmod(micros, F.lit(bucket * 1_000_000)))


def timestamp_sql(instant: datetime) -> str:
    return f"TIMESTAMP'{instant.isoformat(sep=' ')}'"


def not_before_sql(column: str, time_format: str, kind: DataType, instant: datetime) -> str:
    """`time >= instant, or a time that cannot be read`: the realtime side of the hybrid view.
    A row whose time is missing or unreadable stays visible rather than silently vanishing
    (`realtime_to_offline` refuses to move while such rows exist). On the raw column where its
    type allows, so Delta can skip files by the column's statistics."""
    from pyspark.sql.types import IntegralType, TimestampType

    raw = f"`{column}`"
    millis = (instant - EPOCH) // timedelta(milliseconds=1)
    # A count before the year 0001 is unreadable too (`lakehouse.core.instants`); one after
    # 9999 is after any boundary anyway.
    first_ms, first_s = instants.MIN_MICROS // 1_000, instants.MIN_MICROS // 1_000_000
    if time_format == "epoch_ms" and isinstance(kind, IntegralType):
        return f"({raw} >= {millis} OR {raw} IS NULL OR {raw} < {first_ms})"
    if time_format == "epoch_s" and isinstance(kind, IntegralType):
        seconds = -(-millis // 1000)  # seconds at or after it
        return f"({raw} >= {seconds} OR {raw} IS NULL OR {raw} < {first_s})"
    if time_format == "timestamp" and isinstance(kind, TimestampType):
        return f"({raw} >= {timestamp_sql(instant)} OR {raw} IS NULL)"
    decoded = event_time_sql(column, time_format)
    return f"({decoded} >= {timestamp_sql(instant)} OR {decoded} IS NULL)"
