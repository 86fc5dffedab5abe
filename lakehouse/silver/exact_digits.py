"""A JSON number's digits as written, where a double would have rounded them.

Spark's JSON map (`from_json` to `map<string,string>`, the text every field is decoded from)
prints every number with a fraction or an exponent through a double: 12345678901234567.89
reached the decimal decoder as 1.2345678901234568E16, 3.0000000000000000001 reached an INT
column as 3.0 and was stored as 3, a STRING column held `100.0` for `1e2`, and a rescued field
lost its digits. A VARIANT parse keeps a number's digits (up to 38).

Only rows where the map printed such a double for a column that needs the digits are parsed
as a VARIANT (`variant`), once, and each such column's text is projected once (`text`, in
`lakehouse.silver.transform.parse_records`): a decoder reads its text several times, and a
pasted-in expression made refine's plan four times larger. No lambda runs per row: higher-order
functions run interpreted.

The VARIANT, too, keeps a number in exponent form, or of more than 38 digits, only as a double.
Its digits are then taken from the record text itself (`_as_written`), or none when they cannot
be told for sure: the value does not decode (and is rescued) rather than decode as the double's
rounding. For decimals and epoch seconds only doubles printed with an `E` are checked, since
telling a double from a decimal costs ~0.5 s per million rows and column: there a number of
more than 38 digits between 1e-3 and 1e7 still reads as its double. Integers and strings check
every double (a float token in such a column is rare), and a string keeps the number as
written (`1.50`, not the VARIANT's `1.5`). Limits: a nested value keeps the map's
print; a key the record writes with other JSON escapes than Spark's own (`\\u0041` for `A`)
is not found (the map's text is kept)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from lakehouse.silver import decode

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

VARIANT = "_lh_variant"  # the record parsed as a VARIANT, on rows that need it
TEXT = "_lh_text"  # + column position: a column's text with its digits as written
# How Java prints a double: the map's text of every JSON number with a fraction or exponent.
DOUBLE_PRINT = r"^-?[0-9]+\.[0-9]+(E-?[0-9]+)?$"
_WRITTEN_NUMBER = r'"\s*:\s*(-?[0-9][0-9.eE+-]*)'


# How a column's digits are found (`columns`).
WRITTEN = "written"  # strings: a number's text exactly as written (`1.50`, `-0.0`, `1e2`)
EVERY_DOUBLE = "every_double"  # integers: any number the VARIANT holds as a double is checked
E_DOUBLE = "e_double"  # decimals, epoch seconds: only a double printed with an `E` is checked


def columns(struct: StructType, encodings: Mapping[str, str]) -> dict[str, str]:
    """The top-level columns whose value a double can round, each with how its digits are
    found."""
    out = {}
    for f in struct.fields:
        kind, encoding = decode.kind_of(f.dataType), encodings.get(f.name, "")
        if "'" in f.name:  # not expressible in a VARIANT path: keeps the map's text
            continue
        if kind == "string" and encoding in ("", "text"):
            out[f.name] = WRITTEN
        elif kind == "integral":
            out[f.name] = EVERY_DOUBLE
        elif (kind, encoding) in (("decimal", ""), ("decimal", "text"), ("timestamp", "epoch_s")):
            out[f.name] = E_DOUBLE
    return out


def printed_double(text: Column) -> Column:
    """Whether the map's `text` is a double's print (a `.` first: most values have none, and a
    regular expression on every column of every row is measurable)."""
    return text.contains(".") & text.rlike(DOUBLE_PRINT)


def variant(record: Column, raw: Column, names: Mapping[str, str]) -> Column:
    """The record's one VARIANT parse, only where the map printed a double for a `names`
    column (null elsewhere: no column reads it there)."""
    from pyspark.sql import functions as F

    printed = [printed_double(raw[n]) for n in names]
    needed = printed[0]
    for p in printed[1:]:
        needed = needed | p
    return F.when(needed, F.try_parse_json(record)).alias(VARIANT)


def text(name: str, how: str, current: Column, record: Column) -> Column:
    """Column `name`'s text with a JSON number's digits as written (`how`: see `columns`);
    `current` (the map's text) where the map printed no double, or for a string or a nested
    value."""
    from pyspark.sql import functions as F

    path = f"$['{name}']"
    as_text = F.try_variant_get(F.col(VARIANT), path, "string")
    field = F.try_variant_get(F.col(VARIANT), path, "variant")
    kind = F.schema_of_variant(field)
    double = F.try_variant_get(field, "$", "double")
    as_json = json.dumps(name, ensure_ascii=False)[1:-1]  # as Spark writes a key
    written = _as_written(F.lit(re.escape(as_json)), double, record)
    if how == WRITTEN:  # the VARIANT's decimal drops a trailing zero, and -0.0's sign
        exact = F.when(kind.isin("STRING", "OBJECT", "ARRAY"), current).otherwise(written)
    else:
        is_double = kind.isin("DOUBLE", "FLOAT")
        checked = is_double if how == EVERY_DOUBLE else as_text.contains("E") & is_double
        exact = F.when(checked, written).otherwise(F.coalesce(as_text, current))
    return F.when(printed_double(current), exact).otherwise(current)


def _as_written(pattern_key: Column, double: Column, record: Column) -> Column:
    """The number written for the top-level key in `record`, found as `"key": <number>` and
    read as `double`: only when exactly one such text does (a nested field of the same name
    may be another candidate; two different texts of the same double cannot be told apart).
    `pattern_key`: the key as a regular expression matching it literally."""
    from pyspark.sql import functions as F

    pattern = F.concat(F.lit('"'), pattern_key, F.lit(_WRITTEN_NUMBER))
    found = F.array_distinct(F.regexp_extract_all(record, pattern, F.lit(1)))
    same = F.filter(found, lambda written: written.try_cast("double") == double)
    return F.when(F.size(same) == 1, F.get(same, 0))


def _literal_pattern(key: Column) -> Column:
    """`key` as a regular expression matching it as JSON writes it (`\\` for a backslash):
    every character but an ASCII letter, digit or `_` escaped (Java reads an escaped letter
    or digit as a construct)."""
    from pyspark.sql import functions as F

    as_json = F.regexp_extract(F.to_json(F.array(key)), r'^\["(.*)"\]$', 1)
    return F.regexp_replace(as_json, r"([^A-Za-z0-9_])", r"\\$1")


def in_map(raw: Column, texts: Mapping[str, Column], record: Column) -> Column:
    """The map `raw` with every number's text as written: a `texts` column's from its own
    projection, any other key's from the record (the map's own text where the digits cannot
    be told). One lambda per entry: only for the rows that have something to rescue."""
    from pyspark.sql import functions as F

    def value(key: Column, current: Column) -> Column:
        written = _as_written(_literal_pattern(key), current.try_cast("double"), record)
        out = F.when(printed_double(current), F.coalesce(written, current)).otherwise(current)
        for name, exact in texts.items():
            out = F.when(key == name, F.coalesce(exact, current)).otherwise(out)
        return out

    return F.transform_values(raw, value)
