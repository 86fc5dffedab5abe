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


def text(name: str, current: Column) -> Column:
    """Column `name`'s text with a JSON number's digits as written; `current` (the map's text)
    for a string or a nested value."""
    from pyspark.sql import functions as F

    return F.coalesce(F.try_variant_get(F.col(VARIANT), f"$['{name}']", "string"), current)


def in_map(raw: Column, names: Sequence[str]) -> Column:
    """The map `raw` with the exact text of the `names` columns (what a rescued row keeps).
    One lambda per entry: only for the rows that have something to rescue."""
    from pyspark.sql import functions as F

    def value(key: Column, current: Column) -> Column:
        out = current
        for name in names:
            out = F.when(key == name, text(name, current)).otherwise(out)
        return out

    return F.transform_values(raw, value)
