"""A JSON number's digits as written, where a double would have rounded them.

Spark's JSON map (`from_json` to `map<string,string>`, the text every field is decoded from)
prints every number with a fraction or an exponent through a double: 12345678901234567.89
reached the decimal decoder as 1.2345678901234568E16, 3.0000000000000000001 reached an INT
column as 3.0 and was stored as 3, a STRING column held `100.0` for `1e2` (and `0` for `-0`,
an integer's print), and a rescued field lost its digits. A VARIANT parse keeps a number's
digits (up to 38).

Only rows where the map printed such a double for a column that needs the digits, or that
hold a nested column (`lakehouse.silver.nested` decodes it from the VARIANT), are parsed as a
VARIANT (`variant`), once, and each such column's text is projected once (`text`, in
`lakehouse.silver.transform.parse_records`): a decoder reads its text several times, and a
pasted-in expression made refine's plan four times larger. No lambda runs per row: higher-order
functions run interpreted. A number read only for its value (an integer, a decimal) needs no
VARIANT where its record holds no number of 16 digits or more (`trusted`): there the print is
the value written.

The VARIANT, too, keeps a number in exponent form, or of more than 38 digits, only as a double.
Its digits are then taken from the record text itself (`_as_written`), or none when they cannot
be told for sure: the value does not decode (and is rescued) rather than decode as the double's
rounding. A string keeps a number as written (`1.50`, not the VARIANT's `1.5`). A string
given an object or array keeps the map's JSON text where its numbers are the values written
(`reprinted`; `1.50` as `1.5`), else does not decode.

A change's row image is cut out of its record by Spark's JSON functions, which print its
numbers so too (a CDC envelope's `after`, a tombstone's key payload, an insert_delete change):
its digits are read in the whole record it came from (`Cut`), whose VARIANT is taken to the
same image. Digits that read as another number than the map's are refused, never taken: they
would belong to another image. A key written in both images of an update, with two texts of
one double, cannot be told.

Limits: a nested value's rescued copy keeps the map's print, as does an object's in a string
column. Where the digits cannot be told (two texts of the same double for one key, or a key
the record writes with other JSON escapes than Spark's, `\\u0041` for `A`), a declared number
column does not decode, a string column holds the VARIANT's text (`1.5` for `1.50`), and
`_rescued_data` the map's print (the record is whole in bronze). A record with a duplicate key
has no VARIANT, nor has a column whose name holds both quote characters a VARIANT path: their
digits are looked up as written only. A DOUBLE column looks up only a number outside its
range: a `0.0` (`1e-400`), in records with a negative exponent, and one past it (`1e400`); and
a `0` in a record with a `-0`: where it cannot be told, it does not decode. Cutting an image
writes a number past a double's range as the string "Infinity": the image's VARIANT tells it
from a string sent so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse.silver import decode

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

VARIANT = "_lh_variant"  # the record parsed as a VARIANT, on rows that need it
_WHOLE = "_lh_whole_variant"  # a cut record's whole, parsed as a VARIANT
TEXT = "_lh_text"  # + column position: a column's text with its digits as written
# Whether the record's text has no number of 16 digits or more (`short`).
SHORT = "_lh_short_numbers"
# How Java prints a double: the map's text of every JSON number with a fraction or exponent
# (one past a double's range is the quoted `"Infinity"`).
DOUBLE_PRINT = r'^(-?[0-9]+\.[0-9]+(E-?[0-9]+)?|"-?Infinity")$'
_WRITTEN_NUMBER = r'"\s*:\s*(-?[0-9][0-9.eE+-]*)'
# A number a double may not hold: 16 digits or more (a dot counted as one), anywhere in a
# record's text (in a string too: then the record is only not `short`).
_LONG_NUMBER = "[0-9.]{16}"
# A plain fraction this long may be below a double's range: `0.<323 zeros>2` rounds to 0.0.
_UNDERFLOW = "." + "0" * 323
_NEGATIVE_ZERO = r":\s*-0"  # a value written as -0 (or -0.5: only a look-up too many)
# In the map's compact text of an object or array: a number it printed through a double (past
# its range as the string "Infinity").
_REPRINTED = r'[:\[,](-?[0-9]+\.[0-9]+(E-?[0-9]+)?|"-?Infinity")[,\]}]'

# How a column's digits are found (`columns`).
WRITTEN = "written"  # strings: a number's text exactly as written (`1.50`, `-0.0`, `1e2`)
VALUE = "value"  # integers, decimals: the value (a `trusted` print), the VARIANT's, as written
NUMBER = "number"  # epoch seconds: the VARIANT's digits, or as written (`1e1` is no count)
ZERO = "zero"  # doubles: a `0.0` the map printed for a number below a double's range


@dataclass(frozen=True)
class Cut:
    """A record cut out of a larger one by Spark's JSON functions, which print its numbers
    through a double (`get_json_object` prints 12345678901234567.89 as 1.2345678901234568E16;
    a VARIANT's text prints an exponent form so): a CDC row image cut out of its envelope, a
    change out of an array. Its digits are read from `whole`, the text it was cut from, and
    `record` takes the whole's VARIANT to the record's, chosen as the cut chose it."""

    whole: Column
    record: Callable[[Column], Column]


def present(value: Column) -> Column:
    """A VARIANT, null for JSON null, as Spark's JSON functions read a null field."""
    from pyspark.sql import functions as F

    return F.when(~F.is_variant_null(value), value)


def columns(struct: StructType, encodings: Mapping[str, str]) -> dict[str, str]:
    """The top-level columns whose value a double can round, each with how its digits are
    found."""
    out = {}
    for f in struct.fields:
        kind, encoding = decode.kind_of(f.dataType), encodings.get(f.name, "")
        if kind == "string" and encoding in ("", "text"):
            out[f.name] = WRITTEN
        elif kind == "integral" or (kind, encoding) in (("decimal", ""), ("decimal", "text")):
            out[f.name] = VALUE
        elif (kind, encoding) == ("timestamp", "epoch_s"):
            out[f.name] = NUMBER
        elif kind == "double":
            out[f.name] = ZERO
    return out


def printed_double(text: Column) -> Column:
    """Whether the map's `text` is a double's print (a `.` or `y` first: most values have
    neither, and a regular expression on every column of every row is measurable)."""
    return (text.contains(".") | text.endswith('y"')) & text.rlike(DOUBLE_PRINT)


def lossy(how: str, current: Column, record: Column) -> Column:
    """Whether the map's `current` may not be a `how` column's number as written: a double's
    print, or for a string a `0` in a `record` that writes a `-0` (the map prints an integer's
    `-0` as `0`; a regular expression only on such rows)."""
    printed = printed_double(current)
    if how != WRITTEN:
        return printed
    return printed | where(current == "0", record.rlike(_NEGATIVE_ZERO))


def reprinted(current: Column) -> Column:
    """Whether the map's `current` may be an object or array (a STRING column given one
    holds its JSON text) whose numbers the map printed otherwise than they were written:
    `{"a":1.2345678901234568E16}` for `{"a": 12345678901234567.89}`, `[1.5,100.0]` for
    `[1.50, 1e2]`, `"Infinity"` for `1e400`. Such a row is parsed as a VARIANT, which tells
    (`text`) whether its numbers are the values written, and a string that reads as such JSON
    (`"[1.50]"`) from an object. One regular expression: a check on the record's text too
    (was it written so?) made refine's generated code ~1 s per million rows slower even where
    it never ran (bench/README)."""
    composite = current.startswith("{") | current.startswith("[")
    return where(composite, current.rlike(_REPRINTED))


def where(condition: Column, check: Column) -> Column:
    """`check` where `condition` holds, else false: for a check of the whole record, which
    Spark's common-subexpression elimination would otherwise run on every row (it hoists an
    expression that several columns' conditions share out of an `and`, not out of a `when`'s
    branch)."""
    from pyspark.sql import functions as F

    return F.when(condition, check).otherwise(F.lit(False))


def trusted(current: Column) -> Column:
    """Whether a VALUE column's double print `current` is the value written (where
    `printed_double`): the record is `short`, so the number was written with at most 15
    digits, and so is the print, which is not zero. Two such decimals that round to the same
    normal double are the same number (a double tells 15 significant digits apart), so no
    VARIANT is needed to tell the value: 12.5 in an orders event parses the record once, not
    twice. Only the form can differ (`12.50` and `1.25e1` print `12.5`): no integer or
    decimal decoder tells them apart, and a rescued value is looked up as written (`in_map`).
    A print with an exponent (from 1e7 on, below 1e-3) is trusted too: one of a subnormal
    double (below 2.3e-308) may not be the number written, but no integer or decimal (at most
    38 fraction digits) holds it, so it is rescued, as written. Not trusted: `"Infinity"`, the
    print of `1e400`; zero, also the print of a number below a double's range (`1e-400`); a
    longer print (Java 17's `Double.toString` may print more digits than the value needs)."""
    from pyspark.sql import functions as F

    # A print (`printed_double`) is digits, a dot, digits, then perhaps `E` and its exponent.
    digits = F.when(current.startswith("-"), F.lit(17)).otherwise(F.lit(16))
    mantissa = F.when(current.contains("E"), F.substring_index(current, "E", 1)).otherwise(current)
    plain = ~current.contains('"') & ~current.isin("0.0", "-0.0")
    return F.col(SHORT) & plain & (F.length(mantissa) <= digits)


def short(record: Column) -> Column:
    """Whether `record` (a record's text as sent) has no number of 16 digits or more: a
    regular expression on the whole text, ~0.4 s per million events of ~110 bytes on this
    machine's two cores, against ~1.2 s for the VARIANT parse it saves (bench/README)."""
    return ~record.rlike(_LONG_NUMBER)


def variant(
    record: Column,
    raw: Column,
    names: Mapping[str, str],
    within: Cut | None = None,
    nested: Sequence[str] = (),
) -> list[Column]:
    """The record's one VARIANT parse (`VARIANT`), only where the map printed a double for a
    `names` column that reads it, or holds a `nested` column (`lakehouse.silver.nested`
    decodes it from the VARIANT); null elsewhere. The columns to project in turn (none when
    no row can need it). A `within` record's is the whole's parse, projected first (read
    several times to find the image, it would be parsed each time), taken to the record."""
    from pyspark.sql import functions as F

    source = within.whole if within else record
    printed = [
        printed_double(raw[n]) & ~trusted(raw[n]) if how == VALUE else lossy(how, raw[n], source)
        for n, how in names.items()
        if how != ZERO
    ]
    printed += [reprinted(raw[n]) for n, how in names.items() if how == WRITTEN]
    # Projected first when a VALUE column reads it: a regular expression on the whole text.
    first = [short(source).alias(SHORT)] if VALUE in names.values() else []
    if within is not None:
        printed += [cut_infinity(raw[n]) for n in names]
    printed += [raw[n].isNotNull() for n in nested]
    if not printed:
        return []
    needed = printed[0]
    for p in printed[1:]:
        needed = needed | p
    if within is None:
        return [*first, F.when(needed, F.try_parse_json(record)).alias(VARIANT)]
    whole = F.col(_WHOLE)
    # A whole that parses but holds no such record is a JSON null, not "no VARIANT": only a
    # text that does not parse has its digits looked up in the text alone.
    image = F.coalesce(within.record(whole), F.parse_json(F.lit("null")))
    return [
        *first,
        F.when(needed, F.try_parse_json(within.whole)).alias(_WHOLE),
        F.when(whole.isNotNull(), image).alias(VARIANT),
    ]


def cut_infinity(current: Column) -> Column:
    """Whether a cut record's map text may be a number past a double's range, which
    get_json_object writes as the string "Infinity" (the map alone prints it quoted)."""
    return current.isin("Infinity", "-Infinity")


def text(name: str, how: str, current: Column, record: Column, cut: bool = False) -> Column:
    """Column `name`'s text with a JSON number's digits as written (`how`: see `columns`);
    `current` (the map's text) where the map printed no double, or for a string or a nested
    value. Null (the value does not decode) where the digits cannot be told: the VARIANT
    holds a double, or failed to parse (duplicate keys), and no single text in the record
    reads as the map's double. A `cut` record's "Infinity" is a number's where its VARIANT
    holds a double there: it reads as the map's print of one."""
    from pyspark.sql import functions as F

    as_json = json.dumps(name, ensure_ascii=False)[1:-1]  # the key as Spark writes it
    key_pattern = F.lit(re.escape(as_json))
    path = variant_path(name)
    kind = None
    if path is not None:
        kind = F.schema_of_variant(F.try_variant_get(F.col(VARIANT), path, "variant"))
    if cut and kind is not None:
        past_range = cut_infinity(current) & kind.isin("DOUBLE", "FLOAT")
        current = F.when(past_range, F.concat(F.lit('"'), current, F.lit('"'))).otherwise(current)
    if how == ZERO:
        return _outside_range(key_pattern, current, record)
    written = _as_written(key_pattern, _map_double(current), record)
    if path is None or kind is None:
        # A `0` may also be a string's: then it is not found as a number.
        zero = F.coalesce(written, current)
        out = F.when(printed_double(current), written).when(lossy(how, current, record), zero)
        if how == WRITTEN:  # an object's or a string's text: cannot be told without a path
            out = out.when(reprinted(current), F.lit(None).cast("string"))
        return out.otherwise(current)
    as_text = F.try_variant_get(F.col(VARIANT), path, "string")
    # Telling a double from a decimal costs ~0.5 s per million rows and column, less than
    # looking for an exponent in the record (bench/README, silver throughput).
    is_double = kind.isin("DOUBLE", "FLOAT")
    # No VARIANT (the text does not parse: duplicate keys): the digits as written. A VARIANT
    # without the key (a cut's image not found in its whole): refused, as the text may hold
    # the key elsewhere, in another image.
    unparsed = F.col(VARIANT).isNull()
    if how == WRITTEN:
        # The VARIANT's decimal drops a trailing zero and -0.0's sign: its text is the last
        # resort (a key written with other escapes, `caf\\u00e9`, is not found as written).
        # An object or array `reprinted` is its JSON value only when every number in the
        # map's text is the number written (the VARIANTs, keys in order, numbers as values,
        # agree; `1.50` is `1.5`): else, `{"a":1.2345678901234568E16}`, it does not decode.
        composite = kind.startswith("OBJECT") | kind.startswith("ARRAY")
        value = F.to_json(F.try_variant_get(F.col(VARIANT), path, "variant"))
        same = F.to_json(F.try_parse_json(current)) == value
        exact = (
            F.when(kind == "STRING", current)
            .when(composite, F.when(same, current))
            .when(~unparsed & kind.isNull(), F.lit(None).cast("string"))
            .otherwise(F.coalesce(written, F.when(~is_double, as_text)))
        )
        return F.when(lossy(how, current, record) | reprinted(current), exact).otherwise(current)
    # Digits that read as another number than the map's belong to another record than
    # the one parsed (a cut's image chosen otherwise): refused, never taken.
    agrees = as_text.try_cast("double") == _map_double(current)
    exact = F.when(unparsed | is_double, written).when(agrees, as_text)
    if how == VALUE:
        return F.when(printed_double(current) & ~trusted(current), exact).otherwise(current)
    return F.when(lossy(how, current, record), exact).otherwise(current)


def _outside_range(key_pattern: Column, current: Column, record: Column) -> Column:
    """A DOUBLE column's text: a double's own rounding is its nature; only a number outside
    its range is looked up (and then does not decode; a rescued copy holds it as written):
    one below it, which the map prints as 0.0, only in a record with a negative exponent or
    a plain fraction of 323 zeros or more in it (4.9e-324 is a double's least), and one past
    it, the map's quoted "Infinity". And a `-0`, which the map prints as `0` (an integer's
    print): -0.0 is not 0.0 (`1 / x`). Null (the value does not decode) where such a number
    cannot be told: a nested field of the same name written `0.0` beside a top-level
    `1e-400`, which both read as 0.0."""
    from pyspark.sql import functions as F

    tiny = record.contains("e-") | record.contains("E-") | record.contains(_UNDERFLOW)
    below = where(current.isin("0.0", "-0.0"), tiny)
    past = current.isin('"Infinity"', '"-Infinity"')
    signed = where(current == "0", record.rlike(_NEGATIVE_ZERO))
    written = _as_written(key_pattern, _map_double(current), record)
    return F.when(below | past | signed, written).otherwise(current)


def _map_double(current: Column) -> Column:
    """The double the map printed (`"Infinity"` quoted)."""
    from pyspark.sql import functions as F

    return F.regexp_replace(current, '"', "").try_cast("double")


def variant_path(name: str) -> str | None:
    """The VARIANT path of the top-level `name` (None: a name with both quote characters)."""
    if "'" not in name:
        return f"$['{name}']"
    if '"' not in name:
        return f'$["{name}"]'
    return None


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
    """`key` as a regular expression matching it as Spark's JSON writes it (`\\` for a
    backslash): every character but an ASCII letter, digit or `_` escaped (Java reads an
    escaped letter or digit as a construct)."""
    from pyspark.sql import functions as F

    as_json = F.regexp_extract(F.to_json(F.array(key)), r'(?s)^\["(.*)"\]$', 1)
    return F.regexp_replace(as_json, r"([^A-Za-z0-9_])", r"\\$1")


def in_map(
    rescued: Column, texts: Mapping[str, Column], record: Column, numbers: Sequence[str] = ()
) -> Column:
    """The map of fields to rescue with every number's text as written: a `texts` column's
    from its own projection, any other key's from the record, as is a `numbers` column's
    (its projection is its value: `12.5` for a written `12.50`; a DOUBLE's is the map's
    print, `1.0E39` for a FLOAT's `1e39`). Where the digits cannot be
    told (see `_as_written`), the map's own print: the record is whole in bronze. One lambda
    per entry: only for the rows and fields to rescue."""
    from pyspark.sql import functions as F

    def value(key: Column, current: Column) -> Column:
        written = _as_written(_literal_pattern(key), _map_double(current), record)
        found = F.coalesce(written, current)
        out = F.when(lossy(WRITTEN, current, record), found).otherwise(current)
        for name, exact in texts.items():
            text = F.coalesce(exact, current)
            if name in numbers:
                # Its projection is a value (the VARIANT's drops trailing zeros, a trusted
                # or a double's print is the print), the rescued text the number as written.
                text = F.when(printed_double(current), F.coalesce(written, text)).otherwise(text)
            out = F.when(key == name, text).otherwise(out)
        return out

    return F.transform_values(rescued, value)
