"""A JSON number's digits as written, for the columns a double would round.

Spark's JSON map (`from_json` to `map<string,string>`, the text every field is decoded from)
renders a number with a fraction through a double: 12345678901234567.89 would reach the
decimal decoder as 1.2345678901234568E16 and be stored rounded, and epoch seconds with
microseconds could lose the last digit. A VARIANT parse keeps the digits (up to 38). The
record is parsed as a VARIANT once (`variant`), only for tables with such columns, and each
such column reads its text from it (`text`): no lambda per row, since higher-order functions
run interpreted. Base64 decimals and epoch integers are strings or whole numbers the map keeps
exactly."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from lakehouse.silver import decode

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

VARIANT = "_lh_variant"  # the record parsed as a VARIANT


def columns(struct: StructType, encodings: Mapping[str, str]) -> list[str]:
    """The top-level columns whose value a JSON number can carry with more digits than a
    double keeps (decimals read from text or numbers, epoch seconds)."""
    return [
        f.name
        for f in struct.fields
        if (decode.kind_of(f.dataType), encodings.get(f.name, ""))
        in (("decimal", ""), ("decimal", "text"), ("timestamp", "epoch_s"))
        and "'" not in f.name
    ]


def variant(text: Column) -> Column:
    """The record's one VARIANT parse, as the column `text` reads."""
    from pyspark.sql import functions as F

    return F.try_parse_json(text).alias(VARIANT)


def text(name: str, current: Column, record: Column) -> Column:
    """Column `name`'s text with a JSON number's digits as written; `current` (the map's text)
    for a string or a nested value.

    The VARIANT keeps a number in exponent form, or of more than 38 digits, only as a double.
    A double it prints in exponent form (below 1e-3 or from 1e7 on) has its digits taken from
    the `record` text itself (`_as_written`), or none when they cannot be told for sure: the
    value then does not decode, rather than decode as the double's rounding
    (`1.234567890123456789E16` was stored as 12345678901234568). Telling a double from a
    decimal costs ~0.5 s per million rows and column, so only doubles printed with an `E` are
    checked: a number in exponent form between 1e-3 and 1e7 with more digits than a double
    keeps still reads as the double. No common producer writes one (Java's BigDecimal, for
    one, uses the exponent form only for negative scales, whose digits fit, and below 1e-6)."""
    from pyspark.sql import functions as F

    as_text = F.try_variant_get(F.col(VARIANT), f"$['{name}']", "string")
    field = F.try_variant_get(F.col(VARIANT), f"$['{name}']", "variant")
    as_double = as_text.contains("E") & F.schema_of_variant(field).isin("DOUBLE", "FLOAT")
    return F.when(as_double, _as_written(name, field, record)).otherwise(
        F.coalesce(as_text, current)
    )


def _as_written(name: str, field: Column, record: Column) -> Column:
    """The number written for the top-level `name` in `record`, found as `"name": <number>`
    and read as the VARIANT's double: only when exactly one such text does (a nested field of
    the same name, or a key ending in an escaped `"name`, may be another candidate; two
    different texts of the same double cannot be told apart). Only rows whose field the
    VARIANT holds as a double get here, so the lambda's interpreted cost is theirs alone."""
    from pyspark.sql import functions as F

    pattern = '"' + re.escape(name) + r'"\s*:\s*(-?[0-9][0-9.eE+-]*)'
    found = F.array_distinct(F.regexp_extract_all(record, F.lit(pattern), F.lit(1)))
    double = F.try_variant_get(field, "$", "double")
    same = F.filter(found, lambda written: written.try_cast("double") == double)
    return F.when(F.size(same) == 1, F.get(same, 0))


def in_map(raw: Column, names: Sequence[str], record: Column) -> Column:
    """The map `raw` with the exact text of the `names` columns (what a rescued row keeps;
    the map's own text where the digits cannot be told).
    One lambda per entry: only for the rows that have something to rescue."""
    from pyspark.sql import functions as F

    def value(key: Column, current: Column) -> Column:
        out = current
        for name in names:
            exact = F.coalesce(text(name, current, record), current)
            out = F.when(key == name, exact).otherwise(out)
        return out

    return F.transform_values(raw, value)
